"""Assignment 05's catalogue and check kinds: the twins without flaws are the reference, every
catalogued mistake of tiled attention is caught and named by the visible check that concerns it
(a mistake of the values by the grader's item too, in the forward and in the backward), and the
course's own tiled attention passes every one (transformer_lm/instructor/tiled_kinds.py)."""

import pytest
import torch

import notebook_tools as tools
from autograder.reading.course import Course, generator_for, load_items
from live_checks import visible
from transformer_lm import catalog
from transformer_lm.instructor import capped_kinds, mistakes, reference, stream_kinds, tiled_kinds
from transformer_lm.sandboxed import score_blocks
from transformer_lm.flaws import TilingFlaws
from transformer_lm.judging import CheckFailed
from transformer_lm.instructor.kinds import backward_of, judge_here

NONE = TilingFlaws()
ASSIGNMENT = "05_efficient_attention"
OF_THE_SCORES = [m for m in catalog.TILING if "backward" in m.shows_with and m.shows_with & {"forward", "causal"}]
"""The mistakes of a tile's scores (its scale, its causal mask), which the forward and the
backward, recomputing the same tiles, can each make."""


def flawed_forward(flaws):
    def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
        return mistakes.flawed_flash_forward(q, k, v, causal, block_q, block_k, flaws)
    return flash_forward


def flawed_function(flaws):
    """An autograd Function over the flawed twins: ``backward_full`` recomputes the whole weight
    matrix, ``saves_weights`` keeps the weights on ctx."""
    class FlashAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, causal=False, block_q=16, block_k=16):
            out, lse = reference.flash_forward(q, k, v, causal, block_q, block_k)
            ctx.save_for_backward(q, k, v, out, lse)
            ctx.options = (causal, block_q, block_k)
            if flaws.saves_weights:
                ctx.weights = torch.exp(reference.attention_scores(q, k) - lse.unsqueeze(-1))
            return out

        @staticmethod
        def backward(ctx, grad_out):
            q, k, v, out, lse = ctx.saved_tensors
            if flaws.backward_full:
                mask = reference.causal_mask(q.shape[-2], k.shape[-2]) if ctx.options[0] else None
                probs = torch.exp(reference.apply_mask(reference.attention_scores(q, k), mask) - lse.unsqueeze(-1))
                dprobs = grad_out @ v.transpose(-2, -1)
                dscores = probs * (dprobs - (grad_out * out).sum(-1, keepdim=True)) / q.shape[-1] ** 0.5
                return dscores @ k, dscores.transpose(-2, -1) @ q, probs.transpose(-2, -1) @ grad_out, None, None, None
            grads = mistakes.flawed_flash_gradients(q, k, v, grad_out, *ctx.options, flaws)
            return (*grads, None, None, None)
    return FlashAttention


def test_the_twins_without_flaws_are_the_reference():
    q, k, v = (torch.randn(2, 3, 29, 8, dtype=torch.float64) for _ in "qkv")
    for causal in (False, True):
        twin, ours = mistakes.flawed_flash_forward(q, k, v, causal, 8, 5, NONE), reference.flash_forward(q, k, v, causal, 8, 5)
        assert all(torch.allclose(a, b, rtol=1e-12, atol=1e-12) for a, b in zip(twin, ours))   # float64 rounding
        grad = torch.randn(q.shape, dtype=torch.float64)
        out, lse = ours
        assert all(torch.allclose(a, b, rtol=1e-12, atol=1e-12) for a, b in zip(mistakes.flawed_flash_gradients(q, k, v, grad, causal, 8, 5, NONE),
                                                     reference.flash_backward(q, k, v, out, lse, grad, causal, 8, 5)))
    scores = torch.randn(4, 23)
    assert torch.allclose(mistakes.flawed_online_softmax(scores, 5, NONE), reference.online_softmax(scores, 5))


def test_the_course_code_passes_every_visible_check():
    def merge_stats(max_a, sum_a, max_b, sum_b):
        merged = reference.merge_softmax_stats(reference.SoftmaxStats(max_a, sum_a), reference.SoftmaxStats(max_b, sum_b))
        return merged.maximum, merged.total

    def online_softmax(scores, block):
        return reference.online_softmax(scores, block)

    assert visible("merge_stats", "merge_stats")(merge_stats).passed and visible("online_softmax", "online_softmax")(online_softmax).passed
    assert visible("softmax_stats", "softmax_stats")(lambda blocks: tuple(reference.streamed_stats(blocks))).passed
    flash_forward = flawed_forward(NONE)
    for check in (visible("flash_forward", "flash_forward"), visible("flash_memory", "flash_forward"), visible("causal_skipping", "flash_forward")):
        assert check(flash_forward).passed
    assert visible("flash_backward", "FlashAttention")(reference.FlashAttention).passed
    assert visible("backward_memory", "FlashAttention")(reference.FlashAttention).passed


def check_that_concerns(mistake):
    """The visible check that must refuse a twin with ``mistake``, and the twin."""
    flaws, shows = mistake.flaws, mistake.shows_with
    if shows & {"merge"}:
        def merge_stats(max_a, sum_a, max_b, sum_b):
            return mistakes.flawed_merge_stats(reference.SoftmaxStats(max_a, sum_a), reference.SoftmaxStats(max_b, sum_b),
                                               flaws)
        return visible("merge_stats", "merge_stats"), merge_stats
    if shows & {"online"} and not shows & {"forward"}:
        return visible("online_softmax", "online_softmax"), lambda scores, block: mistakes.flawed_online_softmax(scores, block, flaws)
    if shows & {"forward", "causal"}:
        return visible("flash_forward", "flash_forward"), flawed_forward(flaws)
    if shows & {"work"}:
        return visible("causal_skipping", "flash_forward"), flawed_forward(flaws)
    if shows & {"memory"}:
        return visible("flash_memory", "flash_forward"), flawed_forward(flaws)
    if shows & {"backward"}:
        return visible("flash_backward", "FlashAttention"), flawed_function(flaws)
    return visible("backward_memory", "FlashAttention"), flawed_function(flaws)


@pytest.mark.parametrize("mistake", catalog.TILING, ids=lambda m: m.name)
def test_every_mistake_of_tiled_attention_is_caught_and_named(mistake):
    check, answer = check_that_concerns(mistake)
    with pytest.raises(CheckFailed) as failure:
        check(answer)
    assert mistake.title in str(failure.value), str(failure.value)


@pytest.mark.parametrize("mistake", [m for m in catalog.TILING if m.shows_with & {"online"}], ids=lambda m: m.name)
def test_the_online_softmax_mistakes_are_named_by_its_check_too(mistake):
    with pytest.raises(CheckFailed) as failure:
        visible("online_softmax", "online_softmax")(lambda scores, block: mistakes.flawed_online_softmax(scores, block, mistake.flaws))
    assert mistake.title in str(failure.value), str(failure.value)


@pytest.mark.parametrize("mistake", [m for m in catalog.TILING if m.shows_with & {"online"}], ids=lambda m: m.name)
def test_the_streamed_statistics_name_the_online_softmax_mistakes(mistake):
    with pytest.raises(CheckFailed) as failure:
        visible("softmax_stats", "softmax_stats")(lambda blocks: tuple(mistakes.flawed_streamed_stats(blocks, mistake.flaws)))
    assert mistake.title in str(failure.value), str(failure.value)


def test_the_trusted_statistics_of_a_stream_are_those_of_its_whole_rows_in_float64():
    seeds, shifts, spreads = torch.arange(23), torch.randn(23, 3) * 2, torch.rand(3) * 4 + 1
    rows = torch.cat(list(score_blocks.score_blocks(seeds, shifts, spreads, 7, 159)), dim=-1)
    assert rows.shape == (3, 159)
    exact = stream_kinds.exact_stats(score_blocks.score_blocks(seeds, shifts, spreads, 7, 159))
    assert all(torch.allclose(a, b, rtol=1e-12, atol=0) and a.dtype == torch.float64
               for a, b in zip(exact, reference.softmax_stats(rows.double())))


def test_a_forward_that_never_exponentiates_cannot_have_its_work_counted():
    def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
        return q * 0, q[..., 0] * 0   # no torch.exp anywhere

    with pytest.raises(CheckFailed, match="no exponentials"):
        visible("causal_skipping", "flash_forward")(flash_forward)


@pytest.mark.parametrize("mistake", OF_THE_SCORES, ids=lambda m: m.name)
def test_a_mistake_of_the_scores_made_in_the_backward_is_named_by_its_check_too(mistake):
    with pytest.raises(CheckFailed) as failure:
        visible("flash_backward", "FlashAttention")(flawed_function(mistake.flaws))
    assert mistake.title in str(failure.value), str(failure.value)


@pytest.mark.parametrize("mistake", [m for m in catalog.TILING if m.shows_with & {"forward", "causal", "backward"}],
                         ids=lambda m: m.name)
def test_the_grader_names_every_mistake_of_the_values_in_the_forward_and_the_backward(mistake):
    """The hidden item of the forward's values, and of the gradients, fails by the first check that
    fails (its message is the item's), so that check must name the mistake; judged here as the
    grader judges, without the sandbox."""
    items = {item.grade_id: item for item in load_items(Course(tools.REPO_ROOT), ASSIGNMENT)}
    answers = {"flash_forward": {"flash_forward": flawed_forward(mistake.flaws)},
               "flash_backward": {"FlashAttention": flawed_function(mistake.flaws)}}
    concerned = [grade_id for grade_id, shows in (("flash_forward", {"forward", "causal"}),
                                                  ("flash_backward", {"backward"})) if mistake.shows_with & shows]
    for grade_id in concerned:
        verdicts = (judge_here(check, answers[grade_id], generator_for(b"tiles", ASSIGNMENT, grade_id, index))
                    for index, check in enumerate(items[grade_id].checks))
        failed = next((verdict for verdict in verdicts if not verdict.passed), None)
        assert failed is not None, f"{grade_id} passes {mistake.name}"
        assert failed.mistake == mistake, f"{grade_id}: {failed.message}"


@pytest.mark.parametrize("causal", [False, True])
def test_the_capped_checks_exact_values_by_blocks_are_exact_attentions(causal):
    """``exact_by_query_blocks``, made for sizes where the whole score matrix does not fit, gives
    what plain exact attention gives (its output and log-sum-exp, or with gradients its output and
    the gradients of q, k and v): blocks of 7 queries, the causal ones held against only the keys up
    to their last query, and fewer queries than keys."""
    case = tiled_kinds.TileCase(batch=2, heads=3, seq_q=30, seq_k=37, dim=5, dim_v=6, block_q=8, block_k=8,
                                causal=causal)
    tensors = case.tensors(torch.Generator().manual_seed(3))
    plain = tiled_kinds.exact_attention(tensors["q"], tensors["k"], tensors["v"], causal)
    by_blocks = capped_kinds.exact_by_query_blocks(tensors, causal, gradients=False, rows=7)
    for name in ("output", "lse"):
        torch.testing.assert_close(by_blocks[name], plain[name], rtol=1e-6, atol=1e-6)
    with_gradients = capped_kinds.exact_by_query_blocks(tensors, causal, gradients=True, rows=7)
    torch.testing.assert_close(with_gradients["output"], plain["output"], rtol=1e-6, atol=1e-6)
    for name, gradient in tiled_kinds.exact_gradients(tensors, causal).items():
        torch.testing.assert_close(with_gradients[name], gradient, rtol=1e-6, atol=1e-6)


def test_backward_of_gives_the_gradients_of_backward_bit_for_bit():
    """The grader's references back-propagate through a scalar (``backward_of``), which spares the
    grader sympy's import; the gradients are those of ``output.backward(grad_output)`` exactly."""
    generator = torch.Generator().manual_seed(5)
    x, weight, grad_output = (torch.randn(shape, generator=generator) for shape in ((4, 9, 6), (6, 6), (4, 9, 6)))
    grads = []
    for through_a_scalar in (False, True):
        leaves = [x.clone().requires_grad_(), weight.clone().requires_grad_()]
        output = torch.softmax(leaves[0] @ leaves[1], dim=-1) * leaves[0]
        backward_of(output, grad_output) if through_a_scalar else output.backward(grad_output)
        grads.append([leaf.grad for leaf in leaves])
    assert all(torch.equal(a, b) for a, b in zip(*grads))
