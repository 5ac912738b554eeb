"""Assignment 05's work judged by the CPU time the kernel counts, through the real grader: each way
of computing the tiles the causal mask hides while keeping NaN out of the earlier rows
(``tests/skipping_evasions.py``) loses the item it cheats on and no other, and an answer that
refuses non-finite inputs keeps every point. One class, graded once with two workers.

Against the grader before the work was timed (which fed a key block of NaN and passed a call when
no NaN reached an earlier row), every evasion here kept its point and the refusing answer lost two.
"""

import pytest

import assignments
import skipping_evasions as evasions
from autograder.running import sandbox
from honest_forward import FORWARD

ROW = assignments.BY_NAME["05_efficient_attention"]
pytestmark = pytest.mark.timeout(900)
SOLUTION = {gid: evasions.solution_cell(gid) for gid in ROW.answers}
CHEATS = {**{name: ("flash_forward", source, "causal_skipping") for name, source in evasions.forward_evasions().items()},
          **{name: ("flash_backward", source, "backward_memory") for name, source in evasions.backward_evasions().items()}}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Every submission's items by grade_id, and its report under ``""``."""
    if sandbox.detect_isolation().name != "bubblewrap":
        pytest.skip(f"needs bubblewrap: {sandbox.detect_isolation().detail}")
    submissions = {"solution": SOLUTION, "refuses_non_finite": {**SOLUTION, "flash_forward": FORWARD["validating"]}}
    submissions |= {name: {**SOLUTION, gid: source} for name, (gid, source, _) in CHEATS.items()}
    return evasions.graded_items(ROW, tmp_path_factory.mktemp("course"), submissions)


@pytest.mark.parametrize("student", ["solution", "refuses_non_finite"])
def test_honest_answers_keep_every_point_with_no_flag(graded, student):
    report = graded[student][""]
    failed = {i["grade_id"]: i["message"][:300] for i in report["items"] if i["status"] != "passed"}
    assert not failed and report["total"] == report["max_total"] and report["flags"] == [], failed


@pytest.mark.parametrize("student", sorted(CHEATS))
def test_computing_the_masked_tiles_loses_the_item_it_cheats_on_and_no_other(graded, student):
    items, lost = graded[student], CHEATS[student][2]
    assert items[lost]["score"] == 0 and items[lost]["status"] == "failed", items[lost]
    assert items[lost]["mistake"] == "key blocks wholly in the future computed under the causal mask", items[lost]
    assert "of the CPU time" in items[lost]["message"], items[lost]["message"]
    kept = {gid: item["message"][:200] for gid, item in items.items() if gid and gid != lost and item["status"] != "passed"}
    assert not kept, kept
