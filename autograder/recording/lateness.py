"""Late work, judged by nbgrader's own code, so that ``autograder grade`` and ``nbgrader autograde`` agree.

nbgrader's rules are the course's: a submission's time is its ``timestamp.txt`` (``submit`` writes
it, ``collect`` keeps it, ``zip_collect`` writes it from a download), it is late past the
assignment's due date plus the student's extension (both in the gradebook), and the
``AssignLatePenalties`` step sets each notebook's penalty with the course's ``LateSubmissionPlugin``
(its ``penalty_method``, or a plugin of the course's own). ``nbgrader autograde`` runs these
itself; ``autograder grade`` calls the same functions and classes here, never a copy of them (but
for the one thing that step does to a submission on time, clearing its penalties, done here in the
gradebook already open).
"""

from __future__ import annotations

import datetime

from nbformat.v4 import new_notebook
from nbgrader.api import Gradebook
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import AssignLatePenalties

from autograder.reading.course import Course
from autograder.reading.errors import GradingError
from autograder.reading.results import SubmissionResult


def submitted_at(course: Course, assignment: str, student: str) -> datetime.datetime | None:
    """The time in the submission's ``timestamp.txt``, read as ``nbgrader autograde`` reads it (UTC,
    without a zone); None where the file is missing or empty. A time nbgrader cannot read raises
    :class:`GradingError`, as it fails that student in ``nbgrader autograde``."""
    folder = course.submission_folder(assignment, student)
    directory = CourseDirectory(config=course.settings.config)
    try:
        return directory.get_existing_timestamp(str(folder))
    except Exception as error:  # noqa: BLE001 - nbgrader 0.9 fails here with an AttributeError of its own
        raise GradingError(f"{folder / 'timestamp.txt'} holds no time that nbgrader reads ({error}); write the "
                           f"submission's time there (for example 2026-01-20 17:00:00 UTC), or remove the file, "
                           f"and grade again.") from error


def _graded_notebooks(result: SubmissionResult) -> list[str]:
    """The notebooks of the submission that were graded (a missing one gets no penalty, as in nbgrader)."""
    return [nb for nb in dict.fromkeys(item.notebook for item in result.items) if nb not in result.unreadable]


def clear_penalties_on_time(gb: Gradebook, result: SubmissionResult) -> bool:
    """For a submission on time by nbgrader's own measure (``total_seconds_late``, the extension
    included), does in the open gradebook ``gb`` all that ``AssignLatePenalties`` does to it: clear
    each graded notebook's ``late_submission_penalty``. Returns whether it was on time; a late one
    is left to :func:`assign_penalties`. Why: that step opens the gradebook for each notebook, which
    cost 9 ms a submission, a third of recording one, in a class mostly on time."""
    if gb.find_submission(result.assignment, result.student).total_seconds_late > 0:
        return False
    for notebook in _graded_notebooks(result):
        gb.find_submission_notebook(notebook, result.assignment, result.student).late_submission_penalty = None
    return True


def assign_penalties(course: Course, result: SubmissionResult) -> None:
    """Runs nbgrader's ``AssignLatePenalties`` with the course's settings on each notebook of the
    submission that was graded, as ``nbgrader autograde`` runs it once a notebook's scores are in
    the gradebook: it sets the notebook's ``late_submission_penalty``, or clears it where the
    submission is on time."""
    step = AssignLatePenalties(config=course.settings.config)
    for notebook in _graded_notebooks(result):
        step.preprocess(new_notebook(), {"nbgrader": {"notebook": notebook, "assignment": result.assignment,
                                                      "student": result.student, "db_url": course.settings.db_url}})


def late_by(seconds: float) -> str:
    """A lateness in words, to the minute: "2 days 3 h 5 min"."""
    minutes = max(1, round(seconds / 60))
    days, rest = divmod(minutes, 24 * 60)
    hours, minutes = divmod(rest, 60)
    parts = [f"{days} day{'s' if days != 1 else ''}" if days else "", f"{hours} h" if hours else "",
             f"{minutes} min" if minutes else ""]
    return " ".join(part for part in parts if part)
