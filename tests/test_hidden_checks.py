"""Every assignment's hidden checks agree with its notebooks."""

import json
from pathlib import Path

import pytest

from autograder.grading import Course, load_items

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
