"""Assignment 04 (minGPT): the release, the solution and its training run, the student's start,
and grading through the real grader.

Everything runs for real: nbgrader generates the release, nbclient runs the notebooks in a
python3 kernel, and ``autograder grade`` grades a small class in a sandbox, in one call. The
solution (training included) and the release are executed once per module. The tests every
assignment gets come from its row of tests/assignments.py (tests/assignment_tests.py); the ones
below are this assignment's own.
"""

from __future__ import annotations

import json
import re

import pytest

import assignment_tests
import assignments
import notebook_tools as tools
from autograder.running import sandbox

ROW = assignments.BY_NAME["04_mingpt"]
globals().update(assignment_tests.tests_for(ROW))
TARGET = 95.0   # percent of held-out sums, as the notebook states it

# Seed 000's own solution, as a student would paste it over the answer cell: its imports and its
# whole class, with the debug prints and the row-sum check, and forward(self, x) without a cache.
SEED_ATTENTION = '''import math

import torch
import torch.nn as nn
from torch.nn import functional as F


class MultiHeadSelfAttention(nn.Module):
    """A vanilla multi-head masked self-attention layer."""

    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0

        # key, query, value projections for all heads
        self.key = nn.Linear(config.n_embd, config.n_embd)
        self.query = nn.Linear(config.n_embd, config.n_embd)
        self.value = nn.Linear(config.n_embd, config.n_embd)

        # regularization
        self.attn_drop = nn.Dropout(config.attn_pdrop)
        self.resid_drop = nn.Dropout(config.resid_pdrop)

        # output projection
        self.proj = nn.Linear(config.n_embd, config.n_embd)

        # causal mask to ensure that attention is only applied to the left in the input sequence
        self.register_buffer(
            "mask",
            torch.tril(torch.ones(config.block_size, config.block_size)).view(
                1, 1, config.block_size, config.block_size
            ),
        )
        self.n_head = config.n_head

    def forward(self, x):
        """The forward pass for the multi-head masked self-attention layer.

        In this exercise, we include lots of print statements and checks to help you
        understand the code and the shapes of the tensors. When actually training
        such a model you would not log this information to the console.
        """

        # batch size, sequence length (in tokens), embedding dimensionality (n_embd per token)
        B, T, C = x.size()
        hs = C // self.n_head  # head size

        # print some debug information
        print(f"batch size: {B}")
        print(f"sequence length: {T}")
        print(f"embedding dimensionality: {C}")
        print(f"number of heads: {self.n_head}")
        print(f"head size: {hs}")

        # calculate query, key, values for all heads in batch and move head forward to be the batch dim
        # resulting dims for k, q, and v are (B, n_head, T, hs)
        k = self.key(x).view(B, T, self.n_head, hs).transpose(1, 2)
        q = self.query(x).view(B, T, self.n_head, hs).transpose(1, 2)
        v = self.value(x).view(B, T, self.n_head, hs).transpose(1, 2)

        # === EXERCISE START: IMPLEMENT THE MULTI-HEAD ATTENTION ===

        #######################################################################
        # TODO: multiply q and k_t matrices, then divide by the square root of d_k
        print("=== Calculate MatrixMultiplication(Q, K_T) / sqrt(d_k) ===")

        k_t = k.transpose(-2, -1)  # what is the shape of k_t?
        d_k = k.size(-1)

        # Matrix multiplication (hint: not "*")
        # att = <TODO>
        att = q @ k_t / math.sqrt(d_k)  # Solution

        print(f"q.shape: {q.shape}")
        print(f"k_t.shape: {k_t.shape}")
        print(f"d_k: {d_k}")
        print(f"att.shape: {att.shape}")

        #######################################################################
        # TODO: set the mask fill value to negative infinity
        print("=== Apply the attention mask ===")

        # masked_fill_value = <TODO>
        masked_fill_value = float("-inf")  # Solution

        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, masked_fill_value)

        # Show the result of applying the mask
        print(f"att: {att}")

        #######################################################################
        # TODO: apply softmax
        print("=== Softmax ===")

        # att = F.softmax(att, dim=<TODO>)
        att = F.softmax(att, dim=-1)  # Solution

        att = self.attn_drop(att)

        # Show the result of applying the softmax and check that
        # the sum of the attention weights in each row is 1
        print(f"att.shape: {att.shape}")
        print(f"att: {att}")
        print(f"att.sum(dim=-1): {att.sum(dim=-1)}")
        att_rows_sum_to_one = all(
            ((att.sum(dim=-1) - 1.0) ** 2 < 1e-6).flatten().tolist()
        )
        print(f"att_rows_sum_to_one: {att_rows_sum_to_one}")
        if not att_rows_sum_to_one:
            raise ValueError(
                "Attention weight rows do not sum to 1. Perhaps the softmax dimension or masked_fill_value is not correct?"
            )

        ######################################################################
        # TODO: multiply att and v matrices
        # (B, n_head, T, T) x (B, n_head, T, hs) -> (B, n_head, T, hs)
        print("=== Calculate final attention ===")

        # y = <TODO>
        y = att @ v  # Solution

        print(f"y.shape: {y.shape}")

        ######################################################################

        # === EXERCISE END: IMPLEMENT THE MULTI-HEAD ATTENTION ===

        # re-assemble all head outputs side by side
        y = y.transpose(1, 2).contiguous().view(B, T, C)

        # output projection
        y = self.resid_drop(self.proj(y))
        return y
'''

# A KV cache that slides instead of restarting: when it is full it drops the oldest keys and values
# and goes on, but every cached key was computed at a position that has since moved.
SLIDING_CACHE = '''def generate_with_cache(model, idx, max_new_tokens, temperature=1.0, top_k=None):
    block_size = model.config.block_size
    kv_cache = None
    for _ in range(max_new_tokens):
        if kv_cache is None:
            kv_cache = [{} for _ in model.blocks]
            logits, _ = model(idx[:, -block_size:], kv_cache=kv_cache)
        else:
            if kv_cache[0]["k"].size(2) == block_size:
                for cache in kv_cache:
                    cache["k"], cache["v"] = cache["k"][:, :, 1:], cache["v"][:, :, 1:]
            logits, _ = model(idx[:, -1:], kv_cache=kv_cache)
        next_token = sample_next_token(logits[:, -1, :], temperature, top_k)
        idx = torch.cat([idx, next_token], dim=1)
    return idx
'''

SCALED_SCORES = "att = (q @ k.transpose(-2, -1)) / math.sqrt(d_k)"
MASK_FILL = 'att = att.masked_fill(mask == 0, float("-inf"))'
SOFTMAX = "att = F.softmax(att, dim=-1)"
MEAN_LOSS = "targets.view(-1), ignore_index=-1)"
CROP = "context = idx[:, -model.config.block_size:]"
FIRST_BLOCK = "context = idx[:, :model.config.block_size]"   # the first block_size tokens, not the last


def answer(source_nb, grade_id: str, old: str | None = None, new: str | None = None) -> str:
    """The source's answer cell ``grade_id``, with ``old`` replaced by ``new`` (exactly once)."""
    return tools.answer_cell(source_nb, grade_id, *([(old, new)] if old is not None else []))


def release_with(answers: dict[str, str]):
    """The committed release with answer cells replaced, as a student would fill them."""
    return tools.replace_solutions(ROW.release_path, answers)


def no_scaling(source_nb) -> str:
    return answer(source_nb, "mingpt_attention", SCALED_SCORES, "att = q @ k.transpose(-2, -1)")


def zero_fill(source_nb) -> str:
    return answer(source_nb, "mingpt_attention", MASK_FILL, "att = att.masked_fill(mask == 0, 0.0)")


@pytest.fixture(scope="module")
def graded(source_nb, tmp_path_factory):
    """One class graded by the real grader in one call, each submission the release filled in:

    * ``solution``: the source's answers;
    * ``seed``: seed 000's own class pasted over the attention answer, the rest as the solution;
    * ``no_scaling`` and ``zero_fill``: the solution's attention without the 1/sqrt(d_k), and with
      the masked scores filled with 0;
    * ``loss_and_crop``: a loss summed instead of averaged, and generation that never crops its
      context; the attention, the block and the KV cache are the solution's;
    * ``softmax_axis`` and ``raises``: the attention's softmax over the queries, and an attention
      that raises; everything else is the solution's (one mistake costs points once);
    * ``blank``: the release as it is.

    Returns the reports by student, each item by grade_id, and the course folder.
    """
    if sandbox.detect_isolation().name != "bubblewrap":
        pytest.skip(f"needs bubblewrap: {sandbox.detect_isolation().detail}")
    solution = {gid: answer(source_nb, gid) for gid in ROW.points}
    submissions = {
        "solution": release_with(solution),
        "seed": release_with({**solution, "mingpt_attention": SEED_ATTENTION}),
        "no_scaling": release_with({**solution, "mingpt_attention": no_scaling(source_nb)}),
        "zero_fill": release_with({**solution, "mingpt_attention": zero_fill(source_nb)}),
        "loss_and_crop": release_with({
            **solution,
            "gpt": answer(source_nb, "gpt", MEAN_LOSS, 'targets.view(-1), ignore_index=-1, reduction="sum")'),
            "generate": answer(source_nb, "generate", CROP, "context = idx"),
        }),
        "softmax_axis": release_with({**solution, "mingpt_attention": answer(
            source_nb, "mingpt_attention", SOFTMAX, "att = F.softmax(att, dim=-2)")}),
        "raises": release_with({**solution, "mingpt_attention": answer(
            source_nb, "mingpt_attention", SOFTMAX, 'raise RuntimeError("not yet")')}),
        "blank": tools.read(ROW.release_path),
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


def solution_namespace(source_nb, replacements: dict[str, str] | None = None) -> dict:
    """The notebook's setup, config and answer cells (``replacements`` by grade_id instead of the
    solution's), executed here in one namespace, as a kernel that ran them would hold them."""
    namespace: dict = {}
    replacements = replacements or {}
    for cell in source_nb.cells:
        gid = tools.grade_id(cell)
        if cell.id in ("setup", "config") or gid in ROW.points:
            exec(replacements.get(gid, cell.source), namespace)
    return namespace


def visible_check_of(source_nb, test_id: str, replacements: dict[str, str]) -> str:
    """Runs the test cell ``test_id`` here on the solution with ``replacements``; returns what it
    printed, then ``CheckFailed: ...`` if it failed."""
    import contextlib
    import io

    from transformer_lm import checks

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        namespace = solution_namespace(source_nb, replacements)
        try:
            exec(tools.cell_by_grade_id(source_nb, test_id).source, namespace)
        except checks.CheckFailed as failure:
            return printed.getvalue() + f"CheckFailed: {failure}"
    return printed.getvalue()


def hidden_verdicts(namespace: dict, grade_id: str, secret: bytes) -> list:
    """The hidden checks of ``grade_id`` judged on objects of ``namespace``, without the sandbox:
    each probe called here as the harness would call it."""
    from autograder.reading.course import Course, generator_for, load_items
    from transformer_lm.instructor.kinds import judge_here

    item = next(i for i in load_items(Course(tools.REPO_ROOT), ROW.name) if i.grade_id == grade_id)
    return [judge_here(check, namespace, generator_for(secret, ROW.name, grade_id, index))
            for index, check in enumerate(item.checks)]


# --------------------------------------------------------------------------------------
# The source notebook's shape
# --------------------------------------------------------------------------------------


def test_the_attention_answer_keeps_the_seed_api(source_nb):
    """Seed 000's members, as the exercise names them. (No answer mentions PyTorch's attention:
    checked for every assignment by test_source_is_graded_as_planned.)"""
    attention = tools.cell_by_grade_id(source_nb, "mingpt_attention").source
    for member in ("self.key = nn.Linear(config.n_embd, config.n_embd)", "self.query =", "self.value =",
                   "self.proj =", "self.attn_drop = nn.Dropout(config.attn_pdrop)",
                   "self.resid_drop = nn.Dropout(config.resid_pdrop)",
                   "torch.tril(torch.ones(config.block_size, config.block_size))",
                   ".view(1, 1, config.block_size, config.block_size)", "self.n_head = config.n_head",
                   "self.verbose = False"):
        assert member in attention, member


# --------------------------------------------------------------------------------------
# The committed release is what nbgrader makes from the source
# --------------------------------------------------------------------------------------


def test_release_is_what_nbgrader_makes(request, tmp_path):
    """The real nbgrader makes the release from the source in a course folder of its own (the
    one ``grade_class`` has just made, where there is a sandbox to grade with): it must be the
    committed one, equal as JSON."""
    if sandbox.detect_isolation().name == "bubblewrap":
        _, course = request.getfixturevalue("graded")
        fresh_dir = course / "release" / ROW.name
    else:
        fresh_dir = tools.generate_release(ROW.name, tmp_path / "course")
    assert sorted(p.name for p in fresh_dir.glob("*.ipynb")) == sorted(p.name for p in ROW.release_dir.glob("*.ipynb"))
    fresh = json.loads((fresh_dir / ROW.notebook).read_text())
    committed = json.loads(ROW.release_path.read_text())
    assert fresh == committed, f"release/{ROW.name}/{ROW.notebook} is stale: run nbgrader generate_assignment"


# --------------------------------------------------------------------------------------
# The solution trains to its target; the cache, the maps and the demonstrations
# --------------------------------------------------------------------------------------


def test_solution_reaches_its_target(source_nb, solved):
    """The notebook states its target, and the solution's training reaches it. (How long it takes,
    the training included, is benchmarks/solution_notebooks.py's.)"""
    assert "target: above 95%" in next(c for c in source_nb.cells if c.id == "evaluation").source
    assert "above 95% on the 1,000 held-out sums" in next(c for c in source_nb.cells if c.id == "addition-md").source
    nb = solved
    outputs = {c.id: tools.text_outputs(c) for c in nb.cells if c.cell_type == "code"}
    found = re.search(r"held-out exact-match accuracy: ([0-9.]+)% \((\d+) of 1000 sums\)", outputs["evaluation"])
    assert found, outputs["evaluation"]
    assert float(found.group(1)) > TARGET, outputs["evaluation"]
    training = next(c for c in nb.cells if c.id == "training")
    assert "training: 100%" in outputs["training"] and "2000/2000" in outputs["training"]   # the tqdm bar
    assert any("image/png" in o.get("data", {}) for o in training.outputs)                 # the loss curve
    assert re.search(r"2000 steps in \d+ s", outputs["training"])
    # verbose is off by default: training prints no shapes.
    assert "(B, n_head" not in outputs["training"] and "(B, n_head, T, hs)" in outputs["verbose-demo"]


def test_kv_cache_changes_no_token_and_saves_time(solved):
    nb = solved
    outputs = {c.id: tools.text_outputs(c) for c in nb.cells if c.cell_type == "code"}
    assert "the same tokens with and without the cache: True" in outputs["kv-trained"]
    assert "the same tokens: True" in outputs["kv-speed"]
    speed_up = re.search(r"speed-up: ([0-9.]+)x", outputs["kv-speed"])
    assert speed_up and float(speed_up.group(1)) > 1.0, outputs["kv-speed"]


def test_attention_maps_are_drawn_for_every_layer(solved):
    nb = solved
    maps = next(c for c in nb.cells if c.id == "maps")
    assert sum("image/png" in o.get("data", {}) for o in maps.outputs) == 2
    assert "viz.plot_heads(block.attn.last_att[0]" in maps.source


def test_demonstrations_show_what_the_text_says(solved):
    """Issue 16's corrections, as the notebook shows them: attention without a mask is
    permutation-equivariant and causal attention is not; is_causal=True gives the newest token
    [1, 0, 0] over three keys; the key bias gets no gradient; and every figure is drawn."""
    nb = solved
    outputs = {c.id: tools.text_outputs(c) for c in nb.cells if c.cell_type == "code"}
    assert "causal=False: shuffling the tokens only shuffles the outputs: True" in outputs["order-demo"]
    assert "causal=True: shuffling the tokens only shuffles the outputs: False" in outputs["order-demo"]
    assert "is_causal=True: tensor([1., 0., 0.])" in tools.squeeze(outputs["sdpa-cache-demo"])
    assert "largest |gradient| of the key bias:" in outputs["key-bias-demo"]
    for cell in nb.cells:
        if cell.id in ("head-split-figure", "block-diagram", "kv-mask-figure"):
            assert any("image/png" in o.get("data", {}) for o in cell.outputs), cell.id
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "the run shown here" not in text and "seed 000's:" not in text
    assert "shuffle the keys and values together and\nthe result is the same" not in text
    assert "with GPT-2's initialisation" not in text


# --------------------------------------------------------------------------------------
# The real grader: seed 000's code, the seed's two diagnosed mistakes
# --------------------------------------------------------------------------------------


def test_seed_code_gets_full_marks_on_the_attention(graded, source_nb):
    reports, _ = graded
    item = reports["seed"]["mingpt_attention"]
    assert (item["status"], item["score"]) == ("passed", 3), item
    # The seed's forward(self, x) takes no kv_cache, which the block hands it: the block says so.
    assert reports["seed"]["block"]["status"] in ("failed", "error")
    assert "kv_cache" not in SEED_ATTENTION
    # Its visible check passes too, fingerprint and all.
    printed = visible_check_of(source_nb, "mingpt_attention_test", {"mingpt_attention": SEED_ATTENTION})
    assert "CheckFailed" not in printed and "[161, 13, 294, 0, 37187, 432]" in printed


def test_missing_scaling_loses_the_item_and_is_named(graded, source_nb):
    reports, _ = graded
    item = reports["no_scaling"]["mingpt_attention"]
    assert (item["status"], item["score"]) == ("failed", 0), item
    assert item["mistake"] == "scores not scaled by 1/sqrt(d_k)"
    printed = visible_check_of(source_nb, "mingpt_attention_test", {"mingpt_attention": no_scaling(source_nb)})
    assert "gradient fingerprint: [1, 0, 2, 0, 38787, 432]" in printed
    assert "Likely mistake: scores not scaled by 1/sqrt(d_k)" in printed


def test_zero_mask_fill_loses_the_item_and_is_named(graded, source_nb):
    reports, _ = graded
    item = reports["zero_fill"]["mingpt_attention"]
    assert (item["status"], item["score"]) == ("failed", 0), item
    assert item["mistake"] == "masked scores filled with 0 instead of -inf"
    printed = visible_check_of(source_nb, "mingpt_attention_test", {"mingpt_attention": zero_fill(source_nb)})
    assert re.search(r"gradient fingerprint: \[\d+, \d+, \d+, \d+, \d+, 432\]", printed)
    assert "masked scores filled with 0 instead of -inf" in printed and "float('-inf')" in printed


def test_summed_loss_and_uncropped_context_each_lose_their_item_only(graded, source_nb):
    reports, _ = graded
    student = reports["loss_and_crop"]
    assert (student["gpt"]["status"], student["gpt"]["score"]) == ("failed", 0)
    assert student["gpt"]["mistake"] == "the loss summed over the positions instead of averaged"
    summed = answer(source_nb, "gpt", MEAN_LOSS, 'targets.view(-1), ignore_index=-1, reduction="sum")')
    printed = visible_check_of(source_nb, "gpt_test", {"gpt": summed})
    # the visible check names what the hidden one names
    assert "Likely mistake: the loss summed over the positions instead of averaged" in printed, printed
    assert student["generate"]["status"] in ("failed", "error") and student["generate"]["score"] == 0
    assert "block_size" in student["generate"]["message"]
    for name in ("mingpt_attention", "block", "kv_cache"):
        assert student[name]["status"] == "passed", student[name]


@pytest.mark.parametrize("student", ["softmax_axis", "raises"])
def test_a_wrong_attention_costs_its_own_points_only(graded, student):
    """The block, GPT, generation and the cache only build on the attention: they are graded with
    the course's attention in its place, and say so (issue 15's case: these cost 10 of 10)."""
    reports, _ = graded
    items = reports[student]
    assert items[""]["total"] == sum(ROW.points.values()) - ROW.points["mingpt_attention"], items[""]
    assert items["mingpt_attention"]["score"] == 0
    for name in ("block", "gpt", "generate", "kv_cache"):
        assert items[name]["status"] == "passed", items[name]
        message = items[name]["message"]
        assert re.search(r"run on the course's [\w, ]*MultiHeadSelfAttention[\w, ]* in place of yours, because "
                         r"mingpt_attention did not pass", message), message


def test_context_mistakes_in_generation_are_caught(source_nb):
    """Greedy tokens only reveal a generate that reads the wrong context when the model's next
    token depends on the context: the visible checks use such weights (seed=7), the hidden checks
    reset the LayerNorms of random weights. Both must catch generation from the first block_size
    tokens, and a KV cache that slides instead of restarting."""
    first_block = {"generate": answer(source_nb, "generate", CROP, FIRST_BLOCK)}
    sliding = {"kv_cache": SLIDING_CACHE}
    printed = visible_check_of(source_nb, "generate_test", first_block)
    assert "the greedy tokens differ from the reference's" in printed, printed  # the hidden checks' words
    printed = visible_check_of(source_nb, "kv_cache_test", sliding)
    assert ("the greedy tokens differ from the reference's" in printed
            or "until the cache is full, then starts again" in printed), printed
    for secret in (b"one course", b"another course", b"a third course"):
        assert all(v.passed for v in hidden_verdicts(solution_namespace(source_nb), "generate", secret))
        assert all(v.passed for v in hidden_verdicts(solution_namespace(source_nb), "kv_cache", secret))
        failed = [v for v in hidden_verdicts(solution_namespace(source_nb, first_block), "generate", secret)
                  if not v.passed]
        assert failed and "the greedy tokens differ from the reference's" in failed[0].message
        failed = [v for v in hidden_verdicts(solution_namespace(source_nb, sliding), "kv_cache", secret)
                  if not v.passed]  # the tokens give it away, or the steps the model ran on when they do not
        assert failed and ("did the cache restart from the last block_size tokens?" in failed[0].message
                           or "until the cache is full, then starts again" in failed[0].message), failed


def test_a_cache_that_is_not_used_fails_the_visible_and_the_hidden_checks(source_nb):
    """A cache that is never used gives the right tokens too: both checks also count the tokens
    the model runs on at each step."""
    unused = {"kv_cache": "def generate_with_cache(model, idx, max_new_tokens, temperature=1.0, top_k=None):\n"
                          "    return generate_tokens(model, idx, max_new_tokens, temperature, top_k)\n"}
    printed = visible_check_of(source_nb, "kv_cache_test", unused)
    assert "gives the right tokens, but ran the model on [3, 4, 5] tokens per step" in printed, printed
    for secret in (b"one course", b"another course"):
        failed = [v for v in hidden_verdicts(solution_namespace(source_nb, unused), "kv_cache", secret)
                  if not v.passed]
        assert failed and "gives the right tokens, but ran the model on [3, 4, 5, 6] tokens per step" \
            in failed[0].message, failed[0].message if failed else "passed"
