"""docs/adding-an-assignment.md, followed step by step in a copy of the course: an assignment that
teaches a concept the course does not have yet (ALiBi, Press et al., 2022, "Train Short, Test
Long") gets its concept module and one group of visible checks, its solution notebook and its
hidden checks, and nothing else of the course changes. Then the stored values are made again,
nbgrader makes the release, the visible check passes on the solution, says TODO on the release and
names the concept's own mistake, and the grader gives the solution full marks, the blank release
zero, and the mistake zero with its name."""

import hashlib
import json
import os
import shutil
import subprocess
import sys

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

import notebook_tools as tools
from autograder.running import sandbox

ASSIGNMENT, NAME = "99_alibi", "alibi"
CODE_FILES_ALLOWED = 3
"""Code files a new concept may touch besides its notebook and its hidden checks."""
STORED_VALUES = ("transformer_lm/data/visible_checks.safetensors",
                 "transformer_lm/sandboxed/data/test_values.safetensors")
"""What ``python -m transformer_lm.instructor.make_test_values`` writes (data, not code)."""

CONCEPT = '''"""ALiBi attention (Press et al., 2022, "Train Short, Test Long"): causal attention whose scores
get a penalty that grows linearly with the distance from query to key, one slope per head, in
place of position embeddings. The reference, and beside it the mistakes students make with it."""

import torch

from transformer_lm.catalog import Mistake
from transformer_lm.instructor.mistake_family import MistakeFamily


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """The paper's slopes, a geometric sequence from 2^(-8/n) down to 2^(-8): shape (num_heads,)."""
    return 2.0 ** (-8.0 * torch.arange(1, num_heads + 1) / num_heads)


def biased_attention(q, k, v, slopes, sign=-1.0):
    """Causal attention of q, k, v (batch, heads, seq, d) with ``sign * slope * (i - j)`` added to
    the score of query i and key j."""
    seq = q.shape[-2]
    distance = torch.arange(seq)[:, None] - torch.arange(seq)[None, :]  # (seq, seq): i - j
    bias = sign * slopes[:, None, None] * distance  # (heads, seq, seq)
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5 + bias  # (batch, heads, seq, seq)
    future = torch.ones(seq, seq, dtype=torch.bool).triu(1)
    return torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1) @ v  # (batch, heads, seq, d)


def alibi_attention(q, k, v):
    return biased_attention(q, k, v, alibi_slopes(q.shape[1]))


def qkv(generator):
    """Inputs of a check: q, k, v of shape (2, 4, 6, 8)."""
    return {name: torch.randn(2, 4, 6, 8, generator=generator) for name in "qkv"}


MISTAKES = MistakeFamily({
    Mistake("alibi_bias_sign", "distance penalty added with the wrong sign",
            "The penalty must lower the scores of distant keys: add -slope * (i - j), not +slope * (i - j)."):
        lambda q, k, v: biased_attention(q, k, v, alibi_slopes(q.shape[1]), sign=1.0),
    Mistake("alibi_slopes_reversed", "slopes given to the heads in reverse order",
            "The first head gets the largest slope, 2^(-8/n), and the last the smallest, 2^(-8)."):
        lambda q, k, v: biased_attention(q, k, v, alibi_slopes(q.shape[1]).flip(0)),
})
'''

VISIBLE_GROUP = '''def _alibi() -> dict[str, list[Entry]]:
    return {"alibi_attention": each("alibi_attention", CallCheck("alibi_attention", alibi.alibi_attention, alibi.qkv,
                                                                  mistakes=alibi.MISTAKES))}


ASSIGNMENTS = {"99_alibi": _alibi, '''

ANSWER = '''def alibi_attention(q, k, v):
    """Causal ALiBi attention of q, k, v, each (batch, heads, seq, d)."""
    ### BEGIN SOLUTION
    heads, seq = q.shape[1], q.shape[2]
    slopes = 2.0 ** (-8.0 * torch.arange(1, heads + 1) / heads)  # (heads,)
    distance = torch.arange(seq)[None, :] - torch.arange(seq)[:, None]  # (seq, seq): j - i
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (batch, heads, seq, seq)
    scores = scores + slopes[:, None, None] * distance
    scores = scores.masked_fill(distance > 0, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v  # (batch, heads, seq, d)
    ### END SOLUTION
'''

VISIBLE_CHECK = '''from transformer_lm import checks

checks.check("alibi_attention", alibi_attention)
print("alibi_attention: Correct.")
'''

HIDDEN_CHECKS = '''"""Hidden checks of the ALiBi assignment: other sizes than the visible check's."""

import torch

from autograder.reading.spec import Item
from transformer_lm.instructor.concepts import alibi
from transformer_lm.forbidding import LIBRARY_ATTENTION
from transformer_lm.instructor.kinds import CallCheck


def qkv(generator):
    return {name: torch.randn(3, 2, 5, 4, generator=generator) for name in "qkv"}


ITEMS = [Item("alibi_attention", points=10,
              checks=(CallCheck("alibi_attention", alibi.alibi_attention, qkv, mistakes=alibi.MISTAKES),),
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
        nbgrader_cell(new_code_cell("import math\n\nimport torch"), grade_id="setup", locked=True),
        new_markdown_cell("## ALiBi attention (10 points)\n\nAdd each head's distance penalty to the causal scores."),
        nbgrader_cell(new_code_cell(ANSWER), grade_id="alibi_attention", solution=True),
        nbgrader_cell(new_code_cell(VISIBLE_CHECK), grade_id="alibi_attention_test", grade=True, locked=True,
                      points=10),
    ]
    return nb


def copy_of_the_course(root):
    """The course's packages and config, as a new instructor's checkout has them."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in ("transformer_lm", "autograder"):
        shutil.copytree(tools.REPO_ROOT / package, root / package, ignore=ignore)
    shutil.copy2(tools.REPO_ROOT / "nbgrader_config.py", root)


def fingerprints(root) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def in_course(root, *args):
    """``python -m <args>`` in the course folder, its packages first on the path."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    result = subprocess.run([sys.executable, "-m", *args], cwd=root, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, f"{' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result


def add_the_concept(root):
    """Steps 0 and 1 of a new concept: its module (reference and mistakes), and its group of
    visible checks in the table that the stored values are made from."""
    (root / "transformer_lm" / "instructor" / "concepts" / "alibi.py").write_text(CONCEPT)
    table = root / "transformer_lm" / "instructor" / "visible_checks.py"
    text = table.read_text()
    kinds = "from transformer_lm.instructor.decoder_kinds import"
    text = text.replace(kinds, f"from transformer_lm.instructor.concepts import alibi\n{kinds}")
    text = text.replace("from transformer_lm.instructor.kinds import (AttentionCheck,",
                        "from transformer_lm.instructor.kinds import (AttentionCheck, CallCheck,")
    text = text.replace("ASSIGNMENTS = {", VISIBLE_GROUP, 1)
    table.write_text(text)
    in_course(root, "transformer_lm.instructor.make_test_values")


@pytest.mark.skipif(sandbox.detect_isolation().name != "bubblewrap", reason="needs bubblewrap")
def test_a_new_concept_added_by_the_guide_is_graded(tmp_path, monkeypatch):
    course = tmp_path / "course"
    course.mkdir()
    copy_of_the_course(course)
    before = fingerprints(course)

    add_the_concept(course)
    source = course / "source" / ASSIGNMENT / f"{NAME}.ipynb"
    source.parent.mkdir(parents=True)
    nbformat.write(solution_notebook(), source)
    (course / "autograder" / "checks" / f"{ASSIGNMENT}.py").write_text(HIDDEN_CHECKS)
    release = tools.generate_release(ASSIGNMENT, tmp_path / "scratch", course_root=course)
    shutil.copytree(release, course / "release" / ASSIGNMENT)

    after = fingerprints(course)
    changed = {path for path in after if before.get(path) != after[path]}
    notebooks_and_checks = {f"source/{ASSIGNMENT}/{NAME}.ipynb", f"release/{ASSIGNMENT}/{NAME}.ipynb",
                            f"autograder/checks/{ASSIGNMENT}.py"}
    code = {path for path in changed if path.endswith(".py")} - notebooks_and_checks
    assert code == {"transformer_lm/instructor/concepts/alibi.py", "transformer_lm/instructor/visible_checks.py"}
    assert len(code) <= CODE_FILES_ALLOWED
    assert notebooks_and_checks <= changed
    assert changed - code - notebooks_and_checks <= set(STORED_VALUES), changed

    monkeypatch.setenv("PYTHONPATH", str(course))  # the kernels import the copy's package
    solved = tools.execute(source)
    assert "alibi_attention: Correct" in tools.cell_by_grade_id(solved, "alibi_attention_test").outputs[0]["text"]
    released = tools.execute(course / "release" / ASSIGNMENT / f"{NAME}.ipynb", allow_errors=True)
    tools.assert_every_check_says_todo(released, {"alibi_attention_test"})

    mistake = nbformat.read(source, as_version=4)
    answer = tools.cell_by_grade_id(mistake, "alibi_attention")
    answer.source = answer.source.replace("scores + slopes", "scores - slopes")
    shown = tools.execute(mistake, allow_errors=True, cwd=source.parent)
    [(ename, evalue)] = tools.errors(tools.cell_by_grade_id(shown, "alibi_attention_test"))
    assert ename == "CheckFailed" and "distance penalty added with the wrong sign" in evalue, evalue

    for student, nb in {"ada": nbformat.read(source, as_version=4), "bo": released, "cy": mistake}.items():
        folder = course / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{NAME}.ipynb")
    in_course(course, "autograder", "grade", ASSIGNMENT, "--workers", "1")
    reports = {student: json.loads((course / "reports" / ASSIGNMENT / f"{student}.json").read_text())
               for student in ("ada", "bo", "cy")}
    assert {s: report["total"] for s, report in reports.items()} == {"ada": 10, "bo": 0, "cy": 0}
    [item] = reports["cy"]["items"]
    assert item["status"] == "failed" and item["mistake"] == "distance penalty added with the wrong sign", item
