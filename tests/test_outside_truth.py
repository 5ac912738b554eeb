"""Assignment 05 graded against a truth known from outside the grader (``tests/outside_truth_class.py``):
honest tiled attention in the styles of public code gets every point with no flag, and each
submission that cheats on memory, work or the forbidden library loses the items it cheats on. Both
lists are graded as one class, once, with two workers, through the real pipeline.

The attacks judged by what the kernel measures lose the item they cheat on and no other:
* each way of computing the tiles the causal mask hides while keeping NaN out of the earlier rows
  (``a18_``, ``a19_``) loses ``causal_skipping`` or ``backward_memory``, named for its CPU time;
  against the grader before the work was timed (which fed a key block of NaN and passed a call when
  no NaN reached an earlier row), every one kept its point, and an answer that refuses non-finite
  inputs (``h34_validating``) lost two;
* each answer that holds a whole T x T matrix in one mode only (with the causal mask, with autograd
  on, on inputs that require grad, below the documented length, in the backward without the mask)
  or makes one T x T causal mask per call (``a20_``, ``a21_``) loses the memory item of the answer it
  cheats in; against the grader before (the forward capped only without the mask and the backward
  only with it, both at T = 8192 and without autograd), every one kept it."""

import json

import pytest

import notebook_tools as tools
import outside_truth_class as truth
from autograder.running import sandbox

A = truth.A
GOOD = truth.solution()
HONEST = truth.honest(GOOD)
ATTACKS = truth.attacks(GOOD)
SLOW_ONCE = truth.timed_badly_once(GOOD)
pytestmark = pytest.mark.timeout(1800)   # grading 66 notebooks of assignment 05 on two workers (about 6 minutes)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Every submission's report, by student."""
    if sandbox.detect_isolation().name != "bubblewrap":
        pytest.skip(f"needs bubblewrap: {sandbox.detect_isolation().detail}")
    from test_attacks import reports, write_class

    root = tmp_path_factory.mktemp("outside_truth")
    write_class(root, {s.student: s.notebook for s in HONEST + ATTACKS + [SLOW_ONCE]})
    tools.grade_course(root, A, workers=2)
    return reports(root)


def items_of(report: dict) -> dict[str, dict]:
    return {item["grade_id"]: item for item in report["items"]}


def test_the_class_is_large_enough():
    assert len(HONEST) >= 30 and len(ATTACKS) >= 12, (len(HONEST), len(ATTACKS))
    assert len({s.student for s in HONEST + ATTACKS}) == len(HONEST + ATTACKS)
    assert all(s.lost and s.lost <= set(truth.ITEMS) for s in ATTACKS) and not any(s.lost for s in HONEST)


def test_a_timing_that_fails_once_is_made_again_and_the_second_decides(graded):
    """A moment of load can move one timing past its limit: the grader times a call that failed on
    its CPU time alone once more, in the second run, and the second figure decides. This answer
    does the masked tiles' work in the first run's timed windows only (before the retiming, it lost
    ``causal_skipping``); a cheat that does it in every run still loses (``a18_``)."""
    report = graded[SLOW_ONCE.student]
    assert report["total"] == report["max_total"] and not report["flags"], report
    assert items_of(report)["causal_skipping"]["status"] == "passed"


@pytest.mark.parametrize("student", [s.student for s in HONEST])
def test_honest_tiled_attention_gets_every_point_and_no_flag(graded, student):
    report = graded[student]
    failed = [(i["grade_id"], i["status"], i["message"][:300]) for i in report["items"] if i["status"] != "passed"]
    assert not failed and report["total"] == report["max_total"], failed
    assert set(items_of(report)) == set(truth.ITEMS)
    assert report["flags"] == [], report["flags"]


@pytest.mark.parametrize("student", [s.student for s in ATTACKS])
def test_an_attack_loses_every_item_it_cheats_on(graded, student):
    case = next(s for s in ATTACKS if s.student == student)
    items = items_of(graded[student])
    kept = {gid: (items[gid]["status"], items[gid]["score"], items[gid]["message"][:300]) for gid in case.lost
            if items[gid]["status"] == "passed" or items[gid]["score"] != 0}
    assert not kept, kept


@pytest.mark.parametrize("student", [s.student for s in ATTACKS if s.student.startswith(truth.MEASURED)])
def test_a_measured_attack_loses_its_item_and_no_other(graded, student):
    [lost] = next(s for s in ATTACKS if s.student == student).lost
    items = items_of(graded[student])
    assert items[lost]["score"] == 0 and items[lost]["status"] == "failed", items[lost]
    if student.startswith(("a18_", "a19_")):
        assert items[lost]["mistake"] == "key blocks wholly in the future computed under the causal mask", items[lost]
        assert "of the CPU time" in items[lost]["message"], items[lost]["message"]
    kept = {gid: item["message"][:200] for gid, item in items.items() if gid != lost and item["status"] != "passed"}
    assert not kept, kept


