"""The hidden checks run the way plain nbgrader runs hidden tests: inside the student's kernel.

Only the benchmark uses this, as its anchor: it is the set-up the course replaces, because one
line of student code fools it (see docs/threat-model.md). It does the same work as the
trusted pipeline's checks (the same hidden inputs from the course's secret, the same probe
calls, the same comparison with the reference), all in the one process that also ran the
student's cells. A hidden test cell calls ``check("<grade_id>", globals())``.
"""

from __future__ import annotations

import os
from pathlib import Path

from autograder.reading.course import Course, generator_for, load_items
from transformer_lm.instructor.kinds import judge_here

COURSE, ASSIGNMENT = "BENCHMARK_COURSE", "BENCHMARK_ASSIGNMENT"
"""Environment variables naming the course folder and the assignment (nbgrader starts
kernels in the submission's folder)."""


def check(grade_id: str, namespace: dict) -> None:
    """Raises AssertionError, with the checks' message, unless item ``grade_id`` passes."""
    course, assignment = Course(Path(os.environ[COURSE])), os.environ[ASSIGNMENT]
    item = next(i for i in load_items(course, assignment) if i.grade_id == grade_id)
    for index, hidden in enumerate(item.checks):
        verdict = judge_here(hidden, namespace, generator_for(course.secret(), assignment, grade_id, index))
        assert verdict.passed, verdict.message
