"""Who a forbidden call that ran belongs to (autograder.reading.forbidden.found_in_trace), from the cells on
its stack as the sandbox's trace reports them: one mistake costs points once, and no answer gains
by calling the library from somewhere else."""

from autograder.reading.forbidden import found_in_trace
from transformer_lm.forbidding import LIBRARY_ATTENTION

SDPA = "scaled_dot_product_attention"
FORWARD = "aten::_scaled_dot_product_flash_attention_for_cpu"
BACKWARD = "aten::_scaled_dot_product_flash_attention_for_cpu_backward"
HELPER, OWN, LATER = 28, 51, 67
"""Three answer cells: a my_attention that calls the library, the attention class checked, a later answer."""
ANSWERS = {HELPER, OWN, LATER}


def found(ran, excused=frozenset()):
    return found_in_trace(LIBRARY_ATTENTION, ran, OWN, ANSWERS, set(excused))


def test_a_call_inside_an_answer_already_charged_is_excused_with_its_backward():
    """The check's own backward() runs the library's backward with no cell on the stack: it goes
    with the forward call, which my_attention (charged already) made."""
    ran = {SDPA: [(HELPER, OWN)], FORWARD: [(HELPER, OWN)], BACKWARD: [()]}
    assert found(ran, {HELPER}) == []
    assert found(ran) == [SDPA]   # my_attention was not charged: the class pays for what it calls


def test_a_call_of_the_answer_itself_is_never_excused():
    assert found({SDPA: [(OWN,)], BACKWARD: [()]}, {HELPER}) == [SDPA]
    assert found({SDPA: [(HELPER, OWN), (OWN,)]}, {HELPER}) == [SDPA]   # once through the helper, once itself


def test_a_backward_whose_forward_was_not_seen_is_the_answers():
    assert found({BACKWARD: [()]}, {HELPER}) == [SDPA]


def test_a_call_through_another_answer_that_was_not_charged_is_the_answers():
    assert found({FORWARD: [(LATER, OWN)], BACKWARD: [()]}, {HELPER}) == [SDPA]
    assert found({FORWARD: [(5,)]}, {HELPER}) == [SDPA]   # an ordinary cell: nobody else to charge


HONEST_SOFTMAX = '''
import torch
from torch import nn

_unused: nn.MultiheadAttention | None = None   # a type hint names the library class


def softmax_stable(x: torch.Tensor) -> "torch.nn.functional.softmax":
    """Like F.softmax or torch.compile'd code, but by hand."""
    # torch.compile(softmax_stable) would be faster; F.softmax is what this replaces
    assert x.dim() >= 1, f"F.softmax needs a dimension, and {nn.MultiheadAttention.__name__} too"
    shift = torch.Tensor(1).fill_(0)   # the legacy constructor of fairseq-style code
    shifted = x - x.amax(dim=-1, keepdim=True) + shift.float()
    exps = torch.exp(shifted)
    return exps / exps.sum(dim=-1, keepdim=True)
'''


def _preflight_of(answer: str, tmp_path):
    """Preflight of assignment 01's solution notebook with ``answer`` in softmax_stable's cell."""
    import importlib.util
    import json

    import notebook_tools as tools
    from autograder.reading.preflight import preflight

    a, nb = "01_attention_basics", "attention_basics.ipynb"
    spec = importlib.util.spec_from_file_location("checks_01", tools.REPO_ROOT / "autograder" / "checks" / f"{a}.py")
    checks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(checks)
    path = tmp_path / nb
    path.write_text(json.dumps(tools.replace_solution(tools.REPO_ROOT / "source" / a / nb, "softmax_stable", answer)))
    release = json.loads((tools.REPO_ROOT / "release" / a / nb).read_text())["cells"]
    return preflight(path, release, checks.ITEMS)


def test_honest_text_is_never_an_accusation(tmp_path):
    """Comments, docstrings, strings, annotations, assert messages and a legacy constructor that
    name the library (or torch.compile) cost nothing and flag nothing before the run."""
    found = _preflight_of(HONEST_SOFTMAX, tmp_path)
    assert (found.flags, found.item_status) == ([], {})


def test_a_forbidden_call_in_the_code_is_named_before_the_run(tmp_path):
    found = _preflight_of("import torch.nn.functional as F\n\ndef softmax_stable(x):\n    return F.softmax(x, -1)\n",
                          tmp_path)
    status, message = found.item_status["softmax_stable"]
    assert status == "forbidden" and "softmax" in message
    assert found.flags == []
