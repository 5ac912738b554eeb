"""Regrading after the hidden checks changed: whose reports are out of date, and what changed.

Every report records the version of the hidden checks it was graded with
(:func:`autograder.reading.course.checks_version`). ``autograder grade --regrade`` grades again only
the submissions whose report has another version, or none (:func:`autograder.recording.pipeline.regrade`),
and this module compares each new report with the old one item by item, so that an instructor
sees who gained or lost points on which item, and why, before releasing the new grades.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from autograder.reading.results import ItemResult, SubmissionResult
from autograder.reading.sanitize import STORABLE, spreadsheet_safe

CHANGE_FIELDS = ["student", "grade_id", "old_score", "new_score", "old_status", "new_status", "old_mistake",
                 "new_mistake", "old_message", "new_message"]


@dataclass
class Change:
    """One item of one student whose score or status the regrade changed; ``old`` or ``new``
    is None for an item that only the old or only the new checks have."""

    student: str
    grade_id: str
    old: ItemResult | None
    new: ItemResult | None

    @property
    def gained(self) -> float:
        return (self.new.score if self.new else 0.0) - (self.old.score if self.old else 0.0)


@dataclass
class Regrade:
    """What a regrade did: the checks' version, who was graded again (``first``: those of them
    that had no report to compare with), who was current and skipped, and what changed."""

    version: str
    regraded: list[str]
    skipped: list[str]
    first: list[str] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    changes_csv: Path | None = None


def out_of_date(students: list[str], reports: dict[str, SubmissionResult], version: str) -> list[str]:
    """The students whose report was graded with other hidden checks than ``version``, or is missing."""
    return [s for s in students if s not in reports or reports[s].checks_version != version]


def _outcome(item: ItemResult | None) -> tuple[float, str] | None:
    return (item.score, item.status) if item else None


def compare(version: str, candidates: list[str], old: dict[str, SubmissionResult],
            new: list[SubmissionResult]) -> Regrade:
    """The regrade of ``new`` among ``candidates``: every item whose score or status differs
    from the student's old report (an item only one side has counts as changed)."""
    regraded = [r.student for r in new]
    outcome = Regrade(version, regraded, [s for s in candidates if s not in regraded],
                      [s for s in regraded if s not in old])
    for result in new:
        if result.student not in old:
            continue
        before = {i.grade_id: i for i in old[result.student].items}
        after = {i.grade_id: i for i in result.items}
        for grade_id in dict.fromkeys([*after, *before]):
            if _outcome(before.get(grade_id)) != _outcome(after.get(grade_id)):
                outcome.changes.append(Change(result.student, grade_id, before.get(grade_id), after.get(grade_id)))
    return outcome


def _cells(item: ItemResult | None) -> list[str]:
    """An item's score, status, mistake and message as ``changes.csv`` shows them: empty for a
    side that lacks the item, texts a spreadsheet would run as formulas made inert."""
    if item is None:
        return [""] * 4
    return [f"{item.score:g}", item.status, spreadsheet_safe(item.mistake or ""), spreadsheet_safe(item.message)]


def write_changes_csv(path: Path, changes: list[Change]) -> Path:
    """``changes.csv``: a row per changed item, old and new side by side (:data:`CHANGE_FIELDS`)."""
    with path.open("w", newline="", **STORABLE) as f:
        writer = csv.writer(f)
        writer.writerow(CHANGE_FIELDS)
        for change in changes:
            side_by_side = [cell for pair in zip(_cells(change.old), _cells(change.new)) for cell in pair]
            writer.writerow([spreadsheet_safe(change.student), change.grade_id, *side_by_side])
    return path


def _points(value: float) -> str:
    return f"{value:+g} point{'' if abs(value) == 1 else 's'}"


def _line(change: Change) -> str:
    """One changed item: its score and status before and after, and why (the new mistake or message)."""
    old, new = change.old, change.new
    if new is None:
        return f"  {change.grade_id}: {old.score:g} -> no longer graded (the item left the hidden checks)"
    before = f"{old.score:g} ({old.status})" if old else "new item"
    return f"  {change.grade_id}: {before} -> {new.score:g} ({new.status}): {new.mistake or new.message}"


def summary(assignment: str, regrade: Regrade) -> list[str]:
    """What ``autograder grade --regrade`` prints: counts, then each student's net change and
    the items behind it."""
    if not regrade.regraded:
        return [(f"Every report of {assignment} was graded with the current hidden checks ({regrade.version}): "
                 f"nothing to regrade ({len(regrade.skipped)} skipped).")]
    lines = [(f"Regraded {len(regrade.regraded)} submissions of {assignment} with hidden checks {regrade.version} "
              f"({len(regrade.first)} without an earlier report); {len(regrade.skipped)} were current and skipped.")]
    if not regrade.changes:
        return [*lines, "No item's score or status changed."]
    for student in dict.fromkeys(c.student for c in regrade.changes):
        mine = [c for c in regrade.changes if c.student == student]
        lines += [f"{student}: {_points(sum(c.gained for c in mine))}", *map(_line, mine)]
    return [*lines, f"Changes, a row per item: {regrade.changes_csv}"]
