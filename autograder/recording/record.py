"""Record: grades into nbgrader's gradebook and autograded notebooks, reports as JSON and CSV.

After this step nbgrader's own tools work as usual: ``nbgrader formgrader`` shows the scores
and the grader's messages (and offers the written answers for manual grading),
``nbgrader generate_feedback`` and ``nbgrader export`` read the same gradebook.
"""

from __future__ import annotations

import copy
import csv
import hashlib
import json
import os
import subprocess
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook, MissingEntry
from sqlalchemy.exc import SAWarning

from autograder.reading.cells import grade_id, marks
from autograder.reading.course import Course
from autograder.reading.errors import GradingError
from autograder.reading.preflight import SKIP_TAG, Preflight
from autograder.reading.results import SubmissionResult
from autograder.reading.sanitize import inert_outputs, neutralize_student_markdown, safe_markdown

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


@dataclass
class HandGrade:
    """A written answer: its points, a TA's grade (None while it waits for one) and comment."""

    notebook: str
    grade_id: str
    max_score: float
    score: float | None = None
    comment: str = ""


@dataclass
class Marking:
    """What TAs recorded for one student in formgrader: the written answers' grades, and their
    comments on any cell (by notebook and cell name)."""

    written: list[HandGrade] = field(default_factory=list)
    comments: dict[tuple[str, str], str] = field(default_factory=dict)

    @property
    def score(self) -> float:
        return sum(hand.score or 0.0 for hand in self.written)

    @property
    def max_score(self) -> float:
        return sum(hand.max_score for hand in self.written)

    @property
    def waiting(self) -> list[HandGrade]:
        return [hand for hand in self.written if hand.score is None]


def marking_digest(marking: Marking | None) -> str:
    """A short digest of what TAs recorded for a student, to tell when a page predates it."""
    marking = marking or Marking()
    text = json.dumps([[h.notebook, h.grade_id, h.score, h.comment] for h in marking.written]
                      + sorted([*key, text] for key, text in marking.comments.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def feedback_stamp(course: Course, assignment: str, student: str) -> Path:
    """Where the digest of the marking a student's feedback pages were made with is kept."""
    return course.root / ".grading" / "feedback" / assignment / student


def stale_feedback(course: Course, assignment: str, marked: dict[str, Marking]) -> list[str]:
    """The students whose feedback pages were made before the hand grades or comments of
    ``marked`` (:func:`markings`, what the gradebook holds now)."""
    stamps = {student: feedback_stamp(course, assignment, student) for student in marked}
    return sorted(student for student, marking in marked.items()
                  if stamps[student].exists() and stamps[student].read_text() != marking_digest(marking))


def written_answers(course: Course, assignment: str) -> list[HandGrade]:
    """The written answers of the release notebooks (markdown cells graded by hand), not graded yet;
    none where the release is not at hand (reports copied elsewhere)."""
    found = []
    for path in sorted((course.root / "release" / assignment).glob("*.ipynb")):
        notebook = path.stem
        for cell in json.loads(path.read_text())["cells"]:
            meta = marks(cell)
            if cell.get("cell_type") == "markdown" and meta.get("grade") and meta.get("grade_id"):
                found.append(HandGrade(notebook, meta["grade_id"], float(meta.get("points", 0))))
    return found


def markings(course: Course, assignment: str) -> dict[str, Marking]:
    """Every student's :class:`Marking` of ``assignment``, read from nbgrader's gradebook, where
    formgrader writes hand grades and comments. The grader never writes either, so they survive
    every regrade; a student the gradebook does not have yet has every written answer waiting."""
    scores: dict[tuple[str, str, str], float | None] = {}
    by_student: dict[str, Marking] = {}
    with warnings.catch_warnings(), gradebook(course) as gb:
        warnings.simplefilter("ignore", SAWarning)
        try:
            submissions = gb.assignment_submissions(assignment)
        except MissingEntry:
            submissions = []
        for submission in submissions:
            marking = by_student.setdefault(submission.student.id, Marking())
            for nb in submission.notebooks:
                scores.update({(submission.student.id, nb.name, grade.name): grade.manual_score
                               for grade in nb.grades if grade.cell_type == "markdown"})
                marking.comments.update({(nb.name, comment.name): comment.manual_comment
                                         for comment in nb.comments if comment.manual_comment})
    written = written_answers(course, assignment)
    for student in {*by_student, *course.students(assignment)}:
        marking = by_student.setdefault(student, Marking())
        marking.written = [HandGrade(hand.notebook, hand.grade_id, hand.max_score,
                                     scores.get((student, hand.notebook, hand.grade_id)),
                                     marking.comments.get((hand.notebook, hand.grade_id), ""))
                           for hand in written]
    return by_student


def item_message(item) -> str:
    """One item's result in words, as formgrader, the autograded notebook and LMS exports show it."""
    text = f"[{item.status}] {item.score:g}/{item.max_score:g} points. {item.message}"
    if item.deduction:
        text += f"\nDeduction, {item.deduction}"
    if item.hint:
        text += f"\nHint ({item.mistake}): {item.hint}"
    return text


def record_in_gradebook(gb: Gradebook, result: SubmissionResult) -> None:
    """Writes auto scores and comments into the open gradebook ``gb``, uncommitted; written answers
    are left for manual grading. A class's results share one opened gradebook (:func:`gradebook`)
    and one commit: opening it inspects every table, and each commit waits for the disk, each
    costing more than recording a submission."""
    with warnings.catch_warnings():
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
                else:  # a written answer: a TA grades it in formgrader, once; a regrade keeps that grade
                    grade.auto_score, grade.needs_manual_grade = None, grade.manual_score is None
            for comment in submission.comments:
                found = by_answer.get((notebook, comment.name))
                # nbgrader renders comments as markdown without a sanitizer; messages can quote student code.
                comment.auto_comment = safe_markdown("\n".join(item_message(i) for i in found)) if found else None


def write_autograded(course: Course, result: SubmissionResult, pres: dict[str, Preflight],
                     release: dict[str, list[dict]]) -> None:
    """``autograded/<student>/<assignment>/<notebook>.ipynb``: the repaired notebook, each
    visible test cell showing the grader's result as plain text (what formgrader displays),
    each ``skip-grading`` demonstration showing what the student saw (its figures and text,
    :func:`inert_outputs`), and the student's markdown made inert (:func:`safe_markdown`)."""
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
            if cell.get("cell_type") == "code":  # a demonstration's figures and text stay for the TA, made inert
                demonstration = SKIP_TAG in (cell.get("metadata", {}).get("tags") or [])
                cell["outputs"] = inert_outputs(cell.get("outputs")) if demonstration else []
                cell["execution_count"] = None
            item = by_test.get((notebook, grade_id(cell)))
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
