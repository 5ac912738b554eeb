"""Attention itself: the causal mask, scaled scores, a mask applied to them, a softmax that keeps
fully masked rows at zero, scaled dot-product attention, and multi-head attention on explicit
weights (:class:`AttentionWeights`).

Every other module of the reference attends through these functions: the minGPT model
(:mod:`transformer_lm.instructor.reference.gpt`), tiled attention (:mod:`transformer_lm.instructor.reference.tiled`) and
today's decoders (:mod:`transformer_lm.instructor.reference.decoder`). The conventions are the package's
(:mod:`transformer_lm.instructor.reference`), those of ``F.scaled_dot_product_attention``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import NamedTuple

import torch
import torch.nn.functional as F

# --------------------------------------------------------------------------------------
# Scaled dot-product attention
# --------------------------------------------------------------------------------------


def causal_mask(query_len: int, key_len: int | None = None, *, device=None) -> torch.Tensor:
    """Boolean ``(query_len, key_len)`` mask, True where a query may look at a key.

    Queries are the *last* ``query_len`` positions of the ``key_len`` keys, so query ``i``
    sees keys ``0 .. i + (key_len - query_len)``: with equal lengths that is the lower
    triangle with its diagonal (every token sees itself and the past, never the future);
    with a KV cache the new queries line up with the newest keys.
    """
    key_len = query_len if key_len is None else key_len
    ones = torch.ones(query_len, key_len, dtype=torch.bool, device=device)
    return torch.tril(ones, diagonal=key_len - query_len)


def attention_scores(q: torch.Tensor, k: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """``q @ k^T`` scaled by ``1/sqrt(d_k)``: ``(..., Lq, d) x (..., Lk, d) -> (..., Lq, Lk)``.

    Without the scale, dot products of d-dimensional vectors grow like ``sqrt(d)`` and the
    softmax saturates, which starves the gradients.
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    return (q @ k.transpose(-2, -1)) * scale


def apply_mask(scores: torch.Tensor, attn_mask: torch.Tensor | None) -> torch.Tensor:
    """Blocks masked scores with ``-inf`` (boolean mask) or adds a float mask."""
    if attn_mask is None:
        return scores
    if attn_mask.dtype == torch.bool:
        return torch.where(attn_mask, scores, float("-inf"))
    return scores + attn_mask


def masked_softmax(scores: torch.Tensor) -> torch.Tensor:
    """Softmax over the keys (last dim); rows with every key at ``-inf`` become all zeros.

    The empty rows are set to 0 *before* the softmax too, so neither the values nor the
    gradients ever see a NaN.
    """
    empty = torch.isneginf(scores).all(dim=-1, keepdim=True)
    probs = torch.softmax(scores.masked_fill(empty, 0.0), dim=-1)
    return probs.masked_fill(empty, 0.0)


class Attention(NamedTuple):
    """What attention returns: the output, the weights, and (for a KV cache) the keys and values."""

    output: torch.Tensor
    weights: torch.Tensor
    keys: torch.Tensor | None = None
    values: torch.Tensor | None = None


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    *,
    dropout_p: float = 0.0,
    scale: float | None = None,
) -> Attention:
    """``softmax(q k^T / sqrt(d_k) + mask) v`` with dropout on the weights.

    Shapes: q ``(..., Lq, d)``, k ``(..., Lk, d)``, v ``(..., Lk, dv)``, mask broadcastable
    to ``(..., Lq, Lk)``; returns output ``(..., Lq, dv)`` and weights ``(..., Lq, Lk)``.
    """
    weights = masked_softmax(apply_mask(attention_scores(q, k, scale), attn_mask))
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p, training=True)
    return Attention(weights @ v, weights)


def combine_masks(attn_mask: torch.Tensor | None, allowed: torch.Tensor | None) -> torch.Tensor | None:
    """Combines a user mask (bool or float) with a boolean ``allowed`` mask such as a causal one."""
    if allowed is None or attn_mask is None:
        return attn_mask if allowed is None else allowed
    if attn_mask.dtype == torch.bool:
        return attn_mask & allowed
    return attn_mask.masked_fill(~allowed, float("-inf"))


# --------------------------------------------------------------------------------------
# Multi-head attention
# --------------------------------------------------------------------------------------


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """``(..., seq, heads * head_dim) -> (..., heads, seq, head_dim)``.

    The transpose matters: a plain ``view`` to the target shape has the right shape but
    mixes positions and features of different tokens into one head.
    """
    return x.unflatten(-1, (num_heads, -1)).transpose(-3, -2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """``(..., heads, seq, head_dim) -> (..., seq, heads * head_dim)``, head 0's features first."""
    return x.transpose(-3, -2).flatten(-2)


@dataclass
class AttentionWeights:
    """The projections of (multi-head) self-attention, in ``nn.Linear`` layout.

    ``w_out`` is None for attention without an output projection (a single head, or
    heads that are only concatenated, as in a wrapper of single heads).
    """

    w_query: torch.Tensor
    w_key: torch.Tensor
    w_value: torch.Tensor
    b_query: torch.Tensor | None = None
    b_key: torch.Tensor | None = None
    b_value: torch.Tensor | None = None
    w_out: torch.Tensor | None = None
    b_out: torch.Tensor | None = None

    def tensors(self) -> dict[str, torch.Tensor]:
        """The weights that are present, by field name."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def map(self, fn) -> AttentionWeights:
        """A copy with ``fn`` applied to every present tensor."""
        return replace(self, **{name: fn(t) for name, t in self.tensors().items()})


def multi_head_attention(
    x: torch.Tensor,
    weights: AttentionWeights,
    num_heads: int,
    *,
    attn_mask: torch.Tensor | None = None,
    causal: bool = False,
    dropout_p: float = 0.0,
    scale: float | None = None,
    past: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> Attention:
    """Multi-head self-attention of ``x`` ``(..., seq, d_in)``.

    Projects to queries, keys and values, splits them into ``num_heads`` heads, attends in
    each head with scores scaled by ``1/sqrt(head_dim)``, merges the heads and applies the
    output projection when there is one. ``past`` holds cached keys and values
    ``(..., heads, past_len, head_dim)`` from earlier tokens; the returned ``keys`` and
    ``values`` include them, ready for the next step. The weights come back as
    ``(..., heads, seq, past_len + seq)``.
    """
    q = split_heads(F.linear(x, weights.w_query, weights.b_query), num_heads)
    k = split_heads(F.linear(x, weights.w_key, weights.b_key), num_heads)
    v = split_heads(F.linear(x, weights.w_value, weights.b_value), num_heads)
    if past is not None:
        k = torch.cat([past[0], k], dim=-2)
        v = torch.cat([past[1], v], dim=-2)
    allowed = causal_mask(q.shape[-2], k.shape[-2], device=x.device) if causal else None
    heads = scaled_dot_product_attention(
        q, k, v, combine_masks(attn_mask, allowed), dropout_p=dropout_p, scale=scale
    )
    out = merge_heads(heads.output)
    if weights.w_out is not None:
        out = F.linear(out, weights.w_out, weights.b_out)
    return Attention(out, heads.weights, k, v)
