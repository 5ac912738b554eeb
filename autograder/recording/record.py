"""Record: grades into nbgrader's gradebook and autograded notebooks, reports as JSON and CSV.

After this step nbgrader's own tools work as usual: ``nbgrader formgrader`` shows the scores
and the grader's messages (and offers the written answers for manual grading),
``nbgrader generate_feedback`` and ``nbgrader export`` read the same gradebook.
"""

from __future__ import annotations

import copy
import csv
import datetime
import hashlib
import json
import os
import subprocess
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbgrader import utils as nbgrader_utils
from nbgrader.api import Gradebook, MissingEntry
from sqlalchemy.exc import SAWarning

from autograder.reading.cells import grade_id, marks, source_text
from autograder.reading.course import Course
from autograder.reading.errors import GradingError
from autograder.reading.preflight import SKIP_TAG, Preflight
from autograder.reading.results import SubmissionResult
from autograder.reading.sanitize import inert_outputs, neutralize_student_markdown, safe_markdown
from autograder.recording.lateness import late_by

NO_RESPONSE = "No response."
"""nbgrader's comment on an answer cell left as released."""

LATE_PENALTY = "late_submission_penalty"
"""The row of ``grades.csv`` that holds a notebook's late penalty (nbgrader's name for it)."""

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
    """nbgrader learns an assignment's notebooks and graded cells when it generates the release; do
    that once if the gradebook does not know them yet: also where the assignment is there without
    them, as ``nbgrader db assignment add NAME --duedate=...`` leaves it (the due date stays)."""
    with gradebook(course) as gb:
        try:
            if gb.find_assignment(assignment).notebooks:
                return
        except MissingEntry:
            pass
    done = subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", assignment, "--force"],
                          cwd=course.root, env=nbgrader_env(), capture_output=True, text=True)
    if done.returncode != 0:
        hint = (f"\nThe gradebook holds a submission of {assignment} (granting an extension makes one) made before "
                f"its release was generated, and nbgrader will not add notebooks to it. Remove that submission "
                f"(nbgrader db student remove, or formgrader), run nbgrader generate_assignment {assignment}, then "
                f"grant the extension again." if "there are submissions" in done.stdout + done.stderr else "")
        raise GradingError(f"nbgrader generate_assignment {assignment} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
                           f"{hint}")


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
    """What the gradebook holds for one student besides the grader's verdicts: the written answers'
    grades (a TA's, or nbgrader's 0 for an answer left blank), TAs' comments on any cell (by
    notebook and cell name), and the submission's lateness and each notebook's late penalty, as
    nbgrader's late-submission plugin set it."""

    written: list[HandGrade] = field(default_factory=list)
    comments: dict[tuple[str, str], str] = field(default_factory=dict)
    seconds_late: float = 0.0
    penalties: dict[str, float] = field(default_factory=dict)
    set_by_ta: dict[tuple[str, str], float] = field(default_factory=dict)
    """Scores a TA set by hand on automatically graded cells, by notebook and test cell: a deduction
    the notebook promises (the grading guide lists them), which replaces the grader's score."""

    @property
    def score(self) -> float:
        return sum(hand.score or 0.0 for hand in self.written)

    @property
    def max_score(self) -> float:
        return sum(hand.max_score for hand in self.written)

    @property
    def waiting(self) -> list[HandGrade]:
        return [hand for hand in self.written if hand.score is None]

    def item_score(self, item) -> float:
        """An item's score: the one a TA set on its test cell, else the grader's."""
        return self.set_by_ta.get((item.notebook, item.test_id), item.score)

    @property
    def penalty(self) -> float:
        return sum(self.penalties.values())

    def late_note(self, notebook: str | None = None) -> str:
        """The lateness and its penalty in words (of one notebook, or of them all); "" when on time."""
        if not self.seconds_late:
            return ""
        penalty = self.penalties.get(notebook, 0.0) if notebook else self.penalty
        return f"Submitted {late_by(self.seconds_late)} after the due date: late penalty {penalty:g} points."


def marking_digest(marking: Marking | None) -> str:
    """A short digest of what the gradebook holds for a student, to tell when a page predates it."""
    marking = marking or Marking()
    text = json.dumps([[h.notebook, h.grade_id, h.score, h.comment] for h in marking.written]
                      + sorted([*key, text] for key, text in marking.comments.items())
                      + sorted([*key, score] for key, score in marking.set_by_ta.items())
                      + ([marking.late_note()] if marking.seconds_late else []))
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


def release_cells(course: Course, assignment: str) -> dict[str, list[dict]]:
    """The cells of each release notebook, by notebook name; none where the release is not at hand
    (reports copied elsewhere)."""
    return {path.stem: json.loads(path.read_text())["cells"]
            for path in sorted((course.root / "release" / assignment).glob("*.ipynb"))}


def written_answers(course: Course, assignment: str) -> list[HandGrade]:
    """The written answers of the release notebooks (markdown cells graded by hand), not graded yet."""
    found = []
    for notebook, cells in release_cells(course, assignment).items():
        for cell in cells:
            meta = marks(cell)
            if cell.get("cell_type") == "markdown" and meta.get("grade") and meta.get("grade_id"):
                found.append(HandGrade(notebook, meta["grade_id"], float(meta.get("points", 0))))
    return found


def markings(course: Course, assignment: str) -> dict[str, Marking]:
    """Every student's :class:`Marking` of ``assignment``, read from nbgrader's gradebook, where
    formgrader writes hand grades and comments. The grader never writes either, so they survive
    every regrade; a written answer's score is the TA's, else nbgrader's automatic 0 for an answer
    left blank, else None (waiting). A student the gradebook does not have yet has every written
    answer waiting."""
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
            marking.seconds_late = submission.total_seconds_late
            for nb in submission.notebooks:
                scores.update({(submission.student.id, nb.name, grade.name):
                               grade.auto_score if grade.manual_score is None else grade.manual_score
                               for grade in nb.grades if grade.cell_type == "markdown"})
                marking.set_by_ta.update({(nb.name, grade.name): grade.manual_score for grade in nb.grades
                                          if grade.cell_type == "code" and grade.manual_score is not None})
                if nb.late_submission_penalty is not None:
                    marking.penalties[nb.name] = nb.late_submission_penalty
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


def unchanged_answers(cells: list[dict], release: list[dict]) -> set[str]:
    """The answer cells (code or written) of ``cells`` that the student left as released, by
    ``grade_id``, judged as ``nbgrader autograde`` judges them: the cell, with the release's nbgrader
    metadata, has the release's checksum (nbgrader's own ``compute_checksum``)."""
    submitted = {grade_id(cell): cell for cell in cells}
    same = set()
    for cell in release:
        meta, gid = marks(cell), grade_id(cell)
        if meta.get("solution") and meta.get("checksum") and gid in submitted:
            theirs = submitted[gid]
            node = nbformat.from_dict({**cell, "cell_type": theirs.get("cell_type"),
                                       "source": source_text(theirs.get("source", ""))})
            if nbgrader_utils.compute_checksum(node) == meta["checksum"]:
                same.add(gid)
    return same


def record_in_gradebook(gb: Gradebook, result: SubmissionResult, unchanged: dict[str, set[str]],
                        timestamp: datetime.datetime | None = None) -> None:
    """Writes auto scores and comments into the open gradebook ``gb``, uncommitted, with the
    submission's time where it has one. ``unchanged`` holds, per notebook, the answer cells left as
    released (:func:`unchanged_answers`): as in ``nbgrader autograde``, such a written answer scores 0
    and such a cell's comment is "No response."; other written answers wait for a TA. Both
    ``autograder grade`` and the course's ``nbgrader autograde`` hook record through here. A class's
    results share one opened gradebook (:func:`gradebook`) and one commit: opening it inspects every
    table, and each commit waits for the disk, each costing more than recording a submission."""
    with warnings.catch_warnings():
        # nbgrader's own submission code trips SQLAlchemy's autoflush warnings; they mean nothing here.
        warnings.simplefilter("ignore", SAWarning)
        gb.update_or_create_student(result.student)
        gb.update_or_create_submission(result.assignment, result.student,
                                       **({"timestamp": timestamp} if timestamp else {}))
        by_test = {(i.notebook, i.test_id): i for i in result.items}
        by_answer: dict = {}
        for item in result.items:  # several items may grade one answer cell: their messages join
            by_answer.setdefault((item.notebook, item.answer), []).append(item)
        for notebook in dict.fromkeys([*(i.notebook for i in result.items), *result.unreadable]):
            submission = gb.find_submission_notebook(notebook, result.assignment, result.student)
            blank = unchanged.get(notebook, set())
            for grade in submission.grades:
                item = by_test.get((notebook, grade.name))
                if item is not None:
                    grade.auto_score, grade.needs_manual_grade = item.score, False
                elif notebook in result.unreadable or grade.name in blank:  # nothing for a TA to grade by hand
                    grade.auto_score, grade.needs_manual_grade = 0.0, False
                else:  # a written answer: a TA grades it in formgrader, once; a regrade keeps that grade
                    grade.auto_score, grade.needs_manual_grade = None, grade.manual_score is None
            for comment in submission.comments:
                found = by_answer.get((notebook, comment.name))
                # nbgrader renders comments as markdown without a sanitizer; messages can quote student code.
                comment.auto_comment = (safe_markdown("\n".join(item_message(i) for i in found)) if found else
                                        NO_RESPONSE if comment.name in blank else None)


def write_autograded(course: Course, result: SubmissionResult, pres: dict[str, Preflight],
                     release: dict[str, list[dict]]) -> None:
    """``autograded/<student>/<assignment>/<notebook>.ipynb``: the repaired notebook, each
    visible test cell showing the grader's result as plain text (what formgrader displays),
    each ``skip-grading`` demonstration showing what the student saw (its figures and text,
    :func:`inert_outputs`), and the student's markdown made inert (:func:`safe_markdown`)."""
    folder = course.root / "autograded" / result.student / result.assignment
    folder.mkdir(parents=True, exist_ok=True)
    by_test = {(i.notebook, i.test_id): i for i in result.items}
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


def write_grades_csv(course: Course, assignment: str, marked: dict[str, Marking]) -> Path:
    """``reports/<assignment>/grades.csv``: one row per student and item, from every report, and for
    a late submission one row per notebook with the late penalty that nbgrader's plugin set (of
    ``marked``, from :func:`markings`: the penalty as a negative score, its lateness in words), so
    that the scores add up to the grade."""
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
            marking = marked.get(data["student"], Marking())
            for notebook, penalty in marking.penalties.items() if marking.seconds_late else ():
                writer.writerow({"student": data["student"], "assignment": data["assignment"], "notebook": notebook,
                                 "grade_id": LATE_PENALTY, "score": -penalty if penalty else 0.0, "max_score": 0,
                                 "status": "late", "message": marking.late_note(notebook)})
    return path
