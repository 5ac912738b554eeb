"""Black's output keeps every point of the PEP 8 check (:mod:`transformer_lm.style`): every
assignment's solution, its answer cells formatted by Black at the course's line length, has no
PEP 8 problem, and the grader gives assignment 02's (the one assignment with a style deduction)
full marks, without a deduction or a flag.

Black spaces a slice's colon like a binary operator (``q[:, :, h * hs : (h + 1) * hs]``) and
breaks long expressions before their operators, both of which PEP 8 calls correct. No answer
cell holds an IPython magic, which ``black.format_str`` would refuse.
"""

from __future__ import annotations

import black
import pytest

import assignments
import notebook_tools as tools
from autograder.reading.cells import grade_id
from transformer_lm.style import STYLE, style_problems

BLACK = black.Mode(line_length=STYLE["max_line_length"])
ROW = assignments.BY_NAME["02_multihead_attention"]


def formatted_answers(row: assignments.Assignment) -> dict[str, str]:
    """The code answer cells of ``row``'s solution, by grade_id, as Black writes them."""
    cells = tools.graded_cells(tools.read(row.source_path), kind="solution")
    return {grade_id(cell): black.format_str(cell.source, mode=BLACK) for cell in cells if cell.cell_type == "code"}


@pytest.mark.parametrize("row", assignments.ASSIGNMENTS, ids=lambda row: row.name)
def test_every_answer_black_formats_follows_pep8(row):
    for name, source in formatted_answers(row).items():
        assert style_problems(source) == [], (name, source)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """Assignment 02's release filled with its solution's answers as Black formats them, graded by
    the real grader."""
    answers = formatted_answers(ROW)
    source_nb = tools.read(ROW.source_path)
    assert all(source != tools.cell_by_grade_id(source_nb, name).source for name, source in answers.items())
    submission = tools.replace_solutions(ROW.release_path, answers)
    return tools.grade_class(ROW.name, tmp_path_factory.mktemp("course"), {"black": submission})["black"]


def test_the_grader_gives_blacks_solution_full_marks(report):
    assert report["flags"] == []
    assert report["total"] == report["max_total"] == 10, [i for i in report["items"] if i["status"] != "passed"]
    assert all(item["deduction"] == "" for item in report["items"]), report["items"]
