"""What the catalogued mistakes compute: the deliberately breakable twins of the reference.

Each attention mistake is a set of :class:`Flaws` applied to :func:`flawed_multi_head_attention`,
a deliberately breakable twin of :func:`transformer_lm.instructor.reference.multi_head_attention` built
from the reference's own pieces. Each mistake of sampling and generation is a set of
:class:`GenerationFlaws`, applied to :func:`flawed_sampling_probabilities` and
:func:`flawed_model`, twins of the reference's sampling and GPT. With no flaws the twins equal
the reference (tests hold them to that), so every mistake differs from the right answer in
exactly one way.

Two users:

* the checks: when an answer is wrong they compute what each mistake would have produced
  on the same inputs, and name the one that matches, with its hint (the mistakes' names, titles
  and hints are in :mod:`transformer_lm.catalog`);
* the mutation tests: every mistake must be caught and named.
"""

from __future__ import annotations

import copy
import functools
import math

import torch
import torch.nn.functional as F

from transformer_lm import catalog
from transformer_lm.instructor import reference
from transformer_lm.flaws import Flaws, GenerationFlaws, TilingFlaws
from transformer_lm.instructor.decoder_mistakes import (  # noqa: F401 - the checks read 06's twins here
    flawed_apply_rope, flawed_cached_outputs, flawed_generate_padded, flawed_grouped_query_attention,
    flawed_kv_cache_bytes, flawed_layer_mask, flawed_padded_inputs, flawed_padding, flawed_repeat_kv,
    flawed_sliding_window_mask, generate_padded_without_cache)
from transformer_lm.instructor.mistake_family import MistakeFamily
from transformer_lm.sandboxed import probes


def flawed_attention(q, k, v, attn_mask=None, flaws: Flaws = Flaws(), *, model_width: int | None = None,
                     input_width: int | None = None):
    """Scaled dot-product attention as a student might write it, with ``flaws``; ``model_width`` and
    ``input_width`` are the widths of all heads together and of the layer's input, where a flaw
    scales by them.

    Unlike the reference it does not protect fully masked rows: like most student code,
    it yields NaN there. Returns ``(output, weights)``.
    """
    scale = {"head": 1.0 / math.sqrt(q.shape[-1]), "none": 1.0, "tokens": 1.0 / math.sqrt(k.shape[-2]),
             "model": 1.0 / math.sqrt(model_width or q.shape[-1]),
             "input": 1.0 / math.sqrt(input_width or q.shape[-1])}[flaws.scale]
    scores = reference.attention_scores(q, k, scale)
    allowed = None
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        allowed = ~attn_mask if flaws.invert_mask else attn_mask
        if not flaws.mask_after_softmax:
            scores = scores.masked_fill(~allowed, flaws.masked_fill)
    elif attn_mask is not None and not flaws.float_mask_ignored:
        scores = scores + attn_mask
    weights = torch.softmax(scores, dim=flaws.softmax_dim)
    if flaws.mask_after_softmax and allowed is not None:
        weights = weights.masked_fill(~allowed, 0.0)
    if flaws.dropout_in_eval:
        weights = F.dropout(weights, p=flaws.dropout_in_eval, training=True)
    return weights @ v, weights


def squeezed(output: torch.Tensor, flaws: Flaws) -> torch.Tensor:
    """``output`` as an answer with ``flaws`` returns it: squeezed, with ``squeezed``."""
    return output.squeeze() if flaws.squeezed else output


def _attention_function_twin(mistake, q, k, v, attn_mask=None):
    """What ``mistake`` gives for an attention *function* of ``q, k, v`` and an optional mask;
    ``None`` where the call cannot reveal it (a mask mistake, without a mask of its kind; a squeeze,
    without a dimension of size 1)."""
    mask = "mask" if attn_mask is not None and attn_mask.dtype == torch.bool else "float_mask"
    features = ({mask} if attn_mask is not None else set()) | ({"size_one"} if 1 in (*q.shape[:-1], v.shape[-1]) else set())
    if not mistake.visible_in(features):
        return None
    return squeezed(flawed_attention(q, k, v, attn_mask, mistake.flaws)[0], mistake.flaws)


ATTENTION_FUNCTION_MISTAKES = MistakeFamily({mistake: functools.partial(_attention_function_twin, mistake)
                                             for mistake in catalog.revealed_by({"mask", "float_mask", "size_one"})})
"""The catalogued mistakes an attention function of ``(q, k, v[, mask])`` can make."""

SOFTMAX_OVERFLOW = catalog.Mistake(
    "softmax_not_shifted", "softmax without shifting each row by its largest score",
    "exp of a score above about 88 is inf in float32, and inf / inf is NaN, so scores in the hundreds "
    "overflow. A softmax is unchanged when every score of a row is shifted by the same number: shift each row so "
    "that its largest score is 0 before the exponential.")
"""The naive softmax, ``exp(x) / exp(x).sum()``: right on small scores, NaN where a score's exp overflows."""

SOFTMAX_FOR_MATRICES = catalog.Mistake(
    "softmax_over_dim_one", "a softmax written for 2-D scores only (dim=1)",
    "dim=1 is the last dimension only of a 2-D tensor: a vector has no dimension 1 (an IndexError), and on "
    "batched scores (batch, queries, keys) dim=1 runs over the queries. Take the maximum and the sum over dim=-1, "
    "the last dimension whatever the number of dimensions.")
"""A softmax over ``dim=1``: right on a matrix, an ``IndexError`` on a vector, wrong on a batch."""

SOFTMAX_MISTAKES = MistakeFamily({catalog.BY_NAME["softmax_wrong_dim"]: lambda x: torch.softmax(x, dim=0),
                                  SOFTMAX_OVERFLOW: lambda x: x.exp() / x.exp().sum(dim=-1, keepdim=True),
                                  SOFTMAX_FOR_MATRICES: lambda x: torch.softmax(x, dim=1)})
"""A softmax function of one tensor normalised over the first dimension instead of the last,
written without its shift, which overflows, or over dim=1, which a vector does not have."""

CONTEXT_VECTOR_MISTAKES = MistakeFamily({
    catalog.BY_NAME["softmax_wrong_dim"]: lambda x: flawed_attention(x, x, x, None, Flaws(scale="none",
                                                                                          softmax_dim=0))[0],
    catalog.BY_NAME["squeezed_size_one"]: lambda x: flawed_attention(x, x, x, None, Flaws(scale="none"))[0].squeeze()})
"""Weightless attention ``softmax(x @ x.T) @ x`` (no scaling), its softmax over the queries, or its
output squeezed (one token's comes out 1-D)."""


def flawed_multi_head_attention(x, weights: reference.AttentionWeights, num_heads: int, flaws: Flaws = Flaws(),
                                *, attn_mask=None, causal: bool = False):
    """Multi-head self-attention as a student might write it, with ``flaws``.

    Returns ``(output, weights)`` with weights shaped ``(..., heads, seq, seq)``.
    """
    def split(t):
        if flaws.split_without_transpose:
            return t.reshape(*t.shape[:-2], num_heads, t.shape[-2], t.shape[-1] // num_heads)
        return reference.split_heads(t, num_heads)

    def merge(t):
        if flaws.heads_on_tokens:   # (..., heads, seq, head_dim) -> (..., heads * seq, head_dim), head 0 first
            return t.flatten(-3, -2)
        if flaws.merge_without_transpose:
            return t.reshape(*t.shape[:-3], t.shape[-2], t.shape[-3] * t.shape[-1])
        return reference.merge_heads(t)

    def project(w, b):
        return F.linear(x, w, None if flaws.bias_left_out else b)

    q = split(project(weights.w_query, weights.b_query))
    k = split(project(weights.w_key, weights.b_key))
    v = split(project(weights.w_value, weights.b_value))
    allowed = None
    if causal:
        seq = x.shape[-2]
        allowed = torch.tril(torch.ones(seq, seq, dtype=torch.bool), diagonal=flaws.causal_diagonal)
    mask = reference.combine_masks(attn_mask, allowed)
    out, probs = flawed_attention(q, k, v, mask, flaws, model_width=weights.w_query.shape[0], input_width=x.shape[-1])
    out = merge(out)
    if weights.w_out is not None and not flaws.skip_output_projection:
        out = F.linear(out, weights.w_out, weights.b_out)
    return out, probs


class _FlawedAttention(torch.nn.Module):
    """Stands in for a reference block's attention: the same weights, through the flawed twin."""

    def __init__(self, attention: reference.MultiHeadSelfAttention, flaws: Flaws):
        super().__init__()
        self.weights, self.heads, self.flaws = attention.attention_weights(), attention.n_head, flaws

    def forward(self, x, past=None):
        output, _ = flawed_multi_head_attention(x, self.weights, self.heads, self.flaws, causal=True)
        return reference.Attention(output, None, None, None)


def flawed_block(block: reference.Block, x: torch.Tensor, flaws: Flaws) -> torch.Tensor:
    """A decoder block as a student might write it: the reference block's own forward, with its
    causal attention made by :func:`flawed_multi_head_attention` with ``flaws`` (the block's output
    squeezed with ``squeezed``)."""
    attention = block.attn
    block.attn = _FlawedAttention(attention, flaws)
    try:
        return squeezed(block(x)[0], flaws)
    finally:
        block.attn = attention


def _block_squeezed(block: reference.Block, x: torch.Tensor) -> torch.Tensor | None:
    """What a block that squeezes its output gives on ``x``; ``None`` where ``x`` has no dimension
    of size 1 to lose."""
    return flawed_block(block, x, catalog.BY_NAME["squeezed_size_one"].flaws) if 1 in x.shape else None


BLOCK_MISTAKES = MistakeFamily({catalog.BY_NAME["squeezed_size_one"]: _block_squeezed})
"""The catalogued mistake minGPT's Block makes in its own forward (its attention's are the attention's,
charged there; dropout left on shows by two calls, :class:`transformer_lm.instructor.kinds.ModuleCheck`'s
``repeat``)."""


def flawed_sampling_probabilities(logits: torch.Tensor, temperature: float, top_k: int | None,
                                  flaws: GenerationFlaws) -> torch.Tensor:
    """What ``sample_next_token`` with ``flaws`` draws from, per row of ``logits`` ``(B, vocab)``:
    :func:`transformer_lm.instructor.reference.sampling_probabilities` as a student might write it."""
    if flaws.greedy:
        return F.one_hot(logits.argmax(dim=-1), logits.shape[-1]).to(logits.dtype)
    scaled = {"divide": logits / temperature, "multiply": logits * temperature, "ignore": logits}[flaws.temperature]
    probs = reference.sampling_probabilities(scaled, 1.0, top_k)
    if flaws.top_k_unmapped and top_k is not None:  # position i among the top k, largest first, drawn as token i
        top = torch.topk(probs, min(top_k, probs.shape[-1])).values
        probs = F.pad(top, (0, probs.shape[-1] - top.shape[-1]))
    return probs


def flawed_model(model: reference.GPT, flaws: GenerationFlaws) -> reference.GPT:
    """The reference GPT ``model`` (its weights, shared) with its context window and positions as a
    student might write them; its greedy ``generate(..., top_k=1)`` then gives that student's
    tokens. (A top-k position drawn as the token id makes greedy decoding pick token 0.)"""
    flawed = copy.copy(model)  # the same layers; only these two steps change
    if flaws.crop_first:
        flawed.context_window = lambda idx: idx[:, :model.config.block_size]
    if flaws.positions_from_zero:
        flawed.position_embeddings = lambda start, length: model.pos_emb[:, :length]
    if flaws.restart_early:
        flawed.cache_is_full = lambda cached: cached + 2 > model.config.block_size
    return flawed


def flawed_greedy_tokens(model: reference.GPT, idx: torch.Tensor, max_new_tokens: int, use_cache: bool,
                         flaws: GenerationFlaws) -> torch.Tensor:
    """The tokens that greedy generation with ``flaws`` gives: ``generate(idx, max_new_tokens,
    top_k=1, use_cache=...)`` of :func:`flawed_model`."""
    if flaws.top_k_unmapped:
        return torch.cat([idx, torch.zeros(idx.shape[0], max_new_tokens, dtype=idx.dtype)], dim=1)
    return flawed_model(model, flaws).generate(idx, max_new_tokens, top_k=1, use_cache=use_cache)


def flawed_cache_steps(model: reference.GPT, idx: torch.Tensor, max_new_tokens: int,
                       flaws: GenerationFlaws) -> torch.Tensor:
    """How many tokens each call of the model runs on in greedy generation with a KV cache and
    ``flaws`` (a cache restarted too early gives the right tokens: only these steps tell it)."""
    flawed = flawed_model(model, flaws)
    with probes.tokens_per_call(flawed) as seen:
        flawed.generate(idx, max_new_tokens, top_k=1, use_cache=True)
    return torch.tensor(seen, dtype=torch.long)


def flawed_merge_stats(a: reference.SoftmaxStats, b: reference.SoftmaxStats,
                       flaws: TilingFlaws) -> reference.SoftmaxStats:
    """:func:`transformer_lm.instructor.reference.merge_softmax_stats` as a student might write it: with
    ``total_not_rescaled``, the first part's total is added as it was; with ``unguarded_rescale``,
    each total is multiplied by ``exp(m - new_m)`` unguarded (nan where both parts are empty)."""
    merged = reference.merge_softmax_stats(a, b)
    if flaws.unguarded_rescale:
        return reference.SoftmaxStats(merged.maximum, a.total * torch.exp(a.maximum - merged.maximum)
                                      + b.total * torch.exp(b.maximum - merged.maximum))
    if flaws.total_not_rescaled:
        return reference.SoftmaxStats(merged.maximum, a.total + b.total * reference.rescale(b.maximum, merged.maximum))
    return merged


def flawed_streamed_stats(blocks, flaws: TilingFlaws) -> reference.SoftmaxStats:
    """:func:`transformer_lm.instructor.reference.streamed_stats` as a student might write it."""
    stats = reference.SoftmaxStats(torch.tensor(float("-inf")), torch.tensor(0.0))
    for part in blocks:
        if flaws.global_maximum:  # the largest score of the block, over every row, shared by all of them
            shared = part.amax().expand(part.shape[:-1])
            part_stats = reference.SoftmaxStats(shared, torch.exp(part - shared.unsqueeze(-1)).sum(dim=-1))
        else:
            part_stats = reference.softmax_stats(part)
        stats = flawed_merge_stats(stats, part_stats, flaws)
    return stats


def flawed_online_softmax(scores: torch.Tensor, block: int, flaws: TilingFlaws) -> torch.Tensor:
    """:func:`transformer_lm.instructor.reference.online_softmax` as a student might write it."""
    stats = flawed_streamed_stats(scores.split(block, dim=-1), flaws)
    return torch.exp(scores - stats.maximum.unsqueeze(-1)) / stats.total.unsqueeze(-1)


def flawed_key_blocks(query_start: int, query_stop: int, keys: int, block_k: int, causal: bool,
                      flaws: TilingFlaws) -> range:
    """:func:`transformer_lm.instructor.reference.key_blocks` as a student might write it."""
    if not causal or flaws.causal_blocks == "all":
        return range(0, keys, block_k)
    stop = {"skip": query_stop, "miss_diagonal": query_start}[flaws.causal_blocks]
    return range(0, min(keys, stop), block_k)


def flawed_tile_scores(qb: torch.Tensor, kb: torch.Tensor, query_start: int, key_start: int, causal: bool,
                       flaws: TilingFlaws) -> torch.Tensor:
    """:func:`transformer_lm.instructor.reference.tile_scores` as a student might write it, in the forward or
    in the backward's recomputation: without the scale (``scores_unscaled``), or with the causal
    mask of every tile off by ``tile_diagonal`` (-1: a query's own key hidden; 1: the next key seen).
    The mask is applied to every tile, as the notebook's picture builds it."""
    scores = reference.attention_scores(qb, kb, 1.0 if flaws.scores_unscaled else None)
    if causal:
        rows = torch.arange(query_start, query_start + qb.shape[-2], device=qb.device).unsqueeze(-1)
        cols = torch.arange(key_start, key_start + kb.shape[-2], device=qb.device)
        scores = scores.masked_fill(cols > rows + flaws.tile_diagonal, float("-inf"))
    return scores


def flawed_flash_forward(q, k, v, causal: bool, block_q: int, block_k: int,
                         flaws: TilingFlaws) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`transformer_lm.instructor.reference.flash_forward` as a student might write it: the output and
    the log-sum-exp per query, computed tile by tile with ``flaws`` (``full_scores`` computes the
    whole score matrix at once; ``full_row`` each query block's whole row of keys). Its exponentials
    are unguarded, as the notebook's loop writes them: a row that sees no key at all (query 0, its
    own key hidden) comes out NaN in both the output and the log-sum-exp, as such a student's does."""
    if flaws.full_scores:
        mask = reference.causal_mask(q.shape[-2], k.shape[-2]) if causal else None
        scores = reference.apply_mask(reference.attention_scores(q, k), mask)
        return reference.masked_softmax(scores) @ v, torch.logsumexp(scores, dim=-1)
    out = q.new_empty(*q.shape[:-1], v.shape[-1])
    lse = q.new_empty(q.shape[:-1])
    for qs in range(0, q.shape[-2], block_q):
        qb = q[..., qs:qs + block_q, :]
        acc = q.new_zeros(*qb.shape[:-1], v.shape[-1])
        maximum, total = q.new_full(qb.shape[:-1], float("-inf")), q.new_zeros(qb.shape[:-1])
        blocks = flawed_key_blocks(qs, qs + qb.shape[-2], k.shape[-2], block_k, causal, flaws)
        step = k.shape[-2] if flaws.full_row else block_k
        for ks in (range(0, blocks.stop, step) if flaws.full_row else blocks):
            scores = flawed_tile_scores(qb, k[..., ks:ks + step, :], qs, ks, causal, flaws)  # (..., bq, bk)
            tile_max = scores.amax() if flaws.global_maximum else scores.amax(dim=-1)  # one for all rows, or each row's
            new_max = torch.maximum(maximum, tile_max)
            weights = torch.exp(scores - new_max.unsqueeze(-1))
            kept = torch.exp(maximum - new_max)
            total = total * (1.0 if flaws.total_not_rescaled else kept) + weights.sum(dim=-1)
            acc = (acc if flaws.output_not_rescaled else acc * kept.unsqueeze(-1)) + weights @ v[..., ks:ks + step, :]
            maximum = new_max
        out[..., qs:qs + block_q, :] = acc / total.unsqueeze(-1)
        lse[..., qs:qs + block_q] = (0.0 if flaws.lse_without_max else maximum) + torch.log(total)
    return out, lse


def flawed_flash_gradients(q, k, v, grad_out, causal: bool, block_q: int, block_k: int,
                           flaws: TilingFlaws) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients with respect to q, k and v that :func:`transformer_lm.instructor.reference.flash_backward`
    written with ``flaws`` gives (``delta_from_tile``: D summed over each tile only;
    ``delta_left_out``: no D at all; ``dk_unscaled``: dk without the scale of the scores; the
    tiles' scores recomputed as :func:`flawed_tile_scores` makes them), under the reference's
    forward: the grader judges a backward with the course's forward in place of a wrong one."""
    out, lse = reference.flash_forward(q, k, v, causal, block_q, block_k)
    scale = 1.0 / math.sqrt(q.shape[-1])
    delta = (grad_out * out).sum(dim=-1, keepdim=True)   # D = rowsum(dO * O), (..., T_q, 1)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for qs in range(0, q.shape[-2], block_q):
        qb, dob = q[..., qs:qs + block_q, :], grad_out[..., qs:qs + block_q, :]
        for ks in reference.key_blocks(qs, qs + qb.shape[-2], k.shape[-2], block_k, causal):
            kb, vb = k[..., ks:ks + block_k, :], v[..., ks:ks + block_k, :]
            scores = flawed_tile_scores(qb, kb, qs, ks, causal, flaws)
            probs = torch.exp(scores - lse[..., qs:qs + block_q].unsqueeze(-1))
            dv[..., ks:ks + block_k, :] += probs.transpose(-2, -1) @ dob
            dprobs = dob @ vb.transpose(-2, -1)
            row_delta = (probs * dprobs).sum(dim=-1, keepdim=True) if flaws.delta_from_tile \
                else 0.0 if flaws.delta_left_out else delta[..., qs:qs + block_q, :]
            dscores = probs * (dprobs - row_delta)
            dq[..., qs:qs + block_q, :] += (dscores @ kb) * scale
            dk[..., ks:ks + block_k, :] += (dscores.transpose(-2, -1) @ qb) * (1.0 if flaws.dk_unscaled else scale)
    return dq, dk, dv
