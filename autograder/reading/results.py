"""What grading finds: each item's result, each submission's, and the JSON reports that keep them
(``reports/<assignment>/<student>.json``), which every later step (the gradebook, the pages, the
regrade, the similarity report) reads."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from autograder.reading.cells import test_cell_id
from autograder.reading.course import Course

STATUSES = ("passed", "failed", "error", "timeout", "killed", "missing", "forbidden", "tampered")
NOT_WRITTEN = "Not written yet"
"""How the message of an answer that still raises the release's NotImplementedError starts."""


@dataclass
class ItemResult:
    """The grade of one item, as every report shows it."""

    grade_id: str
    notebook: str
    score: float
    max_score: float
    status: str
    message: str
    hint: str = ""
    mistake: str | None = None
    deduction: str = ""
    answer: str = ""  # the answer cell graded (several items may share one)
    failed_checks: list[int] = field(default_factory=list)  # the item's graded checks (from 0) its answer failed

    @property
    def test_id(self) -> str:
        return test_cell_id(self.grade_id)


@dataclass
class SubmissionResult:
    """The grade of one student's submission of one assignment."""

    student: str
    assignment: str
    total: float
    max_total: float
    flags: list[str] = field(default_factory=list)
    items: list[ItemResult] = field(default_factory=list)
    isolation: str = ""
    unreadable: list[str] = field(default_factory=list)  # notebooks missing or unreadable: nothing to grade by hand
    checks_version: str = ""  # checks_version() it was graded with; "" in reports from before it was recorded

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> SubmissionResult:
        return cls(**{**data, "items": [ItemResult(**i) for i in data["items"]]})


def load_results(course: Course, assignment: str) -> list[SubmissionResult]:
    """Every submission's result, in student order (empty when the assignment was not graded)."""
    return [SubmissionResult.from_json(json.loads(path.read_text()))
            for path in sorted(course.reports(assignment).glob("*.json"))]


def write_report(course: Course, result: SubmissionResult) -> Path:
    """``reports/<assignment>/<student>.json``."""
    folder = course.reports(result.assignment)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{result.student}.json"
    path.write_text(json.dumps(result.to_json(), indent=2, sort_keys=True) + "\n")
    return path
