"""Helpers for testing the course's notebooks with the real tools.

Notebooks run in a real Jupyter kernel (nbclient) and releases are made by the real
``nbgrader generate_assignment``; nothing is mocked. Every helper that changes a notebook
returns a copy, so a notebook read once can be reused by several tests.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import re
import runpy
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import matplotlib
import nbformat
from nbclient import NotebookClient
from nbformat import NotebookNode

from autograder.reading.cells import grade_id, marks, with_grade_id
from autograder.reading.spec import Also
from transformer_lm.judging import CheckFailed

matplotlib.use("Agg")   # the notebooks' figures, drawn by visible_failures in this process
import matplotlib.pyplot as plt  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def hidden_cases(assignment: str, item: str) -> list:
    """Each hidden case of ``item`` in ``autograder/checks/<assignment>.py``, with what a case
    wrapped in ``Also`` (one more case of the check before it) wraps."""
    items = runpy.run_path(str(REPO_ROOT / "autograder" / "checks" / f"{assignment}.py"))["ITEMS"]
    checks = next(found for found in items if found.grade_id == item).checks
    return [check.check if isinstance(check, Also) else check for check in checks]


def read(path_or_nb) -> NotebookNode:
    """A notebook read from ``path_or_nb``, or a deep copy of it when it is already one."""
    if isinstance(path_or_nb, NotebookNode):
        return copy.deepcopy(path_or_nb)
    return nbformat.read(str(path_or_nb), as_version=4)


def execute(path_or_nb, *, allow_errors: bool = False, timeout: int = 120, cwd=None) -> NotebookNode:
    """Runs a notebook top to bottom in a fresh ``python3`` kernel and returns the executed copy.

    ``cwd`` is the kernel's working directory: by default the notebook's folder when a path
    is given, else the current one (``transformer_lm`` is installed, so any folder works).
    Without ``allow_errors`` the first failing cell raises ``nbclient``'s ``CellExecutionError``;
    with it every cell runs and errors are left in the outputs (see :func:`errors`).
    """
    nb = read(path_or_nb)
    if cwd is None:
        cwd = Path(path_or_nb).resolve().parent if not isinstance(path_or_nb, NotebookNode) else Path.cwd()
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=allow_errors,
                            resources={"metadata": {"path": str(cwd)}})
    client.execute()
    return nb


def cell_by_grade_id(nb: NotebookNode, grade_id_: str) -> NotebookNode:
    """The cell whose nbgrader ``grade_id`` is ``grade_id_``; KeyError if there is none."""
    for cell in nb.cells:
        if grade_id(cell) == grade_id_:
            return cell
    raise KeyError(f"no cell with grade_id {grade_id_!r}")


def graded_cells(nb: NotebookNode, *, kind: str) -> list[NotebookNode]:
    """nbgrader's answer cells (``kind="solution"``) or autograded test cells (``kind="grade"``)."""
    if kind not in ("solution", "grade"):
        raise ValueError(f"kind must be 'solution' or 'grade', got {kind!r}")
    return [cell for cell in nb.cells if marks(cell).get(kind)]


def replace_solution(nb: NotebookNode, grade_id_: str, source: str) -> NotebookNode:
    """A copy of ``nb`` with the source of answer cell ``grade_id_`` replaced by ``source``."""
    nb = read(nb)
    cell = cell_by_grade_id(nb, grade_id_)
    if not marks(cell).get("solution"):
        raise ValueError(f"cell {grade_id_!r} is not an answer (solution) cell")
    cell.source = source
    return nb


def answer_cell(source_nb: NotebookNode, grade_id_: str, *replacements: tuple[str, str]) -> str:
    """The source of answer cell ``grade_id_``, each ``(old, new)`` of ``replacements`` made (each
    ``old`` occurs exactly once): a student's answer with one mistake or another way of writing it."""
    text = cell_by_grade_id(source_nb, grade_id_).source
    for old, new in replacements:
        assert text.count(old) == 1, f"{old!r} is not in the answer {grade_id_} exactly once"
        text = text.replace(old, new)
    return text


def replace_solutions(nb, answers: dict[str, str]) -> NotebookNode:
    """A copy of ``nb`` (a notebook or its path) with answer cells replaced, grade_id -> source,
    as a student would fill them."""
    nb = read(nb)
    for grade_id_, source in answers.items():
        nb = replace_solution(nb, grade_id_, source)
    return nb


def filled_in(release_nb, source_nb) -> NotebookNode:
    """The release with every answer cell filled in from the solution: what a student who got
    everything right saves. Locked cells stay as released, so nbgrader's checksums hold."""
    nb = read(release_nb)
    for cell in graded_cells(read(source_nb), kind="solution"):
        nb = replace_solution(nb, grade_id(cell), cell.source)
    return nb


def generate_release(assignment: str, course_root_copy, *, course_root=REPO_ROOT, timeout: int = 300) -> Path:
    """Runs ``nbgrader generate_assignment <assignment> --force`` in a copy of the course.

    ``course_root_copy`` is an empty (or missing) folder that receives the course's
    ``nbgrader_config.py`` and ``source/<assignment>``; the gradebook is created there too,
    never in the real course. Packages the config imports (``autograder``) come from the real
    course through PYTHONPATH. Returns the generated ``release/<assignment>`` folder.
    """
    course_root, dest = Path(course_root), Path(course_root_copy)
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(course_root / "nbgrader_config.py", dest / "nbgrader_config.py")
    shutil.copytree(course_root / "source" / assignment, dest / "source" / assignment)

    bin_dir = str(Path(sys.executable).parent)  # nbgrader runs alembic, which lives beside python
    env = {**os.environ,
           "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(course_root), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", assignment, "--force"],
                            cwd=dest, env=env, capture_output=True, text=True, timeout=timeout)
    release = dest / "release" / assignment
    if result.returncode != 0 or not release.is_dir():
        raise RuntimeError(f"nbgrader generate_assignment {assignment} failed (exit {result.returncode}):\n"
                           f"{result.stdout}\n{result.stderr}")
    return release


def outside_the_course() -> dict[str, str]:
    """This process's environment without what leads into the course's own Python: the virtual
    environment's variables, Python's search paths, Jupyter's settings, and the environment's
    ``bin`` folder on ``PATH``. What a student's shell has, for a run of what students receive."""
    course_bin = str(Path(sys.executable).parent)
    environ = {k: v for k, v in os.environ.items()
               if k not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"} and not k.startswith("JUPYTER")}
    environ["PATH"] = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p != course_bin)
    return environ


def squeeze(text: str) -> str:
    """Whitespace collapsed, so that torch's column padding does not matter."""
    return re.sub(r"\s+", " ", text)


def solution_lines(source: str) -> list[str]:
    """The non-empty lines between BEGIN and END SOLUTION, stripped."""
    inside, lines = False, []
    for line in source.splitlines():
        if "### BEGIN SOLUTION" in line:
            inside = True
        elif "### END SOLUTION" in line:
            inside = False
        elif inside and line.strip():
            lines.append(line.strip())
    return lines


def solution_bodies(nb: NotebookNode) -> dict[str, list[str]]:
    """For each answer cell, by grade_id, its :func:`solution_lines`."""
    return {grade_id(cell): solution_lines(cell.source) for cell in graded_cells(nb, kind="solution")}


def strip_ansi(text: str) -> str:
    """``text`` without terminal colour codes (tracebacks from the kernel are coloured)."""
    return _ANSI.sub("", text)


def text_outputs(cell) -> str:
    """Everything a code cell showed as text: streams, plain-text results and errors. The pieces of
    one stream that follow one another are one text: a busy kernel may send a print's line and its
    newline in two messages."""
    parts = []
    stream = None
    for output in cell.get("outputs", []):
        if output.output_type == "stream" and output.name == stream:
            parts[-1] += output.text
            continue
        if parts and not parts[-1].endswith("\n"):
            parts[-1] += "\n"
        stream = output.name if output.output_type == "stream" else None
        if output.output_type == "stream":
            parts.append(output.text)
        elif output.output_type in ("execute_result", "display_data"):
            parts.append(output.get("data", {}).get("text/plain", ""))
        elif output.output_type == "error":
            parts.append(f"{output.ename}: {output.evalue}\n" + strip_ansi("\n".join(output.traceback)))
    if parts and not parts[-1].endswith("\n"):
        parts[-1] += "\n"
    return "".join(parts)


def errors(cell) -> list[tuple[str, str]]:
    """The ``(exception name, message)`` of each error output of a code cell."""
    return [(o.ename, strip_ansi(o.evalue)) for o in cell.get("outputs", []) if o.output_type == "error"]


def assert_graded_as_planned(source_nb: NotebookNode, points: dict[str, int],
                             answers: dict[str, tuple[str, ...]] | None = None) -> dict[str, int]:
    """Each item of ``points`` (grade_id -> points) has its test cell ``<grade_id>_test`` with those
    points; 10 points in all. Each answer cell of ``answers`` (by default each item's own, of its
    name) is followed by the test cells of the items that grade it, in order, under a markdown
    heading whose first line ends with their points. Returns the test cells' points by grade_id."""
    answers = {name: (name,) for name in points} if answers is None else answers
    tests = {grade_id(c): c.metadata["nbgrader"]["points"] for c in graded_cells(source_nb, kind="grade")
             if c.cell_type == "code"}   # written answers (markdown) are graded by hand
    assert tests == {f"{name}_test": value for name, value in points.items()}
    assert sum(tests.values()) == 10
    assert sorted(item for items in answers.values() for item in items) == sorted(points), "one answer per item"
    for answer, items in answers.items():
        index = source_nb.cells.index(cell_by_grade_id(source_nb, answer))
        following = [grade_id(cell) for cell in source_nb.cells[index + 1:index + 1 + len(items)]]
        assert following == [f"{item}_test" for item in items], f"{answer}: its tests must follow it"
        heading, value = source_nb.cells[index - 1], sum(points[item] for item in items)
        assert heading.cell_type == "markdown"
        assert heading.source.splitlines()[0].endswith(f"({value} point{'s' if value > 1 else ''})"), heading.source
    return tests


def assert_every_check_says_todo(released_run: NotebookNode, test_ids) -> None:
    """A release run top to bottom with errors allowed: every visible test in ``test_ids`` fails
    with a TODO message, and no cell fails any other way than an unwritten answer does."""
    test_ids = set(test_ids)
    for cell in released_run.cells:
        if cell.cell_type != "code":
            continue
        found = errors(cell)
        if grade_id(cell) in test_ids:
            assert found, f"{grade_id(cell)} passed on an empty answer"
        for ename, evalue in found:
            todo = ename == "CheckFailed" and "TODO" in evalue
            assert todo or ename == "NotImplementedError", (
                f"cell {cell.id} ({grade_id(cell)}) fails with {ename}: {evalue}")
            if grade_id(cell) in test_ids:
                assert todo, f"{grade_id(cell)}: {ename}: {evalue}"


def assert_full_marks_and_zero(solution: dict, blank: dict) -> None:
    """The grader's two fixed points for every assignment, from two graded reports: the solution
    gets every point, the blank release none (each item failed or an error: nothing written)."""
    assert solution["total"] == solution["max_total"] > 0, [(i["grade_id"], i["status"], i["message"])
                                                            for i in solution["items"] if i["status"] != "passed"]
    assert blank["total"] == 0 and all(i["status"] in ("failed", "error") for i in blank["items"]), blank["items"]


def grade_course(root, assignment: str, *, workers: int = 2, cell_timeout: float = 30, students=None, shard=None):
    """Grades and records ``assignment`` in the course folder ``root`` through the library's one
    entry point (:func:`autograder.recording.pipeline.grade_and_record`), as ``autograder grade`` does."""
    from autograder.recording import pipeline
    from autograder.reading.config import load_settings
    from autograder.reading.course import Course

    root = Path(root)
    course = Course(root, load_settings(root, workers=workers, cell_timeout=cell_timeout))
    return pipeline.grade_and_record(course, assignment, students, shard)


def grade_class(assignment: str, course_root, submissions: dict[str, NotebookNode], *, cell_timeout: float = 30,
                workers: int = 2) -> dict[str, dict]:
    """Grades ``submissions`` (student -> notebook) of ``assignment`` with the real grader in a
    new course folder (the repository's config, source and hidden checks; nbgrader makes the
    release there), and returns each student's report. Every assignment has one notebook,
    named as in ``source/<assignment>``."""
    from autograder.commands.demo import make_course

    root = Path(course_root)
    root.mkdir(parents=True, exist_ok=True)
    make_course(root, assignment, generate=False)  # tests/test_notebooks.py: the release is nbgrader's
    notebook_name = next((root / "release" / assignment).glob("*.ipynb")).name
    for student, nb in submissions.items():
        folder = root / "submitted" / student / assignment
        folder.mkdir(parents=True, exist_ok=True)
        nbformat.write(read(nb), folder / notebook_name)
    grade_course(root, assignment, workers=workers, cell_timeout=cell_timeout)
    return {s: json.loads((root / "reports" / assignment / f"{s}.json").read_text()) for s in submissions}


def visible_failures(notebook: dict, test_ids: list[str], answers: dict[str, str] | None = None) -> dict:
    """What each test cell of ``test_ids`` says, in this process, after the notebook's code cells
    ran as the grader runs them (test cells and ``skip-grading`` cells left out), with ``answers``
    (answer cell's grade_id -> source) put in: None where it passes, else its failure."""
    answers = answers or {}
    namespace = {"__name__": "__main__"}
    cells = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    said = {}
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for cell in cells:
            meta = marks(cell)
            if (meta.get("grade") and not meta.get("solution")) or "skip-grading" in cell["metadata"].get("tags", []):
                continue
            code = answers.get(meta.get("grade_id"), "".join(cell["source"]))
            try:
                exec(compile(code, f"<cell {meta.get('grade_id', '')}>", "exec"), namespace)
            except Exception:  # noqa: BLE001 - a broken answer is for the test cell to report
                pass
        for test_id in test_ids:
            [test] = with_grade_id(cells, test_id)
            try:
                exec(compile("".join(test["source"]), f"<{test_id}>", "exec"), namespace)
                said[test_id] = None
            except CheckFailed as failure:
                said[test_id] = str(failure)
            except Exception as error:  # noqa: BLE001 - an error in the test cell fails it too
                said[test_id] = f"{type(error).__name__}: {error}"
            finally:
                plt.close("all")
    return said
