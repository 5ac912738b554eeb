"""Every assignment's hidden checks agree with its notebooks."""

import json
import runpy
from pathlib import Path

import pytest

from autograder.grading import Course, generator_for, load_items
from transformer_lm.kinds import judge_here

REPO = Path(__file__).resolve().parents[1]
COURSE = Course(REPO)
ASSIGNMENTS = sorted(p.stem for p in COURSE.checks_file("any").parent.glob("[0-9]*.py"))


def graded_cells(assignment):
    cells = {}
    for path in (REPO / "source" / assignment).glob("*.ipynb"):
        for cell in json.loads(path.read_text())["cells"]:
            meta = cell["metadata"].get("nbgrader", {})
            if meta.get("grade_id"):
                cells[meta["grade_id"]] = meta
    return cells


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_items_match_answer_and_test_cells_and_their_points(assignment):
    cells = graded_cells(assignment)
    items = load_items(COURSE, assignment)
    assert items, f"{assignment} has no hidden checks"
    for item in items:
        assert cells[item.answer_id]["solution"], f"{item.answer_id} is not an answer cell"
        test = cells[item.test_id]
        assert test["grade"] and not test["solution"], f"{item.test_id} is not a test cell"
        assert test["points"] == item.points, f"{item.grade_id}: {item.points} points hidden, {test['points']} shown"
    autograded_tests = {gid for gid, meta in cells.items() if meta.get("grade") and not meta.get("solution")}
    assert autograded_tests == {item.test_id for item in items}, "a test cell without hidden checks, or the reverse"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_course_code_that_stands_in_for_wrong_answers_passes_their_hidden_checks(assignment):
    """The stand-ins replace a student's wrong answer when a later item is graded (one mistake
    costs once); they must be right, so each passes every hidden check of the item it stands in
    for, compared as the grader compares, in this process."""
    items = load_items(COURSE, assignment)
    defining = [item for item in items if item.defines]
    path = COURSE.stand_ins_file(assignment)
    if not any(item.builds_on for item in items):
        assert not path.exists(), f"{path} stands in for nothing: no item of {assignment} builds on another"
        return
    namespace = runpy.run_path(str(path))
    for item in defining:
        for index, check in enumerate(item.checks):
            verdict = judge_here(check, namespace, generator_for(b"stand-ins", assignment, item.grade_id, index))
            assert verdict.passed, f"{item.grade_id}.{index}: {verdict.message}"
