"""What every assignment's notebooks must be: clean sources, releases that nbgrader makes
from them exactly, and releases that hold no solution. Each assignment's own test file
checks its content and its grades."""

import importlib
import inspect
import json

import pytest

import assignment_tests
import assignments
import notebook_tools as tools
from scheduling import SHARED

ASSIGNMENTS = sorted(p.name for p in (tools.REPO_ROOT / "source").iterdir() if p.is_dir())


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_source_is_clean(assignment):
    notebooks = list((tools.REPO_ROOT / "source" / assignment).glob("*.ipynb"))
    assert len(notebooks) == 1
    nb = tools.read(notebooks[0])
    assert nb.metadata["kernelspec"]["name"] == "python3"
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"outputs left in cell {cell.id}"
    setup = tools.cell_by_grade_id(nb, "setup")
    assert nb.cells.index(setup) < 3 and setup.metadata["nbgrader"]["locked"]
    assert "transformer_lm.checks" not in setup.source and "reference" not in setup.source


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_release_is_what_nbgrader_makes_from_the_source(assignment, tmp_path):
    generated = tools.generate_release(assignment, tmp_path / "course")
    committed_dir = tools.REPO_ROOT / "release" / assignment
    names = sorted(p.name for p in generated.glob("*.ipynb"))
    assert names == sorted(p.name for p in committed_dir.glob("*.ipynb"))
    for name in names:
        fresh, committed = json.loads((generated / name).read_text()), json.loads((committed_dir / name).read_text())
        assert fresh == committed, f"release/{assignment}/{name} is stale: run `make release`"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_release_holds_no_solution(assignment):
    source = tools.read(next((tools.REPO_ROOT / "source" / assignment).glob("*.ipynb")))
    release = tools.read(next((tools.REPO_ROOT / "release" / assignment).glob("*.ipynb")))
    text = json.dumps(release)
    assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text and "HIDDEN TESTS" not in text
    for cell in tools.graded_cells(source, kind="solution"):
        answer = tools.cell_by_grade_id(release, tools.grade_id(cell))
        stub = "raise NotImplementedError()" if cell.cell_type == "code" else "YOUR ANSWER HERE"
        assert stub in answer.source, tools.grade_id(cell)
        left = {line.strip() for line in answer.source.splitlines()}
        for line in (line for line in tools.solution_lines(cell.source) if len(line) > 12):
            assert line not in left, f"{tools.grade_id(cell)}: solution line in the release: {line}"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_assignment_has_a_test_module_that_grades_its_solution_and_its_blank_release(assignment):
    """Each assignment has its row in tests/assignments.py, and its own test module, which takes that
    row and the tests every assignment gets from it (tests/assignment_tests.py): among them the
    real grader's two fixed points, the solution's full marks and the blank release's zero
    (``notebook_tools.assert_full_marks_and_zero``), on the reports of a class the module grades
    once (its ``solution_and_blank`` fixture, from its own class or the hostile class of the session)."""
    assert sorted(assignments.BY_NAME) == ASSIGNMENTS, "one row of tests/assignments.py per assignment"
    module = tools.REPO_ROOT / "tests" / f"test_assignment_{assignment[:2]}.py"
    assert module.is_file(), f"{assignment} has no {module.name}"
    text = module.read_text()
    assert f'assignments.BY_NAME["{assignment}"]' in text, module.name
    own_class = "tools.grade_class(" in text
    graded = own_class or any(f"({name})" in text for name in SHARED["the hostile class"])   # or the session's
    assert "def solution_and_blank(" in text and graded, module.name
    loaded = importlib.import_module(module.stem)
    assert loaded.ROW is assignments.BY_NAME[assignment]
    name = "test_solution_gets_full_marks_and_the_blank_release_zero"
    test = getattr(loaded, name, None)
    assert test is not None and test.__code__ is assignment_tests.tests_for(loaded.ROW)[name].__code__, module.name
    assert inspect.getclosurevars(test).nonlocals["row"] is loaded.ROW, module.name
    assert "tools.assert_full_marks_and_zero(" in inspect.getsource(
        assignment_tests.solution_gets_full_marks_and_the_blank_release_zero)
