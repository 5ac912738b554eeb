"""The trusted grader, end to end: the real CLI, real notebooks, real bubblewrap, real nbgrader.

One class of assignment 01 is graded once for the module: the solution, the blank release,
a typical mistake, attacks on top of wrong answers, a submission that snoops, and one full of
faults. Each test then reads what the grader recorded.
"""

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

import autograder
from autograder import demo, sandbox
from autograder.cli import main

pytestmark = pytest.mark.skipif(sandbox.detect_isolation().name != "bubblewrap",
                                reason=f"needs bubblewrap: {sandbox.detect_isolation().detail}")

A = demo.ASSIGNMENT
NB = demo.NOTEBOOK
WRONG_CAUSAL = '''class CausalAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):
        return self.W_value(x)  # wrong: no attention at all
'''
SUBCLASS = '''class Liar(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.allclose, torch.equal, torch.Tensor.__eq__, torch.isclose):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})
''' + WRONG_CAUSAL.replace("return self.W_value(x)  # wrong: no attention at all",
                           "return self.W_value(x).as_subclass(Liar)")


def solution():
    return json.loads((Path(autograder.__file__).parent.parent / "source" / A / NB).read_text())


def replace(notebook, grade_id, source):
    return demo._with_answer(notebook, grade_id, lambda _: source)


def add_cell(notebook, source, before_grade_id):
    """Adds an ordinary code cell (no nbgrader metadata) before the given answer cell."""
    nb = json.loads(json.dumps(notebook))
    at = next(i for i, c in enumerate(nb["cells"]) if c["metadata"].get("nbgrader", {}).get("grade_id") == before_grade_id)
    nb["cells"].insert(at, {"cell_type": "code", "metadata": {}, "source": source, "outputs": [], "execution_count": None})
    return nb


def snooping_cell(course: Path) -> str:
    checks_file = Path(autograder.__file__).parent / "checks" / f"{A}.py"
    repo = checks_file.parent.parent.parent
    targets = [course, course / "source", course / "gradebook.db", course / "nbgrader_config.py", Path("../source"),
               Path("../../gradebook.db"), checks_file, repo / "source", repo / "autograder", repo / "transformer_lm"]
    return (
        "import os, socket\n"
        f"FOUND = [p for p in {[str(t) for t in targets]!r} if os.path.exists(p)]\n"
        "try:\n"
        "    socket.create_connection(('127.0.0.1', 22), timeout=2).close()\n"
        "    NET = True\n"
        "except OSError:\n"
        "    NET = False\n"
        "try:\n"
        "    socket.create_connection(('1.1.1.1', 53), timeout=2).close()\n"
        "    NET = True\n"
        "except OSError:\n"
        "    pass\n"
    )


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

FAULTS = {
    "softmax_stable": "import os\nos._exit(3)\n",
    "context_vectors": "import ctypes\nctypes.string_at(0)\n",
    "self_attention_v1": "while True:\n    pass\n",
    "self_attention_v2": "while True:\n    try:\n        print('spam ' * 200)\n    except BaseException:\n        pass\n",
    "causal_attention": "import torch\nbig = torch.empty(50 * 2**30 // 4)\n",
}


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("course")
    demo.build_course(root)
    good = solution()
    submissions = {
        "atk_allclose": add_cell(replace(good, "causal_attention", WRONG_CAUSAL),
                                 "import torch\ntorch.allclose = lambda *a, **k: True\n", "causal_attention"),
        "atk_subclass": replace(good, "causal_attention", SUBCLASS),
        "atk_transformer": add_cell(replace(good, "causal_attention", WRONG_CAUSAL),
                                    "get_ipython().input_transformers_cleanup.append(lambda lines: [])\n",
                                    "causal_attention"),
        "atk_gradebook": add_cell(replace(good, "causal_attention", WRONG_CAUSAL),
                                  f"import sqlite3\ndb = sqlite3.connect({str(root / 'gradebook.db')!r})\n"
                                  "db.execute('update grade set manual_score = 10')\ndb.commit()\n", "causal_attention"),
        "atk_config": add_cell(replace(good, "causal_attention", WRONG_CAUSAL),
                               f"with open({str(root / 'nbgrader_config.py')!r}, 'a') as f:\n"
                               "    f.write('\\nc.Autograde.autograde_preprocessors = []\\n')\n", "causal_attention"),
        "snoop": add_cell(replace(replace(good, "softmax_stable", SOFTMAX_IF_FOUND), "context_vectors", CONTEXT_IF_NET),
                          snooping_cell(root), "softmax_stable"),
        "uses_reference": replace(good, "context_vectors",
                                  "from transformer_lm.reference import masked_softmax\n\n\n"
                                  "def context_vectors(inputs):\n"
                                  "    return masked_softmax(inputs @ inputs.T) @ inputs\n"),
        "snoop_control": add_cell(replace(replace(good, "softmax_stable", SOFTMAX_IF_FOUND), "context_vectors",
                                          CONTEXT_IF_NET), "FOUND, NET = ['forced'], True\n", "softmax_stable"),
    }
    faulty = good
    for grade_id, fault in FAULTS.items():
        faulty = replace(faulty, grade_id, fault)
    submissions["faulty"] = faulty
    for student, notebook in submissions.items():
        folder = root / "submitted" / student / A
        folder.mkdir(parents=True)
        (folder / NB).write_text(json.dumps(notebook))
    config_before = (root / "nbgrader_config.py").read_text()
    assert main(["grade", A, "--course", str(root), "--workers", "2", "--cell-timeout", "5"]) == 0
    return root, config_before


def report(course, student):
    root, _ = course
    return json.loads((root / "reports" / A / f"{student}.json").read_text())


def items(course, student):
    return {i["grade_id"]: i for i in report(course, student)["items"]}


def test_solution_gets_full_marks_and_blank_gets_zero(course):
    assert report(course, "ada_solution")["total"] == report(course, "ada_solution")["max_total"] == 10
    assert all(i["status"] == "passed" for i in items(course, "ada_solution").values())
    blank = report(course, "bo_blank")
    assert blank["total"] == 0
    assert all(i["status"] in ("failed", "error") for i in blank["items"])


def test_typical_mistake_is_named(course):
    causal = items(course, "cy_mistake")["causal_attention"]
    assert causal["status"] == "failed" and causal["mistake"] == "softmax over the wrong dimension"
    assert items(course, "cy_mistake")["multihead_attention"]["status"] == "passed"


@pytest.mark.parametrize("student", ["atk_allclose", "atk_subclass", "atk_transformer", "atk_gradebook", "atk_config",
                                     "dee_cheater"])
def test_attacks_on_a_wrong_answer_earn_nothing_and_are_flagged(course, student):
    causal = items(course, student)["causal_attention"]
    assert causal["score"] == 0 and causal["status"] in ("failed", "tampered", "error")
    assert any("Tampering" in flag for flag in report(course, student)["flags"])


def test_attacks_did_not_reach_the_gradebook_or_the_config(course):
    root, config_before = course
    assert (root / "nbgrader_config.py").read_text() == config_before
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}", course_id="self-attention") as gb:
        assert gb.find_submission(A, "atk_gradebook").score == report(course, "atk_gradebook")["total"] < 10
        assert gb.find_submission(A, "ada_solution").score == 10
    manual = sqlite3.connect(root / "gradebook.db").execute("select count(*) from grade where manual_score is not null")
    assert manual.fetchone()[0] == 0


def test_a_snooping_submission_finds_nothing_and_has_no_network(course):
    snoop = items(course, "snoop")
    assert snoop["softmax_stable"]["status"] == "failed", snoop["softmax_stable"]  # FOUND was empty
    assert snoop["context_vectors"]["status"] == "failed", snoop["context_vectors"]  # NET was False
    control = items(course, "snoop_control")
    assert control["softmax_stable"]["status"] == control["context_vectors"]["status"] == "passed"


def test_the_reference_is_not_importable_in_the_sandbox(course):
    item = items(course, "uses_reference")["context_vectors"]
    assert item["status"] == "error" and "No module named 'transformer_lm.reference'" in item["message"], item


def test_faults_end_on_their_own_item_and_the_rest_is_graded(course):
    faulty = items(course, "faulty")
    assert faulty["softmax_stable"]["status"] == "error" and "code 3" in faulty["softmax_stable"]["message"]
    assert faulty["context_vectors"]["status"] == "killed"
    assert faulty["self_attention_v1"]["status"] == "timeout"
    assert faulty["self_attention_v2"]["status"] == "timeout"
    assert faulty["causal_attention"]["status"] in ("error", "killed")
    assert faulty["multihead_attention"]["status"] == "passed"
    assert report(course, "faulty")["total"] == 2


def test_reports_csv_gradebook_and_feedback(course):
    root, _ = course
    rows = (root / "reports" / A / "grades.csv").read_text().splitlines()
    students = sorted(p.name for p in (root / "submitted").iterdir())
    assert len(rows) == 1 + 9 * len(students)
    for item in report(course, "cy_mistake")["items"]:
        assert set(item) >= {"grade_id", "score", "max_score", "status", "message", "hint"}
    page = (root / "feedback" / "cy_mistake" / A / "attention_basics.html").read_text()
    assert "softmax over the wrong dimension" in page and "<script" not in page.lower()
    autograded = json.loads((root / "autograded" / "cy_mistake" / A / NB).read_text())
    assert any("softmax over the wrong dimension" in "".join(o.get("text", "")) for c in autograded["cells"]
               for o in c.get("outputs", []))


def test_nbgrader_autograde_takes_the_trusted_path(course):
    """`nbgrader autograde --force` regrades through the sandbox: same scores, and an attack
    that fools nbgrader's in-kernel tests still earns nothing."""
    root, _ = course
    for student in ("ada_solution", "atk_allclose"):
        done = subprocess.run([sys.executable, "-m", "nbgrader", "autograde", A, "--student", student, "--force"],
                              cwd=root, env=demo.nbgrader_env(), capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}", course_id="self-attention") as gb:
        assert gb.find_submission(A, "ada_solution").score == 10
        assert gb.find_submission(A, "atk_allclose").score == report(course, "atk_allclose")["total"] < 10
    autograded = json.loads((root / "autograded" / "atk_allclose" / A / NB).read_text())
    causal = next(c for c in autograded["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "causal_attention_test")
    assert causal["outputs"][0]["output_type"] == "error"


def test_validate_passes_the_solution_and_fails_the_blank_with_the_notebook_messages(course, tmp_path):
    root, _ = course
    solved = tmp_path / "solved.ipynb"
    shutil.copy(root / "source" / A / NB, solved)
    ok = subprocess.run([sys.executable, "-m", "autograder", "validate", str(solved)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout[-2000:]
    assert "All visible tests passed." in ok.stdout
    blank = subprocess.run([sys.executable, "-m", "autograder", "validate", str(root / "release" / A / NB)],
                           capture_output=True, text=True)
    assert blank.returncode != 0
    assert "FAILED  softmax_stable_test: CheckFailed: TODO: softmax_stable is not written yet" in blank.stdout
