"""Assignment 05 (attention that fits in memory): the release, the solution and its benchmarks,
the student's start, and grading through the real grader, memory and work included.

Everything runs for real: nbgrader generates the release, nbclient runs the notebooks in a
python3 kernel, and ``autograder grade`` grades a small class in a sandbox, in one call.
"""

from __future__ import annotations

import json
import re
import runpy
import time

import pytest

import notebook_tools as tools
from live_checks import visible
from autograder import sandbox

ASSIGNMENT = "05_efficient_attention"
SOURCE_DIR = tools.REPO_ROOT / "source" / ASSIGNMENT
RELEASE_DIR = tools.REPO_ROOT / "release" / ASSIGNMENT
NOTEBOOK = "efficient_attention.ipynb"

# Item -> points; the answer cell each item grades (several items grade one answer).
POINTS = {"online_softmax": 2, "flash_forward": 2, "flash_memory": 1, "causal_skipping": 1, "flash_backward": 3,
          "backward_memory": 1}
ANSWERS = {"online_softmax": ("online_softmax",),
           "flash_forward": ("flash_forward", "flash_memory", "causal_skipping"),
           "flash_backward": ("flash_backward", "backward_memory")}
SKIPPED = {"naive-attention", "naive-benchmark", "naive-plot", "exp-range", "merge-example", "tile-grid",
           "rescale-demo", "causal-grid", "causal-count", "saved-for-backward", "final-benchmark", "final-plot"}

KEY_LOOP = "for k_start in range(0, min(T_k, q_stop) if causal else T_k, block_k):"
LSE = "lse[..., q_start:q_stop] = row_max + torch.log(row_sum)"

# The example (the audit bank's): every key block's scores concatenated and one softmax,
# written by hand, over them. The values are right; the memory is (T_q, T_k).
CONCATENATED = runpy.run_path(str(tools.REPO_ROOT / "autograder" / "checks" / "audit" / f"{ASSIGNMENT}.py"))[
    "CONCATENATED"]


@pytest.fixture(scope="module")
def graded(source_nb, tmp_path_factory):
    """One class graded by the real grader in one call, each submission the release filled in:

    * ``solution``: the source's answers; ``blank``: the release as it is;
    * ``concatenated``: the issue's forward that builds the whole score matrix (right values);
    * ``lse_without_max``: a forward whose log-sum-exp lacks the maximum, under a right backward
      that calls it (one mistake costs points once);
    * ``no_skipping``: a causal forward that computes every key block and masks them.

    Returns the reports by student, each item by grade_id, the course folder and the seconds taken.
    """
    if sandbox.detect_isolation().name != "bubblewrap":
        pytest.skip(f"needs bubblewrap: {sandbox.detect_isolation().detail}")
    solution = {gid: tools.answer_cell(source_nb, gid) for gid in ANSWERS}
    release = RELEASE_DIR / NOTEBOOK
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
    started = time.perf_counter()
    reports = tools.grade_class(ASSIGNMENT, course, submissions)
    seconds = time.perf_counter() - started
    by_item = {student: {item["grade_id"]: item for item in report["items"]} | {"": report}
               for student, report in reports.items()}
    return by_item, course, seconds


# --------------------------------------------------------------------------------------
# The source notebook's shape
# --------------------------------------------------------------------------------------


def test_source_is_graded_as_planned(source_nb):
    """Each answer cell is followed by the test cells of the items that grade it, under a heading
    that states their points; 10 points in all, and one written answer graded by hand."""
    tests = {tools.grade_id(c): c.metadata["nbgrader"]["points"] for c in tools.graded_cells(source_nb, kind="grade")
             if c.cell_type == "code"}
    assert tests == {f"{item}_test": points for item, points in POINTS.items()} and sum(tests.values()) == 10
    for answer_id, items in ANSWERS.items():
        index = source_nb.cells.index(tools.cell_by_grade_id(source_nb, answer_id))
        following = [tools.grade_id(source_nb.cells[index + 1 + i]) for i in range(len(items))]
        assert following == [f"{item}_test" for item in items], answer_id
        heading = source_nb.cells[index - 1].source.splitlines()[0]
        assert heading.endswith(f"({sum(POINTS[item] for item in items)} points)"), heading
    written = tools.cell_by_grade_id(source_nb, "q1")
    assert written.cell_type == "markdown" and written.metadata["nbgrader"]["points"] == 1
    setup = tools.cell_by_grade_id(source_nb, "setup")
    assert "transformer_lm" not in setup.source
    tagged = {c.id for c in source_nb.cells if "skip-grading" in c.metadata.get("tags", [])}
    assert tagged == SKIPPED
    for cell in source_nb.cells:   # what the grader runs never leans on the course's reference
        if cell.cell_type == "code" and cell.id not in tagged:
            assert "reference" not in cell.source and "transformer_lm.measure" not in cell.source, cell.id


def test_the_notebook_names_its_sources(source_nb):
    sources = next(c for c in source_nb.cells if c.id == "sources").source
    for name in ("FlashAttention", "FlashAttention-2", "Milakov", "Rabe", "CS336"):
        assert name in sources, name


# --------------------------------------------------------------------------------------
# The committed release is what nbgrader makes from the source, without solutions
# --------------------------------------------------------------------------------------


def test_release_contains_no_solutions(source_nb):
    release = tools.read(RELEASE_DIR / NOTEBOOK)
    assert "BEGIN SOLUTION" not in json.dumps(release)
    bodies = tools.solution_bodies(source_nb)
    assert set(bodies) == set(ANSWERS) | {"q1"}
    code = "\n".join(cell.source for cell in release.cells if cell.cell_type == "code")
    for needle in ("torch.maximum(row_max", "ctx.save_for_backward(", "(grad_out * out).sum("):
        assert needle not in code, needle
    for signature in ("def merge_stats(max_a, sum_a, max_b, sum_b):", "def online_softmax(scores, block):",
                      "def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):",
                      "class FlashAttention(torch.autograd.Function):",
                      "def forward(ctx, q, k, v, causal=False, block_q=16, block_k=16):",
                      "def backward(ctx, grad_out):"):
        assert signature in code, signature


# --------------------------------------------------------------------------------------
# The solution runs top to bottom in under a minute, every visible check passes, and its
# measurements show what the text says
# --------------------------------------------------------------------------------------


def test_solution_runs_in_under_a_minute_and_every_visible_check_passes(solved):
    nb, seconds = solved
    assert seconds < 60, f"the solution notebook took {seconds:.1f} s"
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not tools.errors(cell), f"cell {cell.id} failed: {tools.errors(cell)}"
    for item in POINTS:
        output = tools.text_outputs(tools.cell_by_grade_id(nb, f"{item}_test"))
        assert "Correct" in output, (item, output)


def test_the_benchmark_shows_quadratic_memory_for_plain_attention_and_linear_for_the_tiled_one(solved):
    nb, _ = solved
    output = tools.text_outputs(next(c for c in nb.cells if c.id == "final-benchmark"))
    growth = dict(re.findall(r"cpu: (\S+) peak memory x([\d.]+) from T = 1024 to 2048", output))
    assert float(growth["plain"]) > 3.5 and float(growth["flash_forward"]) < 2.5, output
    gap = float(re.search(r"largest \|flash_forward - plain\| at T = 2048: ([\d.e+-]+)", output).group(1))
    assert gap < 1e-4, output


def test_release_reports_todo_everywhere(released_run):
    tools.assert_every_check_says_todo(released_run, [f"{item}_test" for item in POINTS])


# --------------------------------------------------------------------------------------
# The real grader
# --------------------------------------------------------------------------------------


def test_solution_gets_full_marks_and_the_blank_release_zero(graded):
    reports, _, _ = graded
    tools.assert_full_marks_and_zero(reports["solution"][""], reports["blank"][""])
    assert reports["solution"][""]["total"] == 10 and reports["solution"][""]["flags"] == []


def test_a_forward_that_concatenates_every_key_block_loses_the_memory_item_only_and_is_told_why(graded, source_nb):
    reports, _, _ = graded
    items = reports["concatenated"]
    memory = items["flash_memory"]
    assert memory["status"] == "failed" and memory["mistake"] == "the whole (T_q, T_k) score matrix built", memory
    assert "as many as the whole (T_q, T_k)" in memory["message"], memory["message"]
    assert {gid: item["score"] for gid, item in items.items() if gid} == {**POINTS, "flash_memory": 0}
    # Its visible check refuses it too, in the student's kernel.
    from transformer_lm import checks

    namespace = {}
    exec(tools.cell_by_grade_id(source_nb, "setup").source + "\n" + CONCATENATED, namespace)
    with pytest.raises(checks.CheckFailed, match="score matrix"):
        visible("flash_memory", "flash_forward")(namespace["flash_forward"])


def test_a_log_sum_exp_without_the_maximum_costs_the_forward_only(graded):
    reports, _, _ = graded
    items = reports["lse_without_max"]
    assert items["flash_forward"]["mistake"] == "the log-sum-exp without the maximum", items["flash_forward"]
    backward = items["flash_backward"]
    assert backward["status"] == "passed" and "because flash_forward did not pass" in backward["message"], backward
    assert items[""]["total"] == 8


def test_a_causal_forward_that_computes_every_key_block_loses_the_skipping_item_only(graded):
    reports, _, _ = graded
    items = reports["no_skipping"]
    skipping = items["causal_skipping"]
    assert skipping["status"] == "failed" and "100%" in skipping["message"], skipping
    assert skipping["mistake"] == "key blocks wholly in the future computed under the causal mask"
    assert items[""]["total"] == 9


def test_grading_takes_seconds_per_submission(graded):
    """A generous bound of 15 s per submission that only a grader gone wrong exceeds (speed is
    measured by benchmarks)."""
    reports, _, seconds = graded
    assert seconds < 15 * len(reports), f"grading {len(reports)} submissions took {seconds:.1f} s"
