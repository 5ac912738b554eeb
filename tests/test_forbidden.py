"""Who a forbidden call that ran belongs to (autograder.reading.forbidden.found_in_trace), from the cells on
its stack as the sandbox's trace reports them: one mistake costs points once, and no answer gains
by calling the library from somewhere else."""

import pytest

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


def _preflight_of(answer: str, tmp_path, assignment: str = "01_attention_basics", grade_id: str = "softmax_stable"):
    """Preflight of ``assignment``'s solution notebook with ``answer`` in answer cell ``grade_id``."""
    import importlib.util
    import json

    import notebook_tools as tools
    from autograder.reading.preflight import preflight

    path = next((tools.REPO_ROOT / "source" / assignment).glob("*.ipynb"))
    spec = importlib.util.spec_from_file_location("checks", tools.REPO_ROOT / "autograder" / "checks" /
                                                  f"{assignment}.py")
    checks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(checks)
    submitted = tmp_path / path.name
    submitted.write_text(json.dumps(tools.replace_solution(path, grade_id, answer)))
    release = json.loads((tools.REPO_ROOT / "release" / assignment / path.name).read_text())["cells"]
    return preflight(submitted, release, checks.ITEMS)


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


# Honest code whose names look like the library's: none of it calls a forbidden object.
D2L_SOFTMAX = '''def softmax(X):
    X_exp = torch.exp(X - X.max(dim=-1, keepdim=True).values)
    partition = X_exp.sum(dim=-1, keepdim=True)
    return X_exp / partition


def softmax_stable(x):
    return softmax(x)
'''
TF_STYLE_02 = '''def scaled_dot_product_attention(q, k, v, scale):
    """The TensorFlow tutorial's helper, by hand: softmax(q k^T / scale) v."""
    scores = q @ k.transpose(1, 2) / scale
    weights = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    return (weights / weights.sum(dim=-1, keepdim=True)) @ v


class SelfAttention(nn.Module):
    def __init__(self, input_size, hidden):
        super().__init__()
        self.q = nn.Linear(input_size, hidden)
        self.k = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)
        self.scale = hidden ** 0.5

    def forward(self, x):
        return scaled_dot_product_attention(self.q(x), self.k(x), self.v(x), self.scale)
'''
SHADOWED = '''from torch.nn.functional import softmax


def softmax_stable(x):
    def softmax(row):   # the helper shadows the import inside this function
        e = torch.exp(row - row.amax(dim=-1, keepdim=True))
        return e / e.sum(dim=-1, keepdim=True)
    return softmax(x)
'''


@pytest.mark.parametrize("answer", [D2L_SOFTMAX, SHADOWED], ids=["d2l helper", "a helper shadowing the import"])
def test_a_helper_named_like_the_library_is_the_notebooks_own(answer, tmp_path):
    found = _preflight_of(answer, tmp_path)
    assert (found.flags, found.item_status, found.unsure) == ([], {}, {})


def test_a_helper_named_scaled_dot_product_attention_costs_nothing(tmp_path):
    found = _preflight_of(TF_STYLE_02, tmp_path, "02_multihead_attention", "self_attention")
    assert (found.flags, found.item_status, found.unsure) == ([], {}, {})


def test_isinstance_and_a_weight_copy_from_the_library_layer_cost_nothing(tmp_path):
    import notebook_tools as tools

    source = tools.cell_by_grade_id(tools.read(next((tools.REPO_ROOT / "source" / "03_pytorch_attention")
                                                   .glob("*.ipynb"))), "multiheaded_self_attention").source
    checked = source.replace('        w_q, w_k, w_v = mha.in_proj_weight.chunk(3, dim=0)',
                             '        if not isinstance(mha, nn.MultiheadAttention):\n'
                             '            raise TypeError(f"expected nn.MultiheadAttention, got {type(mha)}")\n'
                             '        w_q, w_k, w_v = mha.in_proj_weight.chunk(3, dim=0)')
    assert checked != source
    found = _preflight_of(checked, tmp_path, "03_pytorch_attention", "multiheaded_self_attention")
    assert (found.flags, found.item_status, found.unsure) == ([], {}, {})


@pytest.mark.parametrize("answer", [
    "from torch.nn.functional import softmax as normalise\n\n\ndef softmax_stable(x):\n    return normalise(x, -1)\n",
    "import torch as t\n\n\ndef softmax_stable(x):\n    return t.special.softmax(x, -1)\n",
    "def softmax_stable(x):\n    return torch._C._VariableFunctions.softmax(x, -1)\n",
    "def softmax_stable(x):\n    return torch.ops.aten._softmax(x, -1, False)\n",
    "def softmax_stable(x):\n    q = torch.zeros(x.shape[-1], 1)\n"
    "    return torch.nn.functional.scaled_dot_product_attention(q, x, torch.eye(x.shape[-1]))\n",
], ids=["an alias", "another module's name", "torch's own alias", "an ATen operator", "attention as a softmax"])
def test_a_call_that_resolves_to_the_library_is_forbidden_before_the_run(answer, tmp_path):
    status, message = _preflight_of(answer, tmp_path).item_status["softmax_stable"]
    assert status == "forbidden" and "softmax" in message


@pytest.mark.parametrize("answer", [
    "def softmax_stable(x):\n    return x.softmax(-1)\n",
    "def softmax_stable(x):\n    normalise = torch.nn.functional.softmax\n    return normalise(x, -1)\n",
    "def softmax_stable(x):\n    return nn.Softmax(dim=-1)(x)\n",
], ids=["a method of a value", "a forbidden function kept in a variable", "the library layer built"])
def test_a_use_the_reading_cannot_settle_costs_nothing_before_the_run(answer, tmp_path):
    found = _preflight_of(answer, tmp_path)
    assert found.item_status == {} and found.unsure["softmax_stable"].name == "softmax"


def test_an_answer_nested_deeper_than_a_walk_can_follow_is_left_to_the_run(tmp_path):
    """An expression thousands of levels deep parses, but walking its scopes would pass Python's
    recursion limit: the reading says nothing of it (before, the grader faulted), and the run decides."""
    from transformer_lm.source_scan import parse_cell

    answer = f"def softmax_stable(x):\n    y = {'+'.join(['x'] * 2_000)}\n    return torch.softmax(x, -1)\n"
    assert parse_cell(answer) is not None
    found = _preflight_of(answer, tmp_path)
    assert found.item_status == {} and found.unsure == {}
