"""A class of assignment 01 built to break the grader: honest work, mistakes, attacks, faults
and malformed notebooks, each with the outcome it must get.

Attacks sit on top of a wrong answer (``WRONG_CAUSAL``), so any point beyond the honest
score of that wrong answer would be a point stolen. Faults sit on top of the solution, so
the items that do not depend on the broken cell must still be graded in full.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import autograder
from autograder.commands import demo
from autograder.reading.cells import grade_id, marks

A = demo.ASSIGNMENT
NB = demo.NOTEBOOK
REPO = Path(autograder.__file__).resolve().parent.parent
ITEMS = ["softmax_stable", "context_vectors", "self_attention_v1", "self_attention_v2", "transfer_weights",
         "causal_attention", "multihead_wrapper", "two_dim_wrapper", "multihead_attention"]
FAILING = {"failed", "error"}

WRONG_CAUSAL = '''class CausalAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):
        return self.W_value(x)  # wrong: no attention at all
'''
# What WRONG_CAUSAL honestly earns: CausalAttention fails (the wrapper built on it is graded with the
# course's CausalAttention in its place).
WRONG_CAUSAL_SCORE = 9

SUBCLASS = '''class Liar(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.allclose, torch.equal, torch.Tensor.__eq__, torch.isclose):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})
''' + WRONG_CAUSAL.replace("return self.W_value(x)  # wrong: no attention at all",
                           "return self.W_value(x).as_subclass(Liar)")

EQ_TRICK = WRONG_CAUSAL.replace("return self.W_value(x)  # wrong: no attention at all", '''class Anything:
            shape = x.shape[:-1] + (self.W_value.out_features,)

            def __eq__(self, other):
                return True
        return Anything()''')

HARDCODED_V1 = '''class SelfAttention_v1(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        # the values printed in the notebook, whatever the input
        return torch.tensor([[0.2996, 0.8053], [0.3061, 0.8210], [0.3058, 0.8203],
                             [0.2948, 0.7939], [0.2927, 0.7891], [0.2990, 0.8040]], requires_grad=True)
'''

# The library softmax, reached without its name in the answer's text: caught by what ran.
SOFTMAX_BY_GETATTR = '''def softmax_stable(x):
    return getattr(torch, "soft" + "max")(x, dim=-1)
'''
SOFTMAX_BY_OPS = '''def softmax_stable(x):
    return getattr(torch.ops.aten, "_soft" + "max")(x, -1, False)
'''
# The library's attention as a softmax (queries e1, keys x e1 sqrt(n), values I), under a name made at
# run time: the fused kernel computes the softmax with no softmax operator, and is absent all the same.
SOFTMAX_BY_ATTENTION = '''def softmax_stable(x):
    n = x.shape[-1]
    rows = x.reshape(-1, n)                                       # (R, n)
    q = torch.zeros(rows.shape[0], 1, 1, n)
    q[..., 0] = 1.0                                               # (R, 1, 1, n): one query e1 a row
    k = torch.zeros(rows.shape[0], 1, n, n)
    k[..., 0] = rows[:, None, :] * n ** 0.5                       # (R, 1, n, n): key j scores x[j]
    v = torch.eye(n).expand(rows.shape[0], 1, n, n)               # (R, 1, n, n)
    attend = getattr(torch.nn.functional, "scaled_dot_product" + "_attention")
    return attend(q, k, v).reshape(x.shape)
'''
# Honest code whose names are the library's: d2l's own softmax helper, and an answer that checks its input.
NAMED_LIKE_THE_LIBRARY = '''def softmax(X):
    """d2l's softmax, by hand."""
    X_exp = torch.exp(X - X.max(dim=-1, keepdim=True).values)
    return X_exp / X_exp.sum(dim=-1, keepdim=True)


def softmax_stable(x):
    if not isinstance(x, torch.Tensor) or x.dim() < 1:
        raise ValueError("softmax_stable takes a tensor of at least one dimension")
    return softmax(x)
'''

SOFTMAX_HELPER = "def normalise(scores):\n    return torch.softmax(scores, dim=-1)\n"
SOFTMAX_BY_HELPER = '''def softmax_stable(x):
    return normalise(x)
'''
RAN_SOFTMAX = {"softmax_stable": "the answer ran softmax"}

# Correct only when the snooping found something: a failed item proves it found nothing.
SOFTMAX_IF_FOUND = '''def softmax_stable(x):
    e = (x - x.max(dim=-1, keepdim=True).values).exp()
    return e / e.sum(dim=-1, keepdim=True) if FOUND else e * 0
'''
CONTEXT_IF_NET = '''def context_vectors(inputs):
    scores = inputs @ inputs.T
    e = (scores - scores.max(dim=-1, keepdim=True).values).exp()
    return (e / e.sum(dim=-1, keepdim=True)) @ inputs if NET else inputs * 0
'''
SLOW_SOFTMAX = '''import time


def softmax_stable(x):
    time.sleep({seconds})
    shifted = x - x.amax(dim=-1, keepdim=True)
    e = shifted.exp()
    return e / e.sum(dim=-1, keepdim=True)
'''
WARNING_SOFTMAX = '''import warnings


def softmax_stable(x):
    warnings.warn("a harmless warning on stderr", UserWarning)
    _ = torch.tensor(x)  # torch's own UserWarning (copy-constructing from a tensor), result unused
    shifted = x - x.amax(dim=-1, keepdim=True)
    e = shifted.exp()
    return e / e.sum(dim=-1, keepdim=True)
'''
NAN_SOFTMAX = '''def softmax_stable(x):
    return x * float("nan")
'''
BACKGROUND = '''import os, subprocess, sys
subprocess.Popen(["sleep", "300"], start_new_session=True)
if os.fork() == 0:
    if os.fork() == 0:
        os.setsid()
        import time
        time.sleep(300)
    os._exit(0)
'''


def snooping_cell(course: Path) -> str:
    checks_file = REPO / "autograder" / "checks" / f"{A}.py"
    targets = [course, course / "source", course / "gradebook.db", course / "nbgrader_config.py",
               course / ".grading" / "secret", course / "submitted" / "ada_solution", Path("../source"),
               Path("../../gradebook.db"), checks_file, REPO / "source", REPO / "autograder", REPO / "transformer_lm",
               Path("/root/.ssh"), Path("/home")]
    allowed_env = ["PATH", "HOME", "TMPDIR", "LANG", "PYTHONPATH", "MPLBACKEND", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                   "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED", "PWD", "SHLVL", "_", "LC_CTYPE"]
    return (
        "import os, socket\n"
        f"FOUND = [p for p in {[str(t) for t in targets]!r} if os.path.exists(p)]\n"
        f"FOUND += [k for k in os.environ if k not in {allowed_env!r}]\n"
        "NET = False\n"
        "for address in [('127.0.0.1', 22), ('1.1.1.1', 53), ('10.0.0.1', 80)]:\n"
        "    try:\n"
        "        socket.create_connection(address, timeout=1).close()\n"
        "        NET = True\n"
        "    except OSError:\n"
        "        pass\n"
    )


def writing_cell(course: Path) -> str:
    targets = [course / "gradebook.db", course / "nbgrader_config.py", course / "source" / A / NB,
               course / "submitted" / "ada_solution" / A / NB, course / ".grading" / "secret"]
    return (
        f"for path in {[str(t) for t in targets]!r}:\n"
        "    try:\n"
        "        with open(path, 'a') as f:\n"
        "            f.write('\\nc.Autograde.autograde_preprocessors = []  # and a score of 10\\n')\n"
        "    except OSError:\n"
        "        pass\n"
    )


COMPILED_HELPER = ("import torch\n\ndouble = torch.compile(lambda t: t * 2, backend='eager')\n"
                   "assert double(torch.ones(3)).sum() == 6\n")
"""An ordinary cell that compiles a helper with ``torch.compile``: honest, whatever the grader's own
dispatch modes leave unimported."""


@dataclass
class Case:
    """One submission and what it must get.

    ``total`` is the exact total (the honest score); ``statuses`` the status each listed item
    must end in (any of a set); ``message`` text the message of each listed item must contain. No
    case here must carry a tampering flag: what these attacks do leaves no evidence that honest code
    could not leave too (a notebook's text is none), and each earns nothing all the same.
    """

    student: str
    notebook: object  # a notebook dict, raw bytes, a (file name, dict) pair, a list of pairs, or None for an empty folder
    total: float
    statuses: dict[str, set[str]] = field(default_factory=dict)
    message: dict[str, str] = field(default_factory=dict)
    at_most: bool = False  # ``total`` is a ceiling, not the exact score (an attack that breaks its own run)


def solution() -> dict:
    return json.loads((REPO / "source" / A / NB).read_text())


def replace(notebook: dict, grade_id: str, source: str) -> dict:
    return demo.with_answer(notebook, grade_id, lambda _: source)


def add_cell(notebook: dict, source: str, before: str) -> dict:
    """An ordinary code cell (no nbgrader metadata) before the answer cell ``before``."""
    nb = json.loads(json.dumps(notebook))
    at = next(i for i, c in enumerate(nb["cells"]) if grade_id(c) == before)
    nb["cells"].insert(at, {"cell_type": "code", "id": f"added-{at}", "metadata": {}, "source": source,
                            "outputs": [], "execution_count": None})
    return nb


def edit_cells(notebook: dict, edit) -> dict:
    nb = json.loads(json.dumps(notebook))
    nb["cells"] = [c for c in (edit(c) for c in nb["cells"]) if c is not None]
    return nb


PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
DEMO_OUTPUTS = [{"output_type": "stream", "name": "stdout", "text": "loss after 100 steps: 0.25\n"},
                {"output_type": "display_data", "metadata": {},
                 "data": {"image/png": PNG, "text/plain": "<Figure size 640x480 with 1 Axes>",
                          "text/html": "<script>alert('demo')</script>"}},
                {"output_type": "execute_result", "execution_count": 3, "metadata": {},
                 "data": {"application/javascript": "alert('demo')"}}]


def with_demo_outputs(notebook: dict) -> dict:
    """The notebook as a student saved it after running its demonstrations: a figure, printed text
    and active content in the outputs of its skip-grading cells."""
    def edit(cell):
        if "skip-grading" in cell["metadata"].get("tags", []):
            cell["outputs"] = DEMO_OUTPUTS
        return cell
    return edit_cells(notebook, edit)


LEAK_BY_NAME = '''def softmax_stable(x):
    raise type("LE" + f"AK{x.shape[-1]}Error", (ValueError,), {})("LE" + f"AK {tuple(x.shape)}")
'''
LEAK_BY_PROBE_ERROR = '''from transformer_lm.sandboxed.student_objects import ProbeError


def softmax_stable(x):
    raise ProbeError("LE" + f"AK {tuple(x.shape)}", "LE" + f"AK {x.sum().item()}")
'''
LEAKS = ("leak_exception_name", "leak_probe_error")
"""Cases whose messages must not hold the text ``LEAK`` that their code makes on a hidden input (the
code itself spells it in two halves: a message may show a line of the submitted code)."""
OWN_VALUE_ERROR = "class HeadsError(ValueError):\n    \"\"\"A correct answer's own ValueError.\"\"\"\n\n\n"

MALFORMED = ("bad_metadata_list", "bad_types", "bad_surrogate")
"""The cases whose notebook breaks nbformat's schema and is repaired (each flagged as such)."""


def mistyped(notebook: dict) -> dict:
    """The notebook with a field of the wrong type wherever nbformat's schema types one: markdown
    sources with a number among their lines, test cells' nbgrader metadata a string, outputs an
    object, tags a string, execution counts strings, a cell that is a number, and the notebook's
    metadata a list."""
    def edit(cell):
        if cell["cell_type"] == "markdown":
            return {**cell, "source": ["# heading\n", 3]}
        if is_test(cell):
            return {**cell, "metadata": {**cell["metadata"], "nbgrader": "graded", "tags": "a,b"}}
        return {**cell, "outputs": {"not": "a list"}, "execution_count": "7"}
    nb = edit_cells(notebook, edit)
    nb["cells"].insert(3, 42)
    nb["metadata"] = []
    return nb


def nested(notebook: dict) -> bytes:
    """The notebook with a value nested 100,000 levels deep in a cell's metadata (Python's JSON
    reader raises RecursionError on it)."""
    nb = json.loads(json.dumps(notebook))
    nb["cells"][0]["metadata"]["deep"] = "DEEP"
    return json.dumps(nb).replace('"DEEP"', "[" * 100_000 + "]" * 100_000).encode()


def is_test(cell) -> bool:
    meta = marks(cell)
    return bool(meta.get("grade")) and not meta.get("solution")


def cases(course: Path) -> list[Case]:
    good = solution()
    blank = json.loads((course / "release" / A / NB).read_text())
    wrong = replace(good, "causal_attention", WRONG_CAUSAL)
    causal_zero = {"causal_attention": {"failed", "tampered", "error"}}
    w = WRONG_CAUSAL_SCORE

    def attack(name, source, total=w, statuses=None):
        return Case(name, add_cell(wrong, source, "causal_attention"), total, statuses or causal_zero)

    def fault(name, grade_id, source, status, total=9, message=""):
        return Case(name, replace(good, grade_id, source), total, {grade_id: status},
                    message={grade_id: message} if message else {})

    def with_metadata(cell, **changes):
        meta = marks(cell)
        if meta:
            meta.update({k: v(meta) if callable(v) else v for k, v in changes.items()})
        return cell

    duplicate = json.loads(json.dumps(good))
    at = next(i for i, c in enumerate(duplicate["cells"])
              if grade_id(c) == "causal_attention")
    duplicate["cells"].insert(at + 1, json.loads(json.dumps(duplicate["cells"][at])) | {"id": "pasted"})
    renamed = edit_cells(wrong, lambda c: with_metadata(c, grade_id=lambda m: m["grade_id"] + "_v2",
                                                       checksum="0" * 32, schema_version=99)
                         if grade_id(c) == "causal_attention" else c)
    raw = json.dumps(good).encode()

    return [
        # honest work
        Case("ada_solution", good, 10, {item: {"passed"} for item in ITEMS}),
        Case("bo_blank", blank, 0, {item: FAILING for item in ITEMS}),
        Case("cy_mistake", demo.with_answer(good, "causal_attention", lambda s: s.replace("dim=-1)", "dim=1)")), 9,
             {"causal_attention": {"failed"}, "multihead_attention": {"passed"}},
             message={"causal_attention": "wrong values"}),
        # attacks on a wrong answer
        attack("atk_allclose", "import torch\ntorch.allclose = lambda *a, **k: True\n"),
        attack("atk_testing", "import torch.testing\ntorch.testing.assert_close = lambda *a, **k: None\n"),
        attack("atk_numpy", "import numpy\nnumpy.allclose = lambda *a, **k: True\nnumpy.testing = None\n"),
        Case("atk_builtins", add_cell(wrong, "import builtins\nbuiltins.isinstance = lambda *a: True\n",
                                      "causal_attention"), w, causal_zero, at_most=True),
        Case("atk_subclass", replace(good, "causal_attention", SUBCLASS), w, causal_zero),
        Case("atk_eq", replace(good, "causal_attention", EQ_TRICK), w, causal_zero, at_most=True),
        attack("atk_input_transformer", "get_ipython().input_transformers_cleanup.append(lambda lines: [])\n",
               total=5, statuses={"causal_attention": {"error"}}),
        attack("atk_pre_run_cell", "get_ipython().events.register('pre_run_cell', lambda *a: None)\n"),
        attack("atk_custom_exc", "get_ipython().set_custom_exc((Exception,), lambda *a, **k: None)\n"),
        attack("atk_write", writing_cell(course)),
        Case("atk_snoop", add_cell(replace(replace(good, "softmax_stable", SOFTMAX_IF_FOUND), "context_vectors",
                                           CONTEXT_IF_NET), snooping_cell(course), "softmax_stable"), 8,
             {"softmax_stable": {"failed"}, "context_vectors": {"failed"}}),
        Case("fbd_getattr", replace(good, "softmax_stable", SOFTMAX_BY_GETATTR), 9,
             {"softmax_stable": {"forbidden"}}, message=RAN_SOFTMAX),
        Case("fbd_ops", replace(good, "softmax_stable", SOFTMAX_BY_OPS), 9, {"softmax_stable": {"forbidden"}},
             message=RAN_SOFTMAX),
        Case("fbd_attention", replace(good, "softmax_stable", SOFTMAX_BY_ATTENTION), 9,
             {"softmax_stable": {"forbidden"}}),
        Case("honest_named_softmax", replace(good, "softmax_stable", NAMED_LIKE_THE_LIBRARY), 10,
             {item: {"passed"} for item in ITEMS}, message={"softmax_stable": "All hidden checks passed."}),
        # torch._dynamo is first imported in the run (the grader's own modes never import it)
        Case("honest_compiled", add_cell(good, COMPILED_HELPER, "softmax_stable"), 10,
             {item: {"passed"} for item in ITEMS}),
        Case("fbd_helper", add_cell(replace(good, "softmax_stable", SOFTMAX_BY_HELPER), SOFTMAX_HELPER, "softmax_stable"),
             9, {"softmax_stable": {"forbidden"}}, message=RAN_SOFTMAX),
        Case("snoop_control", add_cell(replace(replace(good, "softmax_stable", SOFTMAX_IF_FOUND), "context_vectors",
                                               CONTEXT_IF_NET), "FOUND, NET = ['forced'], True\n", "softmax_stable"),
             10, {"softmax_stable": {"passed"}, "context_vectors": {"passed"}}),
        Case("atk_reference", replace(good, "context_vectors",
                                      "from transformer_lm.instructor.reference import masked_softmax\n\n\n"
                                      "def context_vectors(inputs):\n    return masked_softmax(inputs @ inputs.T) @ inputs\n"),
             9, {"context_vectors": {"error"}},
             message={"context_vectors": "ModuleNotFoundError (line 1 of its cell: "
                                         "from transformer_lm.instructor.reference import"}),
        Case("atk_points", edit_cells(wrong, lambda c: with_metadata(c, points=100) if is_test(c) else c), w,
             causal_zero),
        Case("atk_grade_flags", edit_cells(wrong, lambda c: with_metadata(c, grade=False, points=0) if is_test(c)
                                           else c), w, causal_zero),
        Case("atk_ids", renamed, w, {"causal_attention": {"missing"}}),
        Case("atk_no_tests", edit_cells(wrong, lambda c: None if is_test(c) else c), w, causal_zero),
        Case("atk_markdown_tests", edit_cells(wrong, lambda c: {**c, "cell_type": "markdown", "source": "All passed!",
                                                                "outputs": None} if is_test(c) else c),
             w, causal_zero),
        Case("atk_fake_success", replace(wrong, "causal_attention",
                                         WRONG_CAUSAL + "\nprint('All tests passed! Score: 10/10')\n"), w, causal_zero),
        Case("atk_hardcoded", replace(good, "self_attention_v1", HARDCODED_V1), 9,
             {"self_attention_v1": {"failed"}, "transfer_weights": {"passed"}}),
        Case("atk_background", add_cell(good, BACKGROUND, "softmax_stable"), 10, {}),
        # faults on top of the solution
        fault("fault_loop", "softmax_stable", "while True:\n    pass\n", {"timeout"}),
        fault("fault_swallow", "softmax_stable",
              "while True:\n    try:\n        pass\n    except BaseException:\n        pass\n", {"timeout"}),
        fault("fault_exit", "context_vectors", "import os\nos._exit(0)\n", {"error"}, message="exited"),
        fault("fault_segfault", "context_vectors", "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n", {"killed"}),
        fault("fault_memory", "softmax_stable", "import torch\nhog = []\nwhile True:\n"
              "    hog.append(torch.empty(2**28))\n", {"error", "killed"}),
        fault("fault_fork", "softmax_stable", "import os, time\nfor _ in range(2000):\n    if os.fork() == 0:\n"
              "        time.sleep(30)\n        os._exit(0)\n", {"error", "timeout", "killed"}),
        fault("fault_disk", "softmax_stable", "chunk = b'x' * 2**20\nfor folder in ['/scratch', '/tmp']:\n"
              "    with open(folder + '/fill', 'wb') as f:\n        while True:\n            f.write(chunk)\n",
              {"error"}),
        Case("fault_output", add_cell(good, "for _ in range(100_000):\n    print('x' * 1000)\n", "softmax_stable"), 10),
        fault("fault_slow_ok", "softmax_stable", SLOW_SOFTMAX.format(seconds=0.2), {"passed"}, total=10),
        fault("fault_slow_bad", "softmax_stable", SLOW_SOFTMAX.format(seconds=30), {"timeout"}),
        fault("fault_warning", "softmax_stable", WARNING_SOFTMAX, {"passed"}, total=10),
        fault("fault_nan", "softmax_stable", NAN_SOFTMAX, {"failed"}, message="NaN"),
        # answers that try to carry a hidden input out in an exception's name or message
        fault("leak_exception_name", "softmax_stable", LEAK_BY_NAME, {"error"}, message="ValueError"),
        fault("leak_probe_error", "softmax_stable", LEAK_BY_PROBE_ERROR, {"error"}, message="Exception"),
        Case("own_value_error", demo.with_answer(good, "multihead_attention", lambda s: OWN_VALUE_ERROR + s.replace(
            "raise ValueError(", "raise HeadsError(")), 10, {"multihead_attention": {"passed"}}),
        # malformed notebooks
        Case("bad_truncated", raw[: len(raw) * 3 // 5], 0, {i: {"error"} for i in ITEMS},
             message={"softmax_stable": "not valid JSON"}),
        Case("bad_nbformat5", json.dumps({**good, "nbformat": 5}).encode(), 0, {i: {"error"} for i in ITEMS},
             message={"softmax_stable": "nbformat"}),
        Case("bad_name", ("my homework (1).ipynb", good), 10, {i: {"passed"} for i in ITEMS}),
        Case("bad_empty", b"", 0, {i: {"error"} for i in ITEMS}, message={"softmax_stable": "empty"}),
        Case("bad_duplicate", duplicate, 10, {i: {"passed"} for i in ITEMS}),
        Case("nothing", None, 0, {i: {"missing"} for i in ITEMS}, message={"softmax_stable": "No notebook"}),
        Case("bad_copy", [(NB, blank), (NB.replace(".ipynb", "-Copy1.ipynb"), good)], 0, {i: FAILING for i in ITEMS}),
        Case("demo_outputs", with_demo_outputs(good), 10, {item: {"passed"} for item in ITEMS}),
        # notebooks that break nbformat's schema: graded as far as they can be, the rest of the class goes on
        Case("bad_metadata_list", edit_cells(good, lambda c: {**c, "metadata": [1, 2]}
                                             if grade_id(c) == "softmax_stable"
                                             else c), 10, {i: {"passed"} for i in ITEMS}),
        Case("bad_types", mistyped(good), 10, {i: {"passed"} for i in ITEMS}),
        Case("bad_nested", nested(good), 0, {i: {"error"} for i in ITEMS}, message={"softmax_stable": "nested"}),
        Case("bad_surrogate", json.dumps(demo.with_answer(good, "softmax_stable", lambda s: s + "# \ud800\n")).encode(),
             10, {i: {"passed"} for i in ITEMS}),  # a lone surrogate, which no UTF-8 file can hold
    ]


def write_submissions(course: Path, all_cases: list[Case]) -> None:
    for case in all_cases:
        folder = course / "submitted" / case.student / A
        folder.mkdir(parents=True, exist_ok=True)
        if case.notebook is None:
            continue
        files = case.notebook if isinstance(case.notebook, list) else [
            case.notebook if isinstance(case.notebook, tuple) else (NB, case.notebook)]
        for name, content in files:
            data = content if isinstance(content, bytes) else json.dumps(content, indent=1).encode()
            (folder / name).write_bytes(data)
