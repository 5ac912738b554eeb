"""Reports for instructors and exports for an LMS, made from the per-submission JSON reports.

Everything here reads ``reports/<assignment>/<student>.json`` (what ``autograder grade``
writes), so a report can be remade anywhere those files are, without grading again or
loading the hidden checks. The exports' totals and late penalties are the gradebook's
(:mod:`autograder.recording.lms_exports`) where it holds the submission. Only the section on
similar answers reads more: the submissions, the release and source notebooks, and the names of
the hidden checks' items (:mod:`autograder.recording.similarity`); where they are missing it says so. The page follows
:mod:`autograder.recording.feedback`: a template
(``templates/report.html.j2``) that escapes every string (student ids come from folder names,
messages quote student code), no script, and a Content-Security-Policy that forbids everything
but inline style and the embedded plots (PNG data URIs, drawn by matplotlib's Agg canvas).
"""

from __future__ import annotations

import base64
import csv
import io
import json
import statistics
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from autograder.reading.course import Course
from autograder.reading.errors import GradingError
from autograder.reading.faults import log_fault
from autograder.recording.feedback import PAGES
from autograder.recording.guide import write_guide
from autograder.recording.lms_exports import (Grade, gradebook_grades, gradescope_results, unrecorded,
                                              write_canvas_csv, write_gradescope_archive)
from autograder.recording.record import Marking, markings, stale_feedback
from autograder.reading.results import NOT_WRITTEN, STATUSES, SubmissionResult, load_results
from autograder.reading.sanitize import STORABLE, spreadsheet_safe
from autograder.recording.similarity import CLASSMATE, PUBLIC, REFERENCE
from autograder.recording.similarity_report import write_similarity

# An item whose discrimination is below this tells strong and weak students apart no better
# than chance, or worse: its check may be suspect.
SUSPECT_BELOW = 0.1


NOT_ATTEMPTED = "not attempted"
"""How the report shows a failed item whose answer is still the release's ``NotImplementedError``."""


def outcome(item) -> str:
    """An item's status as the report counts it: a failed item not attempted apart from a wrong one."""
    return NOT_ATTEMPTED if item.status == "failed" and item.message.startswith(NOT_WRITTEN) else item.status


def item_order(results: list[SubmissionResult]) -> list[str]:
    """The items in the order grading listed them (release notebooks, then the hidden checks)."""
    return list(dict.fromkeys(item.grade_id for result in results for item in result.items))


@dataclass
class ItemStats:
    """How one item behaved across the class. ``discrimination`` is the correlation of the
    item's score with the rest of each student's total (point-biserial for an item scored 0 or
    full), None where either has no variance; ``mistakes`` is the share of students whose
    answer made each named mistake on this item, most frequent first."""

    grade_id: str
    pass_rate: float
    discrimination: float | None
    mistakes: list[tuple[str, float]]

    @property
    def suspect(self) -> bool:
        """Near zero or negative: students who pass it do no better on the rest than those who fail it."""
        return self.discrimination is not None and self.discrimination < SUSPECT_BELOW


def item_statistics(results: list[SubmissionResult]) -> list[ItemStats]:
    """Pass rate, discrimination and named mistakes of each item, over the students graded on it,
    so that a check that fails good students (or passes weak ones) stands out."""
    stats = []
    for grade_id in item_order(results):
        graded = [(r.total, i) for r in results for i in r.items if i.grade_id == grade_id]
        n = len(graded)
        try:
            discrimination = statistics.correlation([i.score for _, i in graded],
                                                    [total - i.score for total, i in graded])
        except statistics.StatisticsError:  # a constant side (or fewer than two students): undefined
            discrimination = None
        mistakes = Counter(i.mistake for _, i in graded if i.mistake).most_common()
        stats.append(ItemStats(grade_id, sum(i.status == "passed" for _, i in graded) / n, discrimination,
                               [(mistake, count / n) for mistake, count in mistakes]))
    return stats


def checks_versions(results: list[SubmissionResult]) -> list[tuple[str, int]]:
    """The versions of the hidden checks the results were graded with, and how many each,
    most frequent first ("" for reports from before versions were recorded)."""
    return Counter(r.checks_version for r in results).most_common()


def _png(fig: Figure) -> str:
    """A figure as a data URI: the page then stands alone and carries no markup from matplotlib."""
    buffer = io.BytesIO()
    FigureCanvasAgg(fig).print_png(buffer)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _bars(labels: list[str], values: list[float], xlabel: str, title: str, xmax: float | None = None) -> str:
    """Horizontal bars, first label on top, whole numbers on the axis; labels are drawn as
    plain text (a ``$`` in a title starts no mathtext)."""
    fig = Figure(figsize=(8, 1.5 + 0.35 * len(labels)), layout="constrained")
    ax = fig.add_subplot()
    ax.barh(range(len(labels)), values, color="#4878a8")
    ax.set_yticks(range(len(labels)), labels, parse_math=False)
    ax.invert_yaxis()
    ax.set(xlabel=xlabel, title=title)
    ax.xaxis.get_major_locator().set_params(integer=True)
    if xmax is not None:
        ax.set_xlim(0, xmax)
    return _png(fig)


def _histogram(totals: list[float], max_total: float) -> str:
    """One bar per total that occurs: exact for fractional totals, which fixed bins would round."""
    values = sorted(set(totals))
    gaps = [b - a for a, b in zip(values, values[1:])]
    fig = Figure(figsize=(8, 3), layout="constrained")
    ax = fig.add_subplot()
    ax.bar(values, [totals.count(v) for v in values], width=0.8 * min([1.0, *gaps]), color="#4878a8")
    ax.set(xlabel="total points", ylabel="submissions", title="Score distribution", xlim=(-0.5, max_total + 0.5))
    ax.yaxis.get_major_locator().set_params(integer=True)
    return _png(fig)


def render(assignment: str, results: list[SubmissionResult], graded_at: str = "",
           marked: dict[str, Marking] | None = None, similarity: dict | None = None) -> str:
    """The instructor's page: headline numbers and the hidden checks' version, score distribution,
    pass rate per item, item statistics, named mistakes, how often each status occurs, flags
    per student, and (``similarity``, from :func:`similarity_section`) how many answers of each cell
    are similar to others."""
    n = len(results)
    totals = [r.total for r in results]
    max_total = max(r.max_total for r in results)
    items = [i for r in results for i in r.items]
    order = item_order(results)
    points = {i.grade_id: i.max_score for i in items}
    passed = Counter(i.grade_id for i in items if i.status == "passed")
    mistakes = Counter(m for r in results for m in {i.mistake for i in r.items if i.mistake}).most_common()
    statuses = Counter(outcome(i) for i in items)
    hit = Counter(status for r in results for status in {outcome(i) for i in r.items})
    shown = [*STATUSES[:2], NOT_ATTEMPTED, *STATUSES[2:]]
    return PAGES.get_template("report.html.j2").render(
        assignment=assignment, n=n, mean=statistics.mean(totals), median=statistics.median(totals),
        max_total=max_total, histogram=_histogram(totals, max_total),
        pass_rates=_bars(order, [100 * passed[g] / n for g in order], "% of submissions that passed",
                         "Pass rate per item", xmax=100),
        items=[{"grade_id": g, "points": points[g], "passed": passed[g],
                "mean": sum(i.score for i in items if i.grade_id == g) / n} for g in order],
        mistakes=mistakes,
        mistakes_plot=_bars([m for m, _ in mistakes], [c for _, c in mistakes], "students",
                            "How many students made each named mistake") if mistakes else None,
        statuses=[(s, statuses[s], hit[s]) for s in shown if statuses[s]], graded_at=graded_at,
        written=_written_summary([(marked or {}).get(r.student, Marking()) for r in results]),
        flagged=[r for r in results if r.flags], item_stats=item_statistics(results), suspect_below=SUSPECT_BELOW,
        versions=checks_versions(results), similarity=similarity)


def similarity_section(course: Course, assignment: str) -> dict:
    """Writes the similarity report (:mod:`autograder.recording.similarity_report`) and returns what the class
    report says of it: per answer cell, its pairs at or above the threshold by source and how many are
    weak evidence; or, under ``missing``, why answers were not compared. A fault of the grader while comparing
    costs this section, never the report: it is logged (:mod:`autograder.reading.faults`), and the section says so."""
    try:
        written = write_similarity(course, assignment)
    except GradingError as error:
        return {"missing": f"Answers were not compared: {error}"}
    except Exception as error:  # noqa: BLE001 - the grader's own fault costs this section, not the class's report
        return {"missing": log_fault(course.reports(assignment), assignment, "comparing the class's answers", error,
                                     "the report was written without them. Compare the answers by hand")}
    if written is None:
        return {"missing": f"Answers were not compared: no submission of {assignment} in submitted/."}
    result = written.result
    return {"missing": "", "page": written.page.name, "csv": written.csv.name, "threshold": result.threshold,
            "cells": [{"cell": cell.cell, "pairs": len(cell.pairs), "classmate": cell.count(CLASSMATE),
                       "reference": cell.count(REFERENCE), "public": cell.count(PUBLIC),
                       "groups": len(cell.groups), "weak": sum(bool(pair.weak) for pair in cell.pairs)}
                      for cell in result.cells]}


def _written_summary(marks: list[Marking]) -> list[dict]:
    """Per written answer: its points, how many students a TA has graded, how many wait, the mean."""
    rows = []
    for index, hand in enumerate(marks[0].written if marks else []):
        scores = [m.written[index].score for m in marks if m.written[index].score is not None]
        rows.append({"grade_id": hand.grade_id, "points": hand.max_score, "graded": len(scores),
                     "waiting": len(marks) - len(scores), "mean": statistics.mean(scores) if scores else None})
    return rows


WAITING = "waiting"
"""What an export shows for a written answer that no TA has graded yet."""


def write_scores_csv(path: Path, results: list[SubmissionResult], marked: dict[str, Marking],
                     grades: dict[str, Grade]) -> Path:
    """One row per student, one column per item and per written answer, for a spreadsheet. The total is
    ``grades``' (the hand grades recorded so far, less the late penalty, which has a column of its own);
    ``waiting`` counts the written answers no TA has graded yet, whose cells say ``waiting``; an item whose
    score a TA set by hand (a deduction) has the TA's.
    (``grades.csv``, written by ``autograder grade``, is the long shape of the automatic grades: a row per
    student and item. An LMS takes ``canvas.csv`` or the Gradescope archive: :mod:`.lms_exports`.)"""
    order = item_order(results)
    written = [hand.grade_id for hand in next(iter(marked.values()), Marking()).written]
    with path.open("w", newline="", **STORABLE) as f:
        writer = csv.writer(f)
        writer.writerow(["student", "total", "max_total", "late_penalty", "waiting", *order, *written])
        for result in results:
            marking = marked.get(result.student, Marking())
            scores = {i.grade_id: marking.item_score(i) for i in result.items}
            grade = grades[result.student]
            hand = {h.grade_id: WAITING if h.score is None else f"{h.score:g}" for h in marking.written}
            writer.writerow([spreadsheet_safe(result.student), f"{grade.total:g}", f"{grade.max_score:g}",
                             f"{grade.penalty:g}", len(marking.waiting),
                             *(f"{scores[g]:g}" if g in scores else "" for g in order),
                             *(hand.get(g, "") for g in written)])
    return path


def write_reports(course: Course, assignment: str, canvas_column: str = "") -> dict | None:
    """Writes ``report.html``, ``scores.csv``, the LMS exports (``canvas.csv``, whose assignment column is
    ``canvas_column`` or the assignment's name, ``gradescope/<student>/results.json`` and their archive
    ``gradescope_autograder.zip``), the TA's grading guide and the similarity report under
    ``reports/<assignment>/``. It names the students the Gradescope archive leaves out for want of an
    email in the gradebook (``no_email``), and those whose feedback pages predate their hand grades
    (``stale``); None when there is no graded submission to report on."""
    results = load_results(course, assignment)
    if not results:
        return None
    folder = course.reports(assignment)
    marked = markings(course, assignment)
    recorded = gradebook_grades(course, assignment)
    grades = {r.student: recorded.get(r.student) or unrecorded(r, marked.get(r.student, Marking())) for r in results}
    html = folder / "report.html"
    newest = max(path.stat().st_mtime for path in folder.glob("*.json"))
    html.write_text(render(assignment, results, time.strftime("%Y-%m-%d %H:%M", time.localtime(newest)), marked,
                           similarity_section(course, assignment)), **STORABLE)
    gradescope = folder / "gradescope"
    scope = {r.student: gradescope_results(r, marked.get(r.student, Marking()), grades[r.student]) for r in results}
    for student, data in scope.items():
        path = gradescope / student / "results.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2) + "\n")
    archive = folder / "gradescope_autograder.zip"
    no_email = write_gradescope_archive(archive, scope, {student: grade.email for student, grade in grades.items()})
    return {"report": html, "scores": write_scores_csv(folder / "scores.csv", results, marked, grades),
            "canvas": write_canvas_csv(folder / "canvas.csv", canvas_column or assignment, list(recorded.values())),
            "gradescope": gradescope, "gradescope_archive": archive, "no_email": no_email,
            "guide": write_guide(course, assignment), "stale": stale_feedback(course, assignment, marked)}
