"""docs/adding-an-assignment.md, followed step by step in a scratch course folder: a minimal
assignment gets its solution notebook and its hidden checks (and nothing else of the course
changes), nbgrader makes its release, the visible check passes on the solution and says TODO
on the release, and the grader gives the solution full marks, the blank release zero, and a
typical mistake zero with the mistake named."""

import shutil

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

import notebook_tools as tools
from autograder import sandbox

ASSIGNMENT, NAME = "99_minimal", "minimal"

ANSWER = '''def attention(q, k, v):
    """Scaled dot-product attention of queries q, keys k and values v, each (batch, seq, d)."""
    ### BEGIN SOLUTION
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5  # (batch, seq, seq)
    return torch.softmax(scores, dim=-1) @ v  # (batch, seq, d)
    ### END SOLUTION
'''

VISIBLE_CHECK = '''import torch.nn.functional as F
from transformer_lm import checks

generator = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(2, 4, 3, generator=generator) for _ in range(3))   # (batch, seq, d) each
with checks.forbidding(attention, checks.LIBRARY_ATTENTION):
    got = checks.call_student("attention", attention, q, k, v)
checks.check_close(got, F.scaled_dot_product_attention(q, k, v))
print("attention: Correct, the output matches F.scaled_dot_product_attention.")
'''

HIDDEN_CHECKS = '''"""Hidden checks of the minimal assignment: other sizes than the notebook's."""

import torch

from autograder.spec import Item
from transformer_lm import reference
from transformer_lm.forbidding import LIBRARY_ATTENTION
from transformer_lm.kinds import FunctionCheck, attention_function_candidates


def expected(q, k, v):
    return reference.scaled_dot_product_attention(q, k, v).output


def qkv(generator):
    return {name: torch.randn(3, 5, 4, generator=generator) for name in "qkv"}


ITEMS = [Item("attention", points=10,
              checks=(FunctionCheck("attention", expected, qkv, candidates=attention_function_candidates),),
              forbids=LIBRARY_ATTENTION)]
'''


def nbgrader_cell(cell, **fields):
    cell.metadata["nbgrader"] = {"schema_version": 3, "grade": False, "solution": False, "locked": False, **fields}
    return cell


def solution_notebook():
    """Step 1: a locked setup cell first, the answer under a heading with its points, its test
    cell right after it."""
    nb = new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    nb.cells = [
        nbgrader_cell(new_code_cell("import torch"), grade_id="setup", locked=True),
        new_markdown_cell("## Attention (10 points)\n\nWrite scaled dot-product attention."),
        nbgrader_cell(new_code_cell(ANSWER), grade_id="attention", solution=True),
        nbgrader_cell(new_code_cell(VISIBLE_CHECK), grade_id="attention_test", grade=True, locked=True, points=10),
    ]
    return nb


@pytest.mark.skipif(sandbox.detect_isolation().name != "bubblewrap", reason="needs bubblewrap")
def test_a_minimal_assignment_added_by_the_guide_is_graded(tmp_path):
    course = tmp_path / "course"
    course.mkdir()
    shutil.copy2(tools.REPO_ROOT / "nbgrader_config.py", course)  # the course's own config, as it is
    before = {p.relative_to(course) for p in course.rglob("*")}

    source = course / "source" / ASSIGNMENT / f"{NAME}.ipynb"  # step 1
    source.parent.mkdir(parents=True)
    nbformat.write(solution_notebook(), source)
    checks = course / "autograder" / "checks" / f"{ASSIGNMENT}.py"  # step 2
    checks.parent.mkdir(parents=True)
    checks.write_text(HIDDEN_CHECKS)
    release = tools.generate_release(ASSIGNMENT, tmp_path / "scratch", course_root=course)  # step 3
    shutil.copytree(release, course / "release" / ASSIGNMENT)
    written = {p.relative_to(course) for p in course.rglob("*") if p.is_file()} - before
    assert {str(p) for p in written} == {f"source/{ASSIGNMENT}/{NAME}.ipynb", f"autograder/checks/{ASSIGNMENT}.py",
                                         f"release/{ASSIGNMENT}/{NAME}.ipynb"}

    solved = tools.execute(source)  # the visible check passes on the solution, says TODO on the release
    assert "attention: Correct" in tools.cell_by_grade_id(solved, "attention_test").outputs[0]["text"]
    released = tools.execute(course / "release" / ASSIGNMENT / f"{NAME}.ipynb", allow_errors=True)
    tools.assert_every_check_says_todo(released, {"attention_test"})

    mistake = nbformat.read(source, as_version=4)
    answer = tools.cell_by_grade_id(mistake, "attention")
    answer.source = answer.source.replace("dim=-1", "dim=-2")
    for student, nb in {"ada": nbformat.read(source, as_version=4), "bo": released, "cy": mistake}.items():
        folder = course / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{NAME}.ipynb")
    grades = tools.grade_course(course, ASSIGNMENT, workers=1)
    totals = {result.student: result.total for result in grades.results}
    assert totals == {"ada": 10, "bo": 0, "cy": 0}
    [item] = grades.results[2].items
    assert item.status == "failed" and item.mistake == "softmax over the wrong dimension", item
