"""The tests every assignment gets, written once and driven by its row of ``tests/assignments.py``.

Each ``tests/test_assignment_<NN>.py`` puts them in its own namespace::

    ROW = assignments.BY_NAME["03_pytorch_attention"]
    globals().update(assignment_tests.tests_for(ROW))

so that pytest collects them there, beside the assignment's own tests, with the same module-scoped
fixtures (the notebooks read once, the class graded once), and the scheduler
(``tests/scheduling.py``) sends them with their file. The fixtures they take: ``source_nb``
(``tests/conftest.py``), ``solved`` and ``released_run`` (the student kit's runs of the release,
``tests/kit_fixtures.py``), and ``solution_and_blank``, which each module defines from the class it
grades: the reports of the solution and of the blank release.
"""

from __future__ import annotations

import json
import re

import notebook_tools as tools
from assignments import Assignment
from transformer_lm.source_scan import mentioned_names

STUB = {"code": "raise NotImplementedError()", "markdown": "YOUR ANSWER HERE"}
"""What nbgrader leaves of an answer in the release."""


def source_is_graded_as_planned(row: Assignment, source_nb) -> None:
    """Its items, their points and the cells around them; its written answers; the cells the grader
    skips, and what the cells it runs may hold. What every source must be (clean, with a locked
    setup cell first) is checked for every assignment in test_notebooks.py."""
    assert source_nb.metadata["language_info"]["name"] == "python"
    for cell in source_nb.cells:
        assert "sys.path" not in cell.source and "autoreload" not in cell.source, cell.id
    setup = tools.cell_by_grade_id(source_nb, "setup")
    assert [line for line in setup.source.splitlines() if "transformer_lm" in line or "matplotlib" in line] \
        == list(row.setup_imports)

    tests = tools.assert_graded_as_planned(source_nb, dict(row.points), dict(row.answers))
    for grade_id, points in row.written.items():
        cell = tools.cell_by_grade_id(source_nb, grade_id)
        meta = cell.metadata["nbgrader"]
        assert cell.cell_type == "markdown", grade_id
        assert meta["grade"] and meta["solution"] and not meta["locked"] and meta["points"] == points, grade_id
        body = "\n".join(tools.solution_lines(cell.source))
        assert "Model answer" in body and "Grading note (TAs)" in body, grade_id
    assert {tools.grade_id(c) for c in tools.graded_cells(source_nb, kind="grade")} == set(tests) | set(row.written)

    # Demonstrations carry the tag the grader honours; the cells it runs never lean on the course's
    # reference or its measurements, and only the setup imports matplotlib.
    tagged = {c.id for c in source_nb.cells if "skip-grading" in c.metadata.get("tags", [])}
    assert tagged == row.skipped
    for cell in source_nb.cells:
        if cell.cell_type == "code" and cell.id not in tagged:
            if tools.grade_id(cell) not in row.reference_in_comments:
                assert "reference" not in cell.source, cell.id
            assert "transformer_lm.measure" not in cell.source, cell.id
            assert cell is setup or "matplotlib" not in cell.source, cell.id
    # Answers must not mention PyTorch's attention: the grader would mark them forbidden.
    for answer in row.answers:
        used = set(row.library) & mentioned_names(tools.cell_by_grade_id(source_nb, answer).source)
        assert not used, f"the answer {answer} mentions {used}"


def release_contains_no_solutions(row: Assignment, source_nb) -> None:
    """The committed release keeps each answer's skeleton (its stubs, the signatures) and none of the
    solution: no marker, no model answer, no line of it, nor the code it solves with."""
    release = tools.read(row.release_path)
    raw = json.dumps(release)
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "Model answer", "Grading note"):
        assert marker not in raw, marker
    text = "\n".join(cell.source for cell in release.cells)
    every_line = {line.strip() for line in text.splitlines()}
    bodies = tools.solution_bodies(source_nb)
    assert set(bodies) == set(row.answers) | set(row.written)
    for name, lines in bodies.items():
        assert lines, f"{name}: no solution body in the source"
        cell = tools.cell_by_grade_id(release, name)
        stubs = cell.source.count(STUB[cell.cell_type])
        assert stubs == (row.parts.get(name, 1) if cell.cell_type == "code" else 1), (name, stubs)
        left = {line.strip() for line in cell.source.splitlines()}
        for line in lines:
            if re.search(r"[A-Za-z]", line):   # not lines like ")" that skeletons share
                assert line not in left, f"{name}: solution line left in the release: {line}"
            if re.search(r"[A-Za-z]{3}", line) and line not in row.shared_lines:
                assert line not in every_line, f"{name}: solution line in the release: {line}"
        assert tools.squeeze(" ".join(lines)) not in tools.squeeze(text), name
    code = "\n".join(cell.source for cell in release.cells if cell.cell_type == "code")
    for needle in row.release_never_holds:
        assert needle not in code, f"{needle} is in a code cell of the release"
    for signature in row.signatures:
        assert signature in code, signature


def solution_runs_and_every_visible_check_passes(row: Assignment, solved) -> None:
    """The solution notebook runs top to bottom, each cell within the row's ``cell_timeout``, and
    every item's test cell says so. (How long it takes is benchmarks/solution_notebooks.py's.)"""
    nb = solved
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not tools.errors(cell), f"cell {cell.id} failed: {tools.errors(cell)}"
    for item in row.points:
        output = tools.text_outputs(tools.cell_by_grade_id(nb, f"{item}_test"))
        assert output.strip(), f"{item}_test printed nothing"
        assert row.check_says.get(item, "Correct") in output, (item, output)
        for text in row.checks_print.get(item, ()):
            assert text in output, (item, text, output)


def release_reports_todo_everywhere(row: Assignment, released_run) -> None:
    """A student's first run: every check says TODO, nothing else breaks, and the cells that need no
    answer run and show what they show."""
    tools.assert_every_check_says_todo(released_run, row.test_ids)
    cells = {cell.id: cell for cell in released_run.cells}
    for cell_id, texts in row.release_shows.items():
        assert not tools.errors(cells[cell_id]), (cell_id, tools.errors(cells[cell_id]))
        output = tools.text_outputs(cells[cell_id])
        for text in texts:
            assert text in output, (cell_id, text, output)


def solution_gets_full_marks_and_the_blank_release_zero(row: Assignment, solution_and_blank) -> None:
    """The real grader's two fixed points: the solution gets every point of every item, with no
    deduction and no flag; the blank release gets none."""
    solution, blank = solution_and_blank
    tools.assert_full_marks_and_zero(solution, blank)
    assert solution["total"] == solution["max_total"] == sum(row.points.values()) == 10
    assert solution["flags"] == []
    items = {item["grade_id"]: item for item in solution["items"]}
    assert set(items) == set(row.points)
    for name, points in row.points.items():
        item = items[name]
        assert (item["status"], item["score"], item["max_score"], item["deduction"], item["answer"]) == (
            "passed", points, points, "", row.answer_of[name]), item


def tests_for(row: Assignment) -> dict:
    """The common tests of ``row``'s assignment, by name, for its test module's namespace."""

    def test_source_is_graded_as_planned(source_nb):
        source_is_graded_as_planned(row, source_nb)

    def test_release_contains_no_solutions(source_nb):
        release_contains_no_solutions(row, source_nb)

    def test_solution_runs_and_every_visible_check_passes(solved):
        solution_runs_and_every_visible_check_passes(row, solved)

    def test_release_reports_todo_everywhere(released_run):
        release_reports_todo_everywhere(row, released_run)

    def test_solution_gets_full_marks_and_the_blank_release_zero(solution_and_blank):
        solution_gets_full_marks_and_the_blank_release_zero(row, solution_and_blank)

    tests = (test_source_is_graded_as_planned, test_release_contains_no_solutions,
             test_solution_runs_and_every_visible_check_passes, test_release_reports_todo_everywhere,
             test_solution_gets_full_marks_and_the_blank_release_zero)
    for test in tests:
        test.__doc__ = globals()[test.__name__.removeprefix("test_")].__doc__
    return {test.__name__: test for test in tests}
