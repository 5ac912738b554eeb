"""Assignment 05's memory judged in every mode its rule claims, through the real grader: each answer
of ``tests/memory_evasions.py`` holds a whole T x T matrix in one mode only (with the causal mask,
with autograd on, on inputs that require grad, below the documented length, in the backward
without the mask) or makes one T x T causal mask per call, and loses the memory item of the answer
it cheats in, ``flash_memory`` or ``backward_memory``, and no other. The solution keeps every point.
One class, graded once with two workers.

Against the grader before (the forward capped only without the mask and the backward only with
it, both at T = 8192 and without autograd), every evasion here kept the memory item it cheats on.
"""

import pytest

import assignments
import memory_evasions as evasions
from autograder.running import sandbox
from skipping_evasions import graded_items, solution_cell

ROW = assignments.BY_NAME["05_efficient_attention"]
pytestmark = pytest.mark.timeout(900)
SOLUTION = {gid: solution_cell(gid) for gid in ROW.answers}
CHEATS = {**{name: ("flash_forward", source, "flash_memory") for name, source in evasions.forward_evasions().items()},
          **{name: ("flash_backward", source, "backward_memory")
             for name, source in evasions.backward_evasions().items()}}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Every submission's items by grade_id, and its report under ``""``."""
    if sandbox.detect_isolation().name != "bubblewrap":
        pytest.skip(f"needs bubblewrap: {sandbox.detect_isolation().detail}")
    submissions = {"solution": SOLUTION}
    submissions |= {name: {**SOLUTION, gid: source} for name, (gid, source, _) in CHEATS.items()}
    return graded_items(ROW, tmp_path_factory.mktemp("course"), submissions)


def test_the_solution_keeps_every_point_with_no_flag(graded):
    report = graded["solution"][""]
    failed = {i["grade_id"]: i["message"][:300] for i in report["items"] if i["status"] != "passed"}
    assert not failed and report["total"] == report["max_total"] and report["flags"] == [], failed


@pytest.mark.parametrize("student", sorted(CHEATS))
def test_a_whole_matrix_in_one_mode_loses_the_memory_item_and_no_other(graded, student):
    items, lost = graded[student], CHEATS[student][2]
    assert items[lost]["score"] == 0 and items[lost]["status"] != "passed", items[lost]
    kept = {gid: item["message"][:200] for gid, item in items.items()
            if gid and gid != lost and item["status"] != "passed"}
    assert not kept, kept
