"""The similarity report of an assignment, for course staff: ``reports/<assignment>/similarity.html``
and ``similarity.csv``.

The page lists, cell by cell, the pairs of answers at or above the threshold, highest first, with
the two answers side by side and the regions that match marked; the groups of students joined by
such pairs; and which pairs are weak evidence, and why. The CSV has a row per student and, for
each answer cell, the most similar other answer and its similarity: the shape an LMS imports as
columns that only staff see. Neither says more than "similar". Students never see either:
feedback pages are made from the grading reports alone, which hold nothing of this.

The page follows the class report (:mod:`autograder.recording.report`): a template that escapes every string
(answers are student code, student ids are folder names), no script, and a Content-Security-Policy
that allows nothing but inline style.
"""

from __future__ import annotations

import csv
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from autograder.reading.course import Course
from autograder.recording.feedback import PAGES
from autograder.recording.fingerprints import K, matching_regions
from autograder.reading.sanitize import STORABLE, spreadsheet_safe
from autograder.recording.similarity import (CLASSMATE, MIN_COMMON, PUBLIC, REFERENCE, SHORT, CellSimilarity,
                                             ClassSimilarity, Pair, compare_class)

SHOWN = 25
"""Pairs of a cell shown side by side on the page, the most similar first."""
LISTED = 500
"""Pairs of a cell listed (without their answers) after those; the CSV holds each student's closest."""


@dataclass
class SimilarityFiles:
    """What ``write_similarity`` compared and wrote."""

    result: ClassSimilarity
    page: Path
    csv: Path


def write_similarity(course: Course, assignment: str, threshold: float | None = None) -> SimilarityFiles | None:
    """Compares the class's answers (:func:`autograder.recording.similarity.compare_class`) and writes the page
    and the CSV under ``reports/<assignment>/``; None when nobody has submitted the assignment."""
    result = compare_class(course, assignment, threshold)
    if not result.students:
        return None
    folder = course.reports(assignment)
    folder.mkdir(parents=True, exist_ok=True)
    page = folder / "similarity.html"
    page.write_text(render(result), **STORABLE)
    return SimilarityFiles(result, page, write_csv(folder / "similarity.csv", result))


def label(pair: Pair) -> str:
    """The other answer of a pair, as the page and the CSV name it."""
    if pair.b.source == CLASSMATE:
        return pair.b.owner
    return "the course's reference" if pair.b.source == REFERENCE else f"public code: {pair.b.owner}"


def segments(text: str, mask: np.ndarray) -> list[tuple[str, bool]]:
    """``text`` cut where ``mask`` (one flag per character) changes: (piece, marked) in order."""
    cuts = [0, *(np.flatnonzero(np.diff(mask.astype(np.int8))) + 1).tolist(), len(text)]
    return [(text[start:end], bool(mask[start])) for start, end in zip(cuts, cuts[1:]) if end > start]


def _shown(cell: CellSimilarity, pair: Pair) -> dict:
    left, right = matching_regions(pair.a.fingerprint, pair.b.fingerprint, cell.common)
    return {"pair": pair, "other": label(pair), "left": segments(pair.a.fingerprint.raw_code, left),
            "right": segments(pair.b.fingerprint.raw_code, right)}


def render(result: ClassSimilarity) -> str:
    """The page: what was compared, a summary per cell, then each cell's groups and pairs."""
    cells = [{"cell": cell, "shown": [_shown(cell, pair) for pair in cell.pairs[:SHOWN]],
              "listed": [(pair, label(pair)) for pair in cell.pairs[SHOWN:SHOWN + LISTED]],
              "unlisted": max(0, len(cell.pairs) - SHOWN - LISTED)} for cell in result.cells]
    reference = any(other.source == REFERENCE for cell in result.cells for other in cell.others)
    return PAGES.get_template("similarity.html.j2").render(
        result=result, cells=cells, made=time.strftime("%Y-%m-%d %H:%M"), sources=(CLASSMATE, REFERENCE, PUBLIC),
        short=SHORT, min_common=MIN_COMMON, k=K, reference=reference)


def write_csv(path: Path, result: ClassSimilarity) -> Path:
    """A row per student: how many of their answers are similar to another at or above the threshold,
    then for each answer cell the most similar other answer, its similarity (0 to 1), and why that is
    weak evidence where it is. A cell the student left blank stays empty."""
    with path.open("w", newline="", **STORABLE) as f:
        writer = csv.writer(f)
        writer.writerow(["student", "answers_at_or_above_threshold",
                         *(f"{c.cell}_{part}" for c in result.cells for part in ("similarity", "with", "weak_evidence"))])
        answered = [{answer.owner for answer in cell.answers} for cell in result.cells]
        for student in result.students:
            row, above = [], 0
            for cell, owners in zip(result.cells, answered):
                pair = cell.closest.get(student)
                above += pair is not None and pair.similarity >= result.threshold
                row += ([f"{pair.similarity:.2f}", spreadsheet_safe(label(pair)), pair.weak] if pair
                        else ["0.00" if student in owners else "", "", ""])
            writer.writerow([spreadsheet_safe(student), above, *row])
    return path
