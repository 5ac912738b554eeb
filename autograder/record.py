"""Record: grades into nbgrader's gradebook and autograded notebooks, reports as JSON and CSV.

After this step nbgrader's own tools work as usual: ``nbgrader formgrader`` shows the scores
and the grader's messages (and offers the written answers for manual grading),
``nbgrader generate_feedback`` and ``nbgrader export`` read the same gradebook.
"""

from __future__ import annotations

import copy
import csv
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook, MissingEntry
from sqlalchemy.exc import SAWarning

from autograder.errors import GradingError
from autograder.grading import Course, SubmissionResult
from autograder.preflight import Preflight
from autograder.sanitize import neutralize_student_markdown, safe_markdown

CSV_FIELDS = ["student", "assignment", "notebook", "grade_id", "score", "max_score", "status", "mistake", "deduction",
              "message"]


def gradebook(course: Course) -> Gradebook:
    """nbgrader's gradebook of the course, as its settings name it. nbgrader runs ``alembic``
    from PATH to create or upgrade it: this environment's, also when it is not activated."""
    os.environ["PATH"] = nbgrader_env()["PATH"]
    return Gradebook(course.settings.db_url, course_id=course.settings.course_id)


def nbgrader_env() -> dict[str, str]:
    """nbgrader runs ``alembic`` as a subprocess (also when it creates a gradebook): the
    environment's bin must be on PATH, even when the environment is not activated."""
    path = os.environ.get("PATH", "")
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": path if bin_dir in path.split(os.pathsep) else f"{bin_dir}{os.pathsep}{path}"}


def ensure_assignment_in_gradebook(course: Course, assignment: str) -> None:
    """nbgrader learns an assignment's graded cells when it generates the release; do that
    once if the gradebook does not know the assignment yet."""
    with gradebook(course) as gb:
        try:
            gb.find_assignment(assignment)
            return
        except MissingEntry:
            pass
    done = subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", assignment, "--force"],
                          cwd=course.root, env=nbgrader_env(), capture_output=True, text=True)
    if done.returncode != 0:
        raise GradingError(f"nbgrader generate_assignment {assignment} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")


def item_message(item) -> str:
    """One item's result in words, as formgrader, the autograded notebook and LMS exports show it."""
    text = f"[{item.status}] {item.score:g}/{item.max_score:g} points. {item.message}"
    if item.deduction:
        text += f"\nDeduction, {item.deduction}"
    if item.hint:
        text += f"\nHint ({item.mistake}): {item.hint}"
    return text


def record_in_gradebook(course: Course, result: SubmissionResult) -> None:
    """Writes auto scores and comments; written answers are left for manual grading."""
    with warnings.catch_warnings(), gradebook(course) as gb:
        # nbgrader's own submission code trips SQLAlchemy's autoflush warnings; they mean nothing here.
        warnings.simplefilter("ignore", SAWarning)
        gb.update_or_create_student(result.student)
        gb.update_or_create_submission(result.assignment, result.student)
        by_test = {(i.notebook, f"{i.grade_id}_test"): i for i in result.items}
        by_answer: dict = {}
        for item in result.items:  # several items may grade one answer cell: their messages join
            by_answer.setdefault((item.notebook, item.answer), []).append(item)
        for notebook in dict.fromkeys([*(i.notebook for i in result.items), *result.unreadable]):
            submission = gb.find_submission_notebook(notebook, result.assignment, result.student)
            unreadable = notebook in result.unreadable
            for grade in submission.grades:
                item = by_test.get((notebook, grade.name))
                if item is not None:
                    grade.auto_score, grade.needs_manual_grade = item.score, False
                elif unreadable:  # nothing there for a TA to grade by hand
                    grade.auto_score, grade.needs_manual_grade = 0.0, False
                else:  # a written answer: a TA grades it in formgrader
                    grade.auto_score, grade.needs_manual_grade = None, True
            for comment in submission.comments:
                found = by_answer.get((notebook, comment.name))
                # nbgrader renders comments as markdown without a sanitizer; messages can quote student code.
                comment.auto_comment = safe_markdown("\n".join(item_message(i) for i in found)) if found else None
        gb.db.commit()


def write_autograded(course: Course, result: SubmissionResult, pres: dict[str, Preflight],
                     release: dict[str, list[dict]]) -> None:
    """``autograded/<student>/<assignment>/<notebook>.ipynb``: the repaired notebook, each
    visible test cell showing the grader's result as plain text (what formgrader displays),
    and the student's markdown made inert (:func:`safe_markdown`)."""
    folder = course.root / "autograded" / result.student / result.assignment
    folder.mkdir(parents=True, exist_ok=True)
    by_test = {(i.notebook, f"{i.grade_id}_test"): i for i in result.items}
    for notebook, pre in pres.items():
        if pre.notebook is None:
            continue
        nb = copy.deepcopy(pre.notebook)
        neutralize_student_markdown(nb["cells"], release[notebook])
        seen = set()
        for index, cell in enumerate(nb["cells"]):
            # nbformat 4.5 wants unique ids; old or hand-made notebooks lack them, restored cells may repeat them
            if not cell.get("id") or cell["id"] in seen:
                cell["id"] = f"cell-{index}"
            seen.add(cell["id"])
            if cell.get("cell_type") == "code":
                cell["outputs"], cell["execution_count"] = [], None
            item = by_test.get((notebook, cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")))
            if item is not None:
                cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": item_message(item) + "\n"}]
        node = nbformat.from_dict(nb)
        nbformat.write(node, folder / f"{notebook}.ipynb")
    course.copy_receipts(result.assignment, result.student, folder)


def write_grades_csv(course: Course, assignment: str) -> Path:
    """``reports/<assignment>/grades.csv``: one row per student and item, from every report."""
    folder = course.reports(assignment)
    path = folder / "grades.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for report in sorted(folder.glob("*.json")):
            data = json.loads(report.read_text())
            for item in data["items"]:
                writer.writerow({"student": data["student"], "assignment": data["assignment"],
                                 **{k: item.get(k) for k in CSV_FIELDS[2:]}})
    return path
