"""What every assignment's notebooks must be: clean sources, releases that nbgrader makes
from them exactly, and releases that hold no solution. Each assignment's own test file
checks its content."""

import json

import pytest

import notebook_tools as tools

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
def test_grader_gives_the_solution_full_marks_and_the_blank_release_zero(assignment, tmp_path):
    from autograder import sandbox

    if sandbox.detect_isolation().name != "bubblewrap":
        pytest.skip(f"needs bubblewrap: {sandbox.detect_isolation().detail}")
    source = tools.read(next((tools.REPO_ROOT / "source" / assignment).glob("*.ipynb")))
    release = tools.read(next((tools.REPO_ROOT / "release" / assignment).glob("*.ipynb")))
    reports = tools.grade_class(assignment, tmp_path / "course", {"solution": source, "blank": release})
    solution, blank = reports["solution"], reports["blank"]
    assert solution["total"] == solution["max_total"] > 0, [(i["grade_id"], i["status"], i["message"])
                                                            for i in solution["items"] if i["status"] != "passed"]
    assert blank["total"] == 0 and all(i["status"] in ("failed", "error") for i in blank["items"]), blank["items"]
