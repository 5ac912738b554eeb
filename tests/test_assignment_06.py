"""Assignment 06 (attention in today's decoders): the release, the solution, the student's start,
and grading through the real grader.

Everything runs for real: nbgrader generates the release, nbclient runs the notebooks in a
python3 kernel, and ``autograder grade`` grades a small class in a sandbox, in one call.
"""

from __future__ import annotations

import json
import re
import runpy

import pytest

import notebook_tools as tools
from autograder import sandbox

ASSIGNMENT = "06_modern_attention"
SOURCE_DIR = tools.REPO_ROOT / "source" / ASSIGNMENT
RELEASE_DIR = tools.REPO_ROOT / "release" / ASSIGNMENT
NOTEBOOK = "modern_attention.ipynb"

POINTS = {"apply_rope": 2, "sliding_window_mask": 1, "grouped_query_attention": 3, "padded_generation": 3,
          "kv_cache_bytes": 1}

BANK = runpy.run_path(str(tools.REPO_ROOT / "autograder" / "checks" / "audit" / f"{ASSIGNMENT}.py"))
# Key/value heads tiled with repeat (0, 1, 0, 1) instead of copied in place, and rotary pairs
# (x[2i], x[2i+1]) in place of Llama's halves: the audit bank's lines.
REPEAT = ((BANK["K_HEADS"], "k_heads = k.repeat(1, group, 1, 1)"), (BANK["V_HEADS"], "v_heads = v.repeat(1, group, 1, 1)"))
INTERLEAVED = BANK["INTERLEAVED"]


@pytest.fixture(scope="module")
def graded(source_nb, tmp_path_factory):
    """One class graded by the real grader in one call: the solution, the blank release, key and
    value heads tiled with ``repeat`` (the layer's mistake: padded generation, which runs the
    layer, keeps its points), and an interleaved RoPE (the layer and generation, built on it,
    keep theirs)."""
    if sandbox.detect_isolation().name != "bubblewrap":
        pytest.skip(f"needs bubblewrap: {sandbox.detect_isolation().detail}")
    solution = {gid: tools.answer_cell(source_nb, gid) for gid in POINTS}
    release = RELEASE_DIR / NOTEBOOK
    submissions = {
        "solution": tools.replace_solutions(release, solution),
        "repeat": tools.replace_solutions(release, {**solution, "grouped_query_attention": tools.answer_cell(
            source_nb, "grouped_query_attention", *REPEAT)}),
        "interleaved": tools.replace_solutions(release, {**solution, "apply_rope": INTERLEAVED}),
        "blank": tools.read(release),
    }
    course = tmp_path_factory.mktemp("course")
    reports = tools.grade_class(ASSIGNMENT, course, submissions)
    by_item = {student: {item["grade_id"]: item for item in report["items"]} | {"": report}
               for student, report in reports.items()}
    return by_item, course


def test_source_is_graded_as_planned(source_nb):
    tools.assert_graded_as_planned(source_nb, POINTS)
    for gid in ("q1", "q2"):
        written = tools.cell_by_grade_id(source_nb, gid)
        assert written.cell_type == "markdown" and written.metadata["nbgrader"]["points"] == 1
    assert "transformer_lm.reference" not in tools.cell_by_grade_id(source_nb, "setup").source
    tagged = {c.id for c in source_nb.cells if "skip-grading" in c.metadata.get("tags", [])}
    for cell in source_nb.cells:   # what the grader runs never leans on the course's reference
        if cell.cell_type == "code" and cell.id not in tagged:
            assert "reference" not in cell.source, cell.id


def test_the_notebook_names_its_sources(source_nb):
    text = "\n".join(c.source for c in source_nb.cells if c.cell_type == "markdown")
    for name in ("RoFormer", "GQA", "Shazeer", "Longformer", "Mistral", "Llama 3", "transformers"):
        assert name in text, name


def test_release_contains_no_solutions(source_nb):
    release = tools.read(RELEASE_DIR / NOTEBOOK)
    assert "BEGIN SOLUTION" not in json.dumps(release)
    assert set(tools.solution_bodies(source_nb)) == set(POINTS) | {"q1", "q2"}
    code = "\n".join(cell.source for cell in release.cells if cell.cell_type == "code")
    assert "repeat_interleave(" not in code and "cumsum(" not in code
    for signature in ("def apply_rope(x, positions, base=10000.0):", "def sliding_window_mask(query_len, key_len, window):",
                      "class GroupedQueryAttention(nn.Module):", "def forward(self, x, positions, attn_mask=None, cache=None):",
                      "def padded_positions(attention_mask):", "def padded_attention_mask(attention_mask, query_len):",
                      "def generate_padded(model, prompts, max_new_tokens, pad_id=0):",
                      "def kv_cache_bytes(n_layers, n_kv_heads, head_dim, seq_len, batch=1, dtype=torch.bfloat16):"):
        assert signature in code, signature


def test_solution_runs_in_under_a_minute_and_every_visible_check_passes(solved):
    nb, seconds = solved
    assert seconds < 60, f"the solution notebook took {seconds:.1f} s"
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not tools.errors(cell), f"cell {cell.id} failed: {tools.errors(cell)}"
    for item in POINTS:
        assert "Correct" in tools.text_outputs(tools.cell_by_grade_id(nb, f"{item}_test")), item


def test_the_kv_cache_table_is_llama_3_8b_shaped(solved):
    nb, _ = solved
    text = "".join(tools.text_outputs(c) for c in nb.cells if c.cell_type == "code")
    assert re.search(r"GQA.*1\.0+ GiB", text) and re.search(r"MHA.*4\.0+ GiB", text), text[-2000:]


def test_release_reports_todo_everywhere(released_run):
    tools.assert_every_check_says_todo(released_run, [f"{item}_test" for item in POINTS])


def test_solution_gets_full_marks_and_the_blank_release_zero(graded):
    reports, _ = graded
    tools.assert_full_marks_and_zero(reports["solution"][""], reports["blank"][""])
    assert reports["solution"][""]["total"] == 10


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


def test_the_text_of_task_3_says_what_its_checks_hold(source_nb):
    """The text says once what the spec pins, and the checks test exactly that: Task 3's check has
    a left-padded batch whose pad rows see no key, and it compares the returned cache; Task 4
    pins the pads' positions at 0, which its visible check names."""
    from transformer_lm import checks

    task_3 = next(c.source for c in source_nb.cells if c.cell_type == "markdown"
                  and c.source.startswith("### Task 3"))
    assert "The check has such rows" in task_3 and "the returned cache `(k, v)`" in task_3
    assert "has no such row" not in task_3
    items = runpy.run_path(str(tools.REPO_ROOT / "autograder" / "checks" / f"{ASSIGNMENT}.py"))["ITEMS"]
    hidden = next(item for item in items if item.grade_id == "grouped_query_attention").checks
    visible = [entry["check"] for entry in checks.stored_checks()["groups"]["grouped_query_attention"]]
    assert any(check.padded for check in hidden)
    assert any("inputs/attn_mask" in prepared.call.tensors for prepared in visible)
    assert all({"cache.keys", "cache.values"} <= set(prepared.judge.expected) for prepared in visible)
    task_4 = next(c.source for c in source_nb.cells if c.cell_type == "markdown"
                  and c.source.startswith("### Task 4"))
    assert "the pads get 0" in task_4
