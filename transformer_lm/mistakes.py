"""The catalog of typical attention mistakes, as code.

Each mistake is a set of :class:`Flaws` applied to :func:`flawed_multi_head_attention`, a
deliberately breakable twin of :func:`transformer_lm.reference.multi_head_attention` built
from the reference's own pieces. With no flaws the twin equals the reference (a test holds
it to that), so every mistake differs from the right answer in exactly one way.

Two users:

* the checks: when an answer is wrong they compute what each mistake would have produced
  on the same inputs, and name the one that matches, with its hint;
* the mutation tests: every mistake must be caught and named.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from transformer_lm import reference


@dataclass(frozen=True)
class Flaws:
    """Ways an attention implementation can go wrong; the defaults are all correct."""

    softmax_dim: int = -1
    scale: str = "head"  # "head": 1/sqrt(head_dim); "none"; "model": 1/sqrt(all heads' width)
    masked_fill: float = float("-inf")
    causal_diagonal: int = 0  # the last key a causal query may see, counted from itself: -1 hides it, 1 leaks the next
    mask_after_softmax: bool = False  # masked weights zeroed after the softmax, rows not renormalised
    invert_mask: bool = False
    split_without_transpose: bool = False
    merge_without_transpose: bool = False
    skip_output_projection: bool = False
    dropout_in_eval: float = 0.0


@dataclass(frozen=True)
class Mistake:
    """One catalogued mistake: a name for reports, words for the student, and its flaws.

    ``shows_with`` lists the features a test needs for the mistake to change the result
    ("heads", "mask", "causal", "projection", "dropout"); one feature is enough.
    """

    name: str
    title: str
    hint: str
    flaws: Flaws
    shows_with: frozenset[str] = frozenset()

    def visible_in(self, features: set[str] | frozenset[str]) -> bool:
        return not self.shows_with or bool(self.shows_with & set(features))


def revealed_by(features: set[str] | frozenset[str]) -> list[Mistake]:
    """The catalogued mistakes that a test with ``features`` can tell apart by what it outputs
    (dropout left on in eval mode shows by two calls giving two outputs instead)."""
    return [mistake for mistake in CATALOG if mistake.visible_in(features) and mistake.name != "dropout_in_eval"]


CATALOG: tuple[Mistake, ...] = (
    Mistake(
        "softmax_wrong_dim", "softmax over the wrong dimension",
        "Each query's weights over the keys must sum to 1, so apply the softmax over the last "
        "dimension (dim=-1). On batched scores (batch, queries, keys), dim=1 normalises over the "
        "queries instead.",
        Flaws(softmax_dim=-2),
    ),
    Mistake(
        "no_scaling", "scores not scaled by 1/sqrt(d_k)",
        "Divide the scores q @ k^T by sqrt(d_k), the width of one head's keys, before the softmax; "
        "unscaled scores grow with the width and saturate the softmax.",
        Flaws(scale="none"),
    ),
    Mistake(
        "scaled_by_model_width", "scores scaled by the model width instead of the head width",
        "With several heads, d_k is the width of one head (d_out // num_heads), not d_out: "
        "scale by 1/sqrt(head_dim).",
        Flaws(scale="model"), frozenset({"heads"}),
    ),
    Mistake(
        "mask_filled_with_zero", "masked scores filled with 0 instead of -inf",
        "A masked score of 0 still gets weight after the softmax (e^0 = 1). Fill the masked scores "
        "with float('-inf') so that their weight is exactly 0.",
        Flaws(masked_fill=0.0), frozenset({"mask", "causal"}),
    ),
    Mistake(
        "mask_hides_diagonal", "the causal mask also hides the current token",
        "A token may attend to itself and to the past, only the future is hidden: block "
        "torch.triu(..., diagonal=1), or keep torch.tril(...) with its diagonal.",
        Flaws(causal_diagonal=-1), frozenset({"causal"}),
    ),
    Mistake(
        "mask_leaks_next_token", "the causal mask lets each token see the next one",
        "The mask is off by one: block every key after the query. torch.triu(torch.ones(T, T), diagonal=1) "
        "marks exactly the future; with diagonal=2 each token still sees the token after it.",
        Flaws(causal_diagonal=1), frozenset({"causal"}),
    ),
    Mistake(
        "mask_after_softmax", "the mask applied after the softmax, without renormalising",
        "Mask the scores before the softmax (fill them with -inf), so that each row's weights over the "
        "allowed keys sum to 1. Weights zeroed after the softmax no longer sum to 1, unless each row is "
        "divided by its new sum.",
        Flaws(mask_after_softmax=True), frozenset({"mask", "causal"}),
    ),
    Mistake(
        "inverted_mask", "the boolean mask is inverted",
        "Here, as in F.scaled_dot_product_attention, True means 'may attend'. masked_fill fills "
        "where its condition is True, so fill where the mask is False (~mask). "
        "(nn.MultiheadAttention uses the opposite convention: True blocks.)",
        Flaws(invert_mask=True), frozenset({"mask", "causal"}),
    ),
    Mistake(
        "split_heads_without_transpose", "heads split with view but no transpose",
        "Split (batch, seq, d_out) with .view(batch, seq, num_heads, head_dim) and then "
        ".transpose(1, 2). A direct .view(batch, num_heads, seq, head_dim) has the right shape "
        "but mixes tokens into the wrong heads.",
        Flaws(split_without_transpose=True), frozenset({"heads"}),
    ),
    Mistake(
        "merge_heads_without_transpose", "heads merged with view but no transpose",
        "Before merging, .transpose(1, 2) back to (batch, seq, num_heads, head_dim), then "
        ".contiguous().view(batch, seq, d_out). A direct view interleaves tokens and heads.",
        Flaws(merge_without_transpose=True), frozenset({"heads"}),
    ),
    Mistake(
        "missing_output_projection", "no output projection after merging the heads",
        "After the heads are merged, apply the output projection layer (out_proj, mix or proj) "
        "so that the heads' outputs are mixed.",
        Flaws(skip_output_projection=True), frozenset({"projection"}),
    ),
    Mistake(
        "dropout_in_eval", "dropout still active in eval mode",
        "Dropout must only act in training. Use the nn.Dropout module stored on self, which "
        "model.eval() switches off; F.dropout(x, p) without training=self.training is always on.",
        Flaws(dropout_in_eval=0.5), frozenset({"dropout"}),
    ),
)

BY_NAME = {mistake.name: mistake for mistake in CATALOG}


def flawed_attention(q, k, v, attn_mask=None, flaws: Flaws = Flaws(), *, model_width: int | None = None):
    """Scaled dot-product attention as a student might write it, with ``flaws``.

    Unlike the reference it does not protect fully masked rows: like most student code,
    it yields NaN there. Returns ``(output, weights)``.
    """
    scale = {"head": 1.0 / math.sqrt(q.shape[-1]), "none": 1.0,
             "model": 1.0 / math.sqrt(model_width or q.shape[-1])}[flaws.scale]
    scores = reference.attention_scores(q, k, scale)
    allowed = None
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        allowed = ~attn_mask if flaws.invert_mask else attn_mask
        if not flaws.mask_after_softmax:
            scores = scores.masked_fill(~allowed, flaws.masked_fill)
    elif attn_mask is not None:
        scores = scores + attn_mask
    weights = torch.softmax(scores, dim=flaws.softmax_dim)
    if flaws.mask_after_softmax and allowed is not None:
        weights = weights.masked_fill(~allowed, 0.0)
    if flaws.dropout_in_eval:
        weights = F.dropout(weights, p=flaws.dropout_in_eval, training=True)
    return weights @ v, weights


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
        if flaws.merge_without_transpose:
            return t.reshape(*t.shape[:-3], t.shape[-2], t.shape[-3] * t.shape[-1])
        return reference.merge_heads(t)

    q = split(F.linear(x, weights.w_query, weights.b_query))
    k = split(F.linear(x, weights.w_key, weights.b_key))
    v = split(F.linear(x, weights.w_value, weights.b_value))
    allowed = None
    if causal:
        seq = x.shape[-2]
        allowed = torch.tril(torch.ones(seq, seq, dtype=torch.bool), diagonal=flaws.causal_diagonal)
    mask = reference.combine_masks(attn_mask, allowed)
    out, probs = flawed_attention(q, k, v, mask, flaws, model_width=weights.w_query.shape[0])
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
    causal attention made by :func:`flawed_multi_head_attention` with ``flaws``."""
    attention = block.attn
    block.attn = _FlawedAttention(attention, flaws)
    try:
        return block(x)[0]
    finally:
        block.attn = attention
