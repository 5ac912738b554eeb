"""Grades in the files an LMS takes in: Canvas's gradebook CSV and a Gradescope autograder archive.

Each total is the one nbgrader's gradebook holds, less nbgrader's late penalty, as ``nbgrader export``
computes it (``max(0, score - late_submission_penalty)``): the same whichever command graded, since
``autograder grade`` and ``nbgrader autograde`` both record there, and it counts a TA's hand grades.

Canvas's importer reads the layout of Canvas's own gradebook export: a header of ``Student``, ``ID``,
``SIS User ID``, ``SIS Login ID``, ``Section`` and one column per assignment, a second row that starts
with ``Points Possible``, then a row per student, matched by ``ID`` (Canvas's user id), else by SIS ids,
else by name. Gradescope runs an autograder archive's ``run_autograder`` once per submission and shows
the ``results.json`` it leaves; the archive made here runs no student code, it hands back the grade made
here, found by the email of the submitter's account. docs/lms.md walks through both.
"""

from __future__ import annotations

import csv
import json
import re
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path

from nbgrader.api import MissingEntry
from sqlalchemy.exc import SAWarning

from autograder.reading.course import Course
from autograder.reading.results import SubmissionResult
from autograder.reading.sanitize import STORABLE, spreadsheet_safe
from autograder.recording.record import Marking, gradebook, item_message

CANVAS_STUDENT_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
CANVAS_POINTS_POSSIBLE = "    Points Possible"
"""The first cell of the second row, spaces included, as Canvas's export writes it."""

# Gradescope shows a submission's results once the instructor publishes the grades, as
# nbgrader's release_feedback hands out feedback only when the instructor does.
GRADESCOPE_VISIBILITY = "after_published"

EMAIL = re.compile(r'[^\s"\\]+@[^\s"\\]+')
"""An email that run_autograder can find as it is in Gradescope's JSON: no space, no character JSON escapes."""

RUN_AUTOGRADER = """#!/bin/sh
# Gradescope runs this once per submission. Its autograder specification: this archive is unpacked in
# /autograder/source, the submission's metadata is /autograder/submission_metadata.json, and the grade
# goes to /autograder/results/results.json. Nothing of the submission runs: this hands back the grade
# that `autograder report` made for the student whose email the submitter's account has.
# `sh run_autograder DIR` tries it on a folder laid out as /autograder is.
root="${1:-/autograder}"
tab="$(printf '\\t')"
while IFS="$tab" read -r email number; do
    if grep -qiF "\\"$email\\"" "$root/submission_metadata.json"; then
        mkdir -p "$root/results"
        cp "$root/source/results/$number.json" "$root/results/results.json"
        exit 0
    fi
done < "$root/source/emails.tsv"
echo "No grade in this archive for the email of this submission's account. Add the student's email to"
echo "nbgrader's gradebook, run autograder report again and upload the new archive."
exit 1
"""

SETUP_SH = """#!/bin/sh
# Nothing to install: run_autograder needs only sh, grep and cp.
"""


@dataclass(frozen=True)
class Grade:
    """One student's grade of an assignment in nbgrader's gradebook, with the roster's fields an LMS
    matches: ``points`` counts every graded cell (the grader's score, or a TA's), ``penalty`` is what
    nbgrader's late-submission plugin took off."""

    student: str
    first_name: str
    last_name: str
    email: str
    lms_user_id: str
    points: float
    penalty: float
    max_score: float

    @property
    def total(self) -> float:
        """What the student gets: the points less the penalty, never below 0, as ``nbgrader export`` says."""
        return max(0.0, self.points - self.penalty)


def gradebook_grades(course: Course, assignment: str) -> dict[str, Grade]:
    """Every submission of ``assignment`` that nbgrader's gradebook holds, by student id, in id order."""
    with warnings.catch_warnings(), gradebook(course) as gb:
        warnings.simplefilter("ignore", SAWarning)  # nbgrader's own queries trip SQLAlchemy's autoflush warnings
        try:
            submissions = gb.assignment_submissions(assignment)
        except MissingEntry:
            return {}
        return {s.student.id: Grade(s.student.id, s.student.first_name or "", s.student.last_name or "",
                                    s.student.email or "", s.student.lms_user_id or "", s.score,
                                    s.late_submission_penalty, s.max_score)
                for s in sorted(submissions, key=lambda s: s.student.id)}


def canvas_user_id(grade: Grade) -> str:
    """The student's Canvas user id: nbgrader's ``lms_user_id``, or the student id where it is all digits,
    as it is where ``nbgrader zip_collect`` filed Canvas's download (``nbgrader_config.py``)."""
    return grade.lms_user_id or (grade.student if grade.student.isascii() and grade.student.isdigit() else "")


def canvas_name(grade: Grade) -> str:
    """The name as Canvas's export writes it, "Last, First", which its importer matches last of all."""
    return ", ".join(part for part in (grade.last_name, grade.first_name) if part) or grade.student


def write_canvas_csv(path: Path, column: str, grades: list[Grade]) -> Path | None:
    """Canvas's gradebook import: a row per submission in the gradebook (``SIS Login ID`` holds the
    student id, a login name where students submit through nbgrader's exchange), the totals and
    points possible with two decimals as Canvas's export writes them; None where there is no grade."""
    if not grades:
        return None
    with path.open("w", newline="", **STORABLE) as f:
        writer = csv.writer(f)
        writer.writerow([*CANVAS_STUDENT_COLUMNS, column])
        writer.writerow([CANVAS_POINTS_POSSIBLE, "", "", "", "", f"{max(g.max_score for g in grades):.2f}"])
        for grade in grades:
            writer.writerow([spreadsheet_safe(canvas_name(grade)), canvas_user_id(grade), "",
                             spreadsheet_safe(grade.student), "", f"{grade.total:.2f}"])
    return path


def unrecorded(result: SubmissionResult, marking: Marking) -> Grade:
    """The grade of a report whose submission the gradebook does not hold (reports copied without it):
    its automatic points and hand grades, no penalty known."""
    return Grade(result.student, "", "", "", "", result.total + marking.score, 0.0,
                 result.max_total + marking.max_score)


def gradescope_results(result: SubmissionResult, marking: Marking, grade: Grade) -> dict:
    """Gradescope's ``results.json`` for one submission: a test per item, its output the text that
    formgrader and the autograded notebook show, one per written answer with its hand grade (0 and
    "waiting" until a TA grades it), and the total of ``grade``, which overrides the tests' sum and
    the late penalty explains."""
    written = [{"name": hand.grade_id, "score": hand.score or 0.0, "max_score": hand.max_score,
                "status": "passed" if hand.score is not None and hand.score >= hand.max_score else "failed",
                "output": (f"Graded by hand: {hand.score:g}/{hand.max_score:g}. {hand.comment}".strip()
                           if hand.score is not None else "Graded by hand: waiting for a TA.")}
               for hand in marking.written]
    automatic = [{"name": item.grade_id, "score": marking.item_score(item), "max_score": item.max_score,
                  "status": "passed" if item.status == "passed" else "failed", "output": item_message(item)}
                 for item in result.items]
    late = ([f"Late: nbgrader's late-submission penalty takes {grade.penalty:g} of {grade.points:g} points, "
             f"for a total of {grade.total:g}."] if grade.penalty else [])
    return {
        "score": grade.total,
        "output": "\n".join([*result.flags, *late]),
        "output_format": "text",  # messages quote student code: shown as text, never as markdown or HTML
        "test_output_format": "text",
        "visibility": GRADESCOPE_VISIBILITY,
        "tests": [{**test, "number": str(number)} for number, test in enumerate(automatic + written, 1)],
    }


def _add(archive: zipfile.ZipFile, name: str, text: str, mode: int = 0o644) -> None:
    """One member, with a fixed date (the same grades make the same bytes) and Unix permissions."""
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.external_attr = mode << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(info, text)


def write_gradescope_archive(path: Path, results: dict[str, dict], emails: dict[str, str]) -> list[str]:
    """The autograder archive to upload to Gradescope: ``setup.sh`` and ``run_autograder`` at its root,
    ``emails.tsv`` (an email and a number a line) and ``results/<number>.json``, the ``results`` of each
    student whose gradebook email (``emails``) Gradescope's JSON can show. Returns the students left out."""
    left_out = [student for student in results if not EMAIL.fullmatch(emails.get(student, ""))]
    kept = [student for student in results if student not in left_out]
    with zipfile.ZipFile(path, "w") as archive:
        _add(archive, "setup.sh", SETUP_SH, 0o755)
        _add(archive, "run_autograder", RUN_AUTOGRADER, 0o755)
        _add(archive, "emails.tsv", "".join(f"{emails[student]}\t{number}\n" for number, student in enumerate(kept, 1)))
        for number, student in enumerate(kept, 1):
            _add(archive, f"results/{number}.json", json.dumps(results[student], indent=2) + "\n")
    return left_out
