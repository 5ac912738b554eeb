"""Grading a class, then recording it: the one entry point of the library.

The command line, the demo, nbgrader's autograde hook and the tests all call
:func:`grade_and_record` (or its halves, :func:`grade` and :func:`record_class`), so every
way of grading produces the same files: a JSON report per submission, the autograded notebooks,
feedback pages, the gradebook's scores and ``grades.csv``. Nothing here prints; the caller
shows what it returns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from autograder.recording import feedback, lateness, record
from autograder.running import sandbox
from autograder.reading.assignment import Assignment
from autograder.reading.cells import answer_cells
from autograder.reading.course import Course, checks_version
from autograder.reading.errors import GradingError
from autograder.reading.faults import costs_one, log_fault
from autograder.judging.grading import grade_class
from autograder.reading.notebook_data import read_notebook
from autograder.reading.preflight import Preflight
from autograder.recording.regrade import Regrade, compare, out_of_date, write_changes_csv
from autograder.reading.results import SubmissionResult, load_results, write_report


NO_PAGES = "the student's feedback pages were not written. Give them their results from the report"
"""What ``autograder feedback`` does instead of a student's pages on which the grader faults, as its note says."""


@dataclass
class ClassGrades:
    """What a grading run did: the results in student order, the sandbox it used, where they were
    recorded (``grades_csv`` is None for a shard, which the merge records) and notes for the
    instructor: late penalties, and students whose recording or pages fell short."""

    assignment: str
    results: list[SubmissionResult]
    isolation: str = ""
    grades_csv: Path | None = None
    notes: list[str] = field(default_factory=list)


def isolation_for(course: Course) -> sandbox.Isolation:
    """The sandbox student code runs in; without bubblewrap, only where the course's settings
    say that a container is the wall (``unsafe_no_sandbox``)."""
    isolation = sandbox.detect_isolation()
    if isolation.name == "none" and not course.settings.unsafe_no_sandbox:
        raise GradingError(f"Refusing to run student code without a sandbox: {isolation.detail}. Only where a "
                           "container is itself the wall, --unsafe-no-sandbox grades without one.")
    return isolation


def grade(course: Course, assignment: Assignment, students: list[str], isolation: sandbox.Isolation,
          progress: Callable[[str], None] | None = None) -> list[tuple[SubmissionResult, dict[str, Preflight]]]:
    """Grades ``students`` and writes what belongs to each of them alone: the JSON report and the
    autograded notebooks (so that shards never write the same file). Feedback pages wait for the
    gradebook (:func:`record_class`), which holds what they show besides the verdicts."""
    graded = grade_class(course, assignment, students, isolation, progress)
    for result, pres in graded:
        try:
            record.write_autograded(course, result, pres, assignment.release)
        except Exception as error:  # noqa: BLE001 - the grader's own fault costs this student's notebook, not the class
            result.flags.append(log_fault(course.reports(assignment.name), result.student,
                                          "writing the autograded notebook", error))
        write_report(course, result)
    return graded


def record_class(course: Course, assignment: str, results: list[SubmissionResult]) -> tuple[Path, list[str]]:
    """Records ``results`` (every report is already written: :func:`merge` records them again) as
    ``nbgrader autograde`` records a submission: its time, the scores (0 for an answer left blank,
    :func:`record.unchanged_answers`), then nbgrader's late penalties. Then writes ``grades.csv`` and
    the students' feedback pages; returns the CSV's path and notes: each late submission's penalty,
    and the students not recorded or whose pages fell short."""
    record.ensure_assignment_in_gradebook(course, assignment)
    release = record.release_cells(course, assignment)
    notes: list[str] = []
    recorded = []
    with record.gradebook(course) as gb:
        for result in results:
            try:
                timestamp = lateness.submitted_at(course, assignment, result.student)
            except GradingError as error:  # nbgrader autograde fails such a student too
                notes.append(f"{result.student}: not recorded in the gradebook: {error}")
                continue
            cells, _ = autograded_cells(course, result)  # a copy that cannot be read is noted with its pages
            unchanged = {nb: record.unchanged_answers(cells[nb], release[nb]) for nb in cells if nb in release}
            record.record_in_gradebook(gb, result, unchanged, timestamp)
            recorded.append(result)
        late = [result for result in recorded if not lateness.clear_penalties_on_time(gb, result)]
        gb.db.commit()
    for result in late:
        lateness.assign_penalties(course, result)
    marked = record.markings(course, assignment)
    notes += [f"{r.student}: {marked[r.student].late_note()}" for r in recorded if marked[r.student].seconds_late]
    grades_csv = record.write_grades_csv(course, assignment, marked)
    write_pages(course, assignment, results, notes, marked)
    return grades_csv, notes


def grade_and_record(course: Course, assignment: str, students: list[str] | None = None,
                     shard: tuple[int, int] | None = None, progress: Callable[[str], None] | None = None,
                     announce: Callable[[str, int], None] | None = None) -> ClassGrades:
    """Grades the submissions of ``assignment`` (every student in ``submitted/``, or
    ``students``; with ``shard=(i, N)`` every N-th of them from the i-th) and records them.
    A shard leaves the gradebook to :func:`merge`. Once everything is ready, ``announce`` hears
    the sandbox in use and how many submissions are to be graded; ``progress`` hears each
    student whose submission is done."""
    isolation = isolation_for(course)
    with course.grading_lock(assignment, shard):
        prepared = Assignment.load(course, assignment)
        if not shard:  # hand grades are read from it; shards leave the gradebook to the merge
            record.ensure_assignment_in_gradebook(course, assignment)
        chosen = students or course.students(assignment)
        if shard:
            index, count = shard
            chosen = chosen[index::count]
        if announce:
            announce(f"Isolation: {isolation.name}: {isolation.detail}" if isolation.name != "none" else
                     f"WARNING: no sandbox ({isolation.detail}); student code runs with only process limits.",
                     len(chosen))
        results = [result for result, _ in grade(course, prepared, chosen, isolation, progress)]
        grades = ClassGrades(assignment, results, isolation.name)
        if results and not shard:
            grades.grades_csv, grades.notes = record_class(course, assignment, results)
        return grades


def regrade(course: Course, assignment: str, students: list[str] | None = None,
            progress: Callable[[str], None] | None = None,
            announce: Callable[[str, int], None] | None = None) -> tuple[ClassGrades, Regrade]:
    """Grades and records again the submissions (of ``students``, or all) whose report was graded
    with other hidden checks than the current ones, or has none, and writes ``changes.csv``:
    the items whose score or status changed. Current reports are left as they are."""
    version = checks_version(course, assignment)
    old = {result.student: result for result in load_results(course, assignment)}
    candidates = students or course.students(assignment)
    stale = out_of_date(candidates, old, version)
    if not stale:
        return ClassGrades(assignment, []), compare(version, candidates, old, [])
    grades = grade_and_record(course, assignment, stale, progress=progress, announce=announce)
    outcome = compare(version, candidates, old, grades.results)
    outcome.changes_csv = write_changes_csv(course.reports(assignment) / "changes.csv", outcome.changes)
    return grades, outcome


def merge(course: Course, assignment: str) -> ClassGrades:
    """Records every graded shard's reports in the gradebook and ``grades.csv``."""
    results = load_results(course, assignment)
    if not results:
        raise GradingError(f"No reports for {assignment} in {course.reports(assignment)}: run "
                           f"`autograder grade {assignment} --shard i/N` for each shard first.")
    return ClassGrades(assignment, results, results[0].isolation, *record_class(course, assignment, results))


def write_class_feedback(course: Course, assignment: str) -> tuple[list[Path], list[str]]:
    """Feedback pages again from the last grading (its reports and autograded notebooks) and the
    hand grades and comments that TAs have recorded in formgrader since: the one command that
    makes students' feedback (in place of ``nbgrader generate_feedback``). Returns the pages, and notes
    on the pages that show no code or were not written: a fault of the grader costs one student's pages."""
    results = load_results(course, assignment)
    if not results:
        raise GradingError(f"No reports for {assignment} in {course.reports(assignment)}: run "
                           f"`autograder grade {assignment}` first.")
    notes: list[str] = []
    return write_pages(course, assignment, results, notes), notes


def write_pages(course: Course, assignment: str, results: list[SubmissionResult], notes: list[str],
                marked: dict[str, record.Marking] | None = None) -> list[Path]:
    """The feedback pages of ``results``, with what the gradebook holds (``marked``, or else read now
    with :func:`record.markings`): hand grades, comments, late penalties. Notes on pages that fall
    short go into ``notes``."""
    marked = record.markings(course, assignment) if marked is None else marked
    pages: list[Path] = []
    for result in results:
        with costs_one(course.reports(assignment), result.student, "writing the feedback pages", NO_PAGES, notes):
            pages += feedback.write_feedback(course, result, graded_answers(course, result, notes),
                                             marked.get(result.student))
    return pages


def graded_answers(course: Course, result: SubmissionResult, notes: list[str]) -> dict[str, list[tuple[str, str]]]:
    """The answer cells of each notebook of ``result``, from its autograded copy
    (:func:`autograded_cells`); a copy that cannot be read gives none, with a note in ``notes``."""
    cells, problems = autograded_cells(course, result)
    notes += problems
    return {notebook: answer_cells(found) for notebook, found in cells.items()}


def autograded_cells(course: Course, result: SubmissionResult) -> tuple[dict[str, list[dict]], list[str]]:
    """The cells of each notebook of ``result``, from its autograded copy, read as untrusted data:
    nbgrader's own autograde copies the submission there as it is. A copy that is missing gives no
    cells, and so does one that cannot be read, with a note (the second value)."""
    folder = course.root / "autograded" / result.student / result.assignment
    cells, problems = {}, []
    for notebook in dict.fromkeys(item.notebook for item in result.items):
        path = folder / f"{notebook}.ipynb"
        data, problem = read_notebook(path) if path.exists() else ({"cells": []}, None)
        if problem:
            problems.append(f"{result.student}: the feedback page of {notebook} shows no code: "
                            f"{path.relative_to(course.root)} could not be read ({problem})")
        cells[notebook] = data["cells"] if data else []
    return cells, problems
