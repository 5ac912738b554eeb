"""The trusted grader, end to end: the real CLI, real notebooks, real bubblewrap, real nbgrader.

These tests read the hostile class of assignment 01 (tests/hostile_class.py), graded once per
session by the `graded_class` fixture; tests/test_hardening.py checks every case of it.
"""

import json
import shutil
import sqlite3
import subprocess
import sys

from nbgrader.api import Gradebook

import hostile_class
from autograder.commands import demo
from autograder.reading.cells import grade_id

A = hostile_class.A
NB = hostile_class.NB


def report(root, student):
    return json.loads((root / "reports" / A / f"{student}.json").read_text())


def items(root, student):
    return {i["grade_id"]: i for i in report(root, student)["items"]}


def test_typical_mistake_is_named_with_a_hint(graded_class):
    root, _, _ = graded_class
    causal = items(root, "cy_mistake")["causal_attention"]
    assert causal["mistake"] == "softmax over the wrong dimension" and "dim=-1" in causal["hint"]


def test_scores_reach_nbgrader_gradebook_and_attacks_did_not(graded_class):
    root, _, _ = graded_class
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}", course_id="self-attention") as gb:
        assert gb.find_submission(A, "ada_solution").score == 10
        assert gb.find_submission(A, "atk_write").score == report(root, "atk_write")["total"] < 10
    manual = sqlite3.connect(root / "gradebook.db").execute("select count(*) from grade where manual_score is not null")
    assert manual.fetchone()[0] == 0


def test_reports_csv_and_feedback(graded_class):
    root, cases, _ = graded_class
    for item in report(root, "cy_mistake")["items"]:
        assert set(item) >= {"grade_id", "score", "max_score", "status", "message", "hint"}
    assert set(report(root, "cy_mistake")) >= {"student", "assignment", "total", "flags", "items"}
    page = (root / "feedback" / "cy_mistake" / A / "attention_basics.html").read_text()
    assert "softmax over the wrong dimension" in page and "<script" not in page.lower()
    autograded = json.loads((root / "autograded" / "cy_mistake" / A / NB).read_text())
    assert any("softmax over the wrong dimension" in "".join(o.get("text", "")) for c in autograded["cells"]
               for o in c.get("outputs", []))


def test_nbgrader_autograde_takes_the_trusted_path(graded_class):
    """`nbgrader autograde --force` regrades through the sandbox: the same scores, and an attack
    that fools nbgrader's in-kernel tests still earns nothing."""
    root, _, _ = graded_class
    for student in ("ada_solution", "atk_allclose"):
        done = subprocess.run([sys.executable, "-m", "nbgrader", "autograde", A, "--student", student, "--force"],
                              cwd=root, env=demo.nbgrader_env(), capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}", course_id="self-attention") as gb:
        assert gb.find_submission(A, "ada_solution").score == 10
        assert gb.find_submission(A, "atk_allclose").score == report(root, "atk_allclose")["total"] < 10
    autograded = json.loads((root / "autograded" / "atk_allclose" / A / NB).read_text())
    causal = next(c for c in autograded["cells"]
                  if grade_id(c) == "causal_attention_test")
    assert causal["outputs"][0]["output_type"] == "error"


def test_validate_passes_the_solution_and_fails_the_blank_with_the_notebook_messages(graded_class, tmp_path):
    root, _, _ = graded_class
    solved = tmp_path / "solved.ipynb"
    shutil.copy(root / "source" / A / NB, solved)
    ok = subprocess.run([sys.executable, "-m", "autograder", "validate", str(solved)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout[-2000:]
    assert "All visible tests passed." in ok.stdout
    blank = subprocess.run([sys.executable, "-m", "autograder", "validate", str(root / "release" / A / NB)],
                           capture_output=True, text=True)
    assert blank.returncode != 0
    assert "FAILED  softmax_stable_test: CheckFailed: TODO: softmax_stable is not written yet" in blank.stdout
    assert not ok.stderr and not blank.stderr, ok.stderr + blank.stderr   # only results: no kernel log


def test_a_fault_of_the_grader_is_logged_for_the_instructor_and_flagged_for_the_ta(tmp_path):
    """What grading does when the grader itself raises on a notebook (no known notebook makes it):
    the traceback goes to reports/<assignment>/grader_faults.log, and the flag says where."""
    from autograder.reading.faults import LOG_NAME, log_fault

    try:
        {}["cells"]
    except KeyError as error:
        flag = log_fault(tmp_path / "01_attention_basics", "ada", "grading attention_basics.ipynb", error)
    log = (tmp_path / "01_attention_basics" / LOG_NAME).read_text()
    assert "ada: grading attention_basics.ipynb" in log and "KeyError: 'cells'" in log
    assert "failed while grading attention_basics.ipynb (KeyError)" in flag and f"01_attention_basics/{LOG_NAME}" in flag
