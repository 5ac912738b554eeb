"""Assignment 06 (attention in today's decoders): the release, the solution, the student's start,
and grading through the real grader.

Everything runs for real: nbgrader generates the release, nbclient runs the notebooks in a
python3 kernel, and ``autograder grade`` grades a small class in a sandbox, in one call. The tests
every assignment gets come from its row of tests/assignments.py (tests/assignment_tests.py); the
ones below are this assignment's own.
"""

from __future__ import annotations

import re
import runpy

import pytest

import assignment_tests
import assignments
import notebook_tools as tools
from autograder.running import sandbox

ROW = assignments.BY_NAME["06_modern_attention"]
globals().update(assignment_tests.tests_for(ROW))

BANK = runpy.run_path(str(tools.REPO_ROOT / "autograder" / "checks" / "audit" / f"{ROW.name}.py"))
# Key/value heads tiled with repeat (0, 1, 0, 1) instead of copied in place, and rotary pairs
# (x[2i], x[2i+1]) in place of Llama's halves: the audit bank's lines.
REPEAT = ((BANK["K_HEADS"], "k_heads = k.repeat(1, group, 1, 1)"),
          (BANK["V_HEADS"], "v_heads = v.repeat(1, group, 1, 1)"))
INTERLEAVED = BANK["INTERLEAVED"]
# A causal mask for the first queries after a cache, and generation that runs the whole padded
# batch again at every step: the audit bank's lines. AROUND runs it again through TinyDecoder's own
# forward, which steps around the refusal of the check's model.
FIRST_QUERIES = BANK["FIRST_QUERIES"]
RERUN = BANK["RERUN"]
AROUND = (RERUN[0], (BANK["CACHED_CALL"], RERUN[1][1].replace("model(idx", "TinyDecoder.forward(model, idx")))


@pytest.fixture(scope="module")
def graded(source_nb, tmp_path_factory):
    """One class graded by the real grader in one call: the solution, the blank release, key and
    value heads tiled with ``repeat`` (the layer's mistake: padded generation, which runs the
    layer, keeps its points), an interleaved RoPE (the layer and generation, built on it, keep
    theirs), a causal mask for the first queries after a cache, and generation that runs the whole
    batch again at every step, through the model and around it."""
    if sandbox.detect_isolation().name != "bubblewrap":
        pytest.skip(f"needs bubblewrap: {sandbox.detect_isolation().detail}")
    solution = {gid: tools.answer_cell(source_nb, gid) for gid in ROW.answers}
    release = ROW.release_path
    submissions = {
        "solution": tools.replace_solutions(release, solution),
        "repeat": tools.replace_solutions(release, {**solution, "grouped_query_attention": tools.answer_cell(
            source_nb, "grouped_query_attention", *REPEAT)}),
        "interleaved": tools.replace_solutions(release, {**solution, "apply_rope": INTERLEAVED}),
        "first_queries": tools.replace_solutions(release, {**solution, "grouped_query_attention": tools.answer_cell(
            source_nb, "grouped_query_attention", FIRST_QUERIES)}),
        "rerun": tools.replace_solutions(release, {**solution, "padded_generation": tools.answer_cell(
            source_nb, "padded_generation", *RERUN)}),
        "around": tools.replace_solutions(release, {**solution, "padded_generation": tools.answer_cell(
            source_nb, "padded_generation", *AROUND)}),
        "blank": tools.read(release),
    }
    course = tmp_path_factory.mktemp("course")
    reports = tools.grade_class(ROW.name, course, submissions)
    by_item = {student: {item["grade_id"]: item for item in report["items"]} | {"": report}
               for student, report in reports.items()}
    return by_item, course


@pytest.fixture(scope="module")
def solution_and_blank(graded):
    """The solution's and the blank release's reports, from the class of ``graded``."""
    reports, _ = graded
    return reports["solution"][""], reports["blank"][""]


def test_the_notebook_names_its_sources(source_nb):
    text = "\n".join(c.source for c in source_nb.cells if c.cell_type == "markdown")
    for name in ("RoFormer", "GQA", "Shazeer", "Longformer", "Mistral", "Llama 3", "transformers"):
        assert name in text, name


def test_the_kv_cache_table_is_llama_3_8b_shaped(solved):
    nb = solved
    text = "".join(tools.text_outputs(c) for c in nb.cells if c.cell_type == "code")
    assert re.search(r"GQA.*1\.0+ GiB", text) and re.search(r"MHA.*4\.0+ GiB", text), text[-2000:]


def test_key_value_heads_tiled_with_repeat_cost_the_layer_only_and_are_named(graded):
    reports, _ = graded
    items = reports["repeat"]
    layer = items["grouped_query_attention"]
    assert layer["status"] == "failed" and layer["mistake"] == \
        "key/value heads repeated with repeat instead of repeat_interleave", layer
    assert items["padded_generation"]["status"] == "passed", items["padded_generation"]
    assert items[""]["total"] == 7


def test_an_interleaved_rope_costs_its_own_item_only_and_is_named(graded):
    reports, _ = graded
    items = reports["interleaved"]
    assert items["apply_rope"]["mistake"] == "interleaved and half-split rotary pairs mixed up", items["apply_rope"]
    assert items["grouped_query_attention"]["status"] == "passed" and items["padded_generation"]["status"] == "passed"
    assert items[""]["total"] == 8


def test_a_causal_mask_for_the_first_queries_after_a_cache_costs_the_layer_and_is_named(graded):
    """The layer is called with a cache and no mask, where its own mask must be for the last
    queries; generation always passes a mask, so it keeps its points."""
    reports, _ = graded
    items = reports["first_queries"]
    layer = items["grouped_query_attention"]
    assert layer["status"] == "failed" and layer["mistake"] == \
        "causal mask aligned to the first queries when there is a cache", layer
    assert items["padded_generation"]["status"] == "passed" and items[""]["total"] == 7, items["padded_generation"]


@pytest.mark.parametrize("student", ["rerun", "around"])
def test_generation_that_runs_the_whole_batch_again_costs_its_points_and_is_named(graded, student):
    """Through the model, the model refuses the second full pass; around it (TinyDecoder's own
    forward), the tokens are wrong, since the model marks each call after the prompt."""
    reports, _ = graded
    items = reports[student]
    generation = items["padded_generation"]
    assert generation["status"] == "failed" and generation["mistake"] == \
        "generation runs the whole sequence again instead of using its KV cache", generation
    assert items[""]["total"] == 7


def test_the_text_of_task_3_says_what_its_checks_hold(source_nb):
    """The text says once what the spec pins, and the checks test exactly that: Task 3's check has
    a left-padded batch whose pad rows see no key, calls every branch of ``forward`` (with and
    without a cache, with and without a mask), hidden and visible alike, and compares the returned
    cache; Task 4 pins the pads' positions at 0, which its visible check names."""
    from transformer_lm import checks

    task_3 = next(c.source for c in source_nb.cells if c.cell_type == "markdown"
                  and c.source.startswith("### Task 3"))
    assert "The check has such rows" in task_3 and "the returned cache `(k, v)`" in task_3
    assert "has no such row" not in task_3 and "It calls every branch of `forward`" in task_3
    hidden = tools.hidden_cases(ROW.name, "grouped_query_attention")
    visible = [entry["check"] for entry in checks.stored_checks()["groups"]["grouped_query_attention"]]
    every_branch = {(cache, mask) for cache in (False, True) for mask in (False, True)}
    assert {(bool(check.past), bool(check.padded)) for check in hidden} == every_branch
    assert {("inputs/cache_keys" in prepared.call.tensors, "inputs/attn_mask" in prepared.call.tensors)
            for prepared in visible} == every_branch
    assert all({"cache.keys", "cache.values"} <= set(prepared.judge.expected) for prepared in visible)
    task_4 = next(c.source for c in source_nb.cells if c.cell_type == "markdown"
                  and c.source.startswith("### Task 4"))
    assert "the pads get 0" in task_4


def test_generation_is_checked_padded_and_not_with_the_default_pad_id_and_another():
    """Every path of ``generate_padded(model, prompts, max_new_tokens, pad_id=0)``, hidden and visible."""
    from transformer_lm import checks
    from transformer_lm.instructor.decoder_kinds import PaddedGenerationCheck

    hidden = [check for check in tools.hidden_cases(ROW.name, "padded_generation")
              if isinstance(check, PaddedGenerationCheck)]
    visible = [entry["check"].call.arguments for entry in checks.stored_checks()["groups"]["padded_generation"]]
    paths = {(True, True), (True, False), (False, True)}   # (padded, default pad_id)
    assert {(len(set(check.lengths)) > 1, check.pad_id is None) for check in hidden} == paths
    assert {(len({len(p) for p in call["prompts"]}) > 1, "pad_id" not in call) for call in visible} == paths
