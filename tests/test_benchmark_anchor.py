"""The grading benchmark's anchor grades: plain nbgrader, with the hidden checks run in the
kernel, gives the same scores as the autograder except where the benchmark says why."""

import subprocess
import sys
from pathlib import Path

from benchmarks import grading

REPO = Path(__file__).resolve().parent.parent


def test_the_anchor_grades_and_agrees_with_the_autograder():
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "grading.py"), "--students", "2", "--workers", "1"],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Totals agree for 2 of 2 submissions" in done.stdout   # the solution (10) and no_scaling (7)


def test_the_benchmark_fails_when_the_anchor_grades_nothing_or_differs_unexplained():
    kinds = {"s0": "solution", "s1": "pep8_slip"}
    ours = {"s0": {"a_test": 3.0, "self_attention_forward_test": 3.0},
            "s1": {"a_test": 3.0, "self_attention_forward_test": 2.0}}
    assert grading.compare(kinds, ours, {"s0": dict(ours["s0"]), "s1": dict(ours["s0"])}) == 0   # PEP 8: explained
    assert grading.compare(kinds, ours, {s: {item: 0.0 for item in ours[s]} for s in ours}) == 1   # graded nothing
    wrong = {"s0": {"a_test": 0.0, "self_attention_forward_test": 3.0}, "s1": dict(ours["s1"])}
    assert grading.compare(kinds, ours, wrong) == 1
