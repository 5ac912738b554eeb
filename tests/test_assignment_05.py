"""Assignment 05 (attention that fits in memory): the release, the solution and its benchmarks,
the student's start, and grading through the real grader, memory and work included.

Everything runs for real: nbgrader generates the release, nbclient runs the notebooks in a
python3 kernel, and ``autograder grade`` grades a small class in a sandbox, in one call. The tests
every assignment gets come from its row of tests/assignments.py (tests/assignment_tests.py); the
ones below are this assignment's own.
"""

from __future__ import annotations

import json
import re
import runpy

import pytest

import assignment_tests
import assignments
import notebook_tools as tools
from live_checks import visible
from autograder.running import clocked, sandbox

ROW = assignments.BY_NAME["05_efficient_attention"]
globals().update(assignment_tests.tests_for(ROW))

KEY_LOOP = "for k_start in range(0, min(T_k, q_stop) if causal else T_k, block_k):"
LSE = "lse[..., q_start:q_stop] = row_max + torch.log(row_sum)"

# The example (the audit bank's): every key block's scores concatenated and one softmax,
# written by hand, over them. The values are right; the memory is (T_q, T_k).
CONCATENATED = runpy.run_path(str(tools.REPO_ROOT / "autograder" / "checks" / "audit" / f"{ROW.name}.py"))[
    "CONCATENATED"]


REFERENCE_RUNS: list[tuple] = []
"""The limits of each run of the course's timed calls while ``graded``'s class was graded."""


@pytest.fixture(scope="module")
def graded(source_nb, tmp_path_factory):
    """One class graded by the real grader in one call, each submission the release filled in:

    * ``solution``: the source's answers; ``blank``: the release as it is;
    * ``concatenated``: the issue's forward that builds the whole score matrix (right values);
    * ``lse_without_max``: a forward whose log-sum-exp lacks the maximum, under a right backward
      that calls it (one mistake costs points once);
    * ``no_skipping``: a causal forward that computes every key block and masks them.

    Returns the reports by student, each item by grade_id, and the course folder; the course's timed
    figures are counted as they are made (``reference_runs``, one set of limits each).
    """
    if sandbox.detect_isolation().name != "bubblewrap":
        pytest.skip(f"needs bubblewrap: {sandbox.detect_isolation().detail}")
    solution = {gid: tools.answer_cell(source_nb, gid) for gid in ROW.answers}
    release = ROW.release_path
    submissions = {
        "solution": tools.replace_solutions(release, solution),
        "concatenated": tools.replace_solutions(release, {**solution, "flash_forward": CONCATENATED}),
        "lse_without_max": tools.replace_solutions(release, {**solution, "flash_forward": tools.answer_cell(
            source_nb, "flash_forward", (LSE, "lse[..., q_start:q_stop] = torch.log(row_sum)"))}),
        "no_skipping": tools.replace_solutions(release, {**solution, "flash_forward": tools.answer_cell(
            source_nb, "flash_forward", (KEY_LOOP, "for k_start in range(0, T_k, block_k):"))}),
        "blank": tools.read(release),
    }
    course = tmp_path_factory.mktemp("course")
    made = clocked.reference_figures

    def counted(worker, prepared, code, limits, out):
        REFERENCE_RUNS.extend((pid, json.dumps(limits.absent, sort_keys=True), limits.memory_cap) for pid in prepared)
        return made(worker, prepared, code, limits, out)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(clocked, "reference_figures", counted)
        reports = tools.grade_class(ROW.name, course, submissions, workers=2)
    by_item = {student: {item["grade_id"]: item for item in report["items"]} | {"": report}
               for student, report in reports.items()}
    return by_item, course


def test_the_courses_timed_figures_are_made_once_per_class_not_once_per_worker(graded):
    """Two workers grade the class; the course's timed calls of each check run once for each set of
    limits the answers' runs had, and every timed item still got its figure (the solution keeps its
    points)."""
    reports, _ = graded
    assert REFERENCE_RUNS and len(REFERENCE_RUNS) == len(set(REFERENCE_RUNS)), REFERENCE_RUNS
    assert reports["solution"]["causal_skipping"]["score"] == reports["solution"]["causal_skipping"]["max_score"]
    assert reports["no_skipping"]["causal_skipping"]["score"] == 0


@pytest.fixture(scope="module")
def solution_and_blank(graded):
    """The solution's and the blank release's reports, from the class of ``graded``."""
    reports, _ = graded
    return reports["solution"][""], reports["blank"][""]


# --------------------------------------------------------------------------------------
# The source notebook's shape
# --------------------------------------------------------------------------------------


def test_the_notebook_names_its_sources(source_nb):
    sources = next(c for c in source_nb.cells if c.id == "sources").source
    for name in ("FlashAttention", "FlashAttention-2", "Milakov", "Rabe", "CS336"):
        assert name in sources, name


# --------------------------------------------------------------------------------------
# The solution's measurements show what the text says
# --------------------------------------------------------------------------------------


def test_the_benchmark_shows_quadratic_memory_for_plain_attention_and_linear_for_the_tiled_one(solved):
    nb = solved
    output = tools.text_outputs(next(c for c in nb.cells if c.id == "final-benchmark"))
    growth = dict(re.findall(r"cpu: (\S+) peak memory x([\d.]+) from T = 1024 to 2048", output))
    assert float(growth["plain"]) > 3.5 and float(growth["flash_forward"]) < 2.5, output
    gap = float(re.search(r"largest \|flash_forward - plain\| at T = 2048: ([\d.e+-]+)", output).group(1))
    assert gap < 1e-4, output


# --------------------------------------------------------------------------------------
# The real grader
# --------------------------------------------------------------------------------------


def test_a_forward_that_concatenates_every_key_block_loses_the_memory_item_only_and_is_told_why(graded, source_nb):
    reports, _ = graded
    items = reports["concatenated"]
    memory = items["flash_memory"]
    assert memory["status"] == "failed" and memory["mistake"] == "the whole (T_q, T_k) score matrix built", memory
    assert "as many as the whole (T_q, T_k)" in memory["message"], memory["message"]
    assert {gid: item["score"] for gid, item in items.items() if gid} == {**ROW.points, "flash_memory": 0}
    # Its visible check refuses it too, in the student's kernel.
    from transformer_lm import checks

    namespace = {}
    exec(tools.cell_by_grade_id(source_nb, "setup").source + "\n" + CONCATENATED, namespace)
    with pytest.raises(checks.CheckFailed, match="score matrix"):
        visible("flash_memory", "flash_forward")(namespace["flash_forward"])


def test_a_log_sum_exp_without_the_maximum_costs_the_forward_only(graded):
    reports, _ = graded
    items = reports["lse_without_max"]
    assert items["flash_forward"]["mistake"] == "the log-sum-exp without the maximum", items["flash_forward"]
    backward = items["flash_backward"]
    assert backward["status"] == "passed" and "because flash_forward did not pass" in backward["message"], backward
    assert items[""]["total"] == 8


def test_a_causal_forward_that_computes_every_key_block_loses_the_skipping_item_only(graded):
    reports, _ = graded
    items = reports["no_skipping"]
    skipping = items["causal_skipping"]
    assert skipping["status"] == "failed" and "of the CPU time with causal=True" in skipping["message"], skipping
    assert skipping["mistake"] == "key blocks wholly in the future computed under the causal mask"
    assert items[""]["total"] == 9
