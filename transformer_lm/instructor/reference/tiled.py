"""Attention that fits in memory: the online softmax (a row's softmax from stats gathered block by
block), and tiled attention forward and backward, as FlashAttention computes it, which never holds
more than a tile of scores and recomputes the weights for the gradients from each query's
log-sum-exp.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from transformer_lm.instructor.reference.attention import attention_scores


class SoftmaxStats(NamedTuple):
    """What the softmax of a row needs from the scores seen so far: their maximum, and the sum of
    ``exp(score - maximum)``. ``log-sum-exp = maximum + log(total)``."""

    maximum: torch.Tensor
    total: torch.Tensor


def softmax_stats(scores: torch.Tensor) -> SoftmaxStats:
    """The stats of each row of ``scores`` ``(..., n)``; a row of ``-inf`` has maximum ``-inf``, total 0."""
    maximum = scores.amax(dim=-1)
    finite = torch.where(torch.isneginf(maximum), 0.0, maximum)
    return SoftmaxStats(maximum, torch.exp(scores - finite.unsqueeze(-1)).sum(dim=-1))


def rescale(maximum: torch.Tensor, new_maximum: torch.Tensor) -> torch.Tensor:
    """``exp(maximum - new_maximum)``: what a total (or an output) summed under ``maximum`` is
    multiplied by when the running maximum becomes ``new_maximum``; 0 where nothing was seen yet."""
    return torch.where(torch.isneginf(maximum), 0.0, torch.exp(maximum - new_maximum))


def merge_softmax_stats(a: SoftmaxStats, b: SoftmaxStats) -> SoftmaxStats:
    """The stats of two parts of a row, merged: each total rescaled to the larger maximum."""
    maximum = torch.maximum(a.maximum, b.maximum)
    return SoftmaxStats(maximum, a.total * rescale(a.maximum, maximum) + b.total * rescale(b.maximum, maximum))


def streamed_stats(blocks) -> SoftmaxStats:
    """The stats of each row of scores handed over as ``blocks`` (an iterable of ``(..., b)``
    tensors), each read once and folded in: nothing longer than a block is ever held."""
    stats = SoftmaxStats(torch.tensor(float("-inf")), torch.tensor(0.0))   # nothing seen yet; broadcasts
    for block in blocks:
        stats = merge_softmax_stats(stats, softmax_stats(block))
    return stats


def online_softmax(scores: torch.Tensor, block: int) -> torch.Tensor:
    """The softmax over the last dimension of ``scores`` ``(..., n)``, its stats gathered ``block``
    scores at a time, as a tiled attention does (it never needs a whole row at once)."""
    stats = streamed_stats(scores.split(block, dim=-1))
    return torch.exp(scores - stats.maximum.unsqueeze(-1)) / stats.total.unsqueeze(-1)


def key_blocks(query_start: int, query_stop: int, keys: int, block_k: int, causal: bool) -> range:
    """The starts of the key blocks that queries ``query_start .. query_stop - 1`` may see: all of
    them, or, under a causal mask (queries and keys aligned at the start), those not entirely in
    the future of the block's last query."""
    stop = min(keys, query_stop) if causal else keys
    return range(0, stop, block_k)


def tile_scores(qb: torch.Tensor, kb: torch.Tensor, query_start: int, key_start: int, causal: bool) -> torch.Tensor:
    """The scaled scores of one tile ``(..., block_q, block_k)``, with the keys in each query's
    future at ``-inf`` under a causal mask (queries and keys aligned at the start)."""
    scores = attention_scores(qb, kb)
    if causal:
        rows = torch.arange(query_start, query_start + qb.shape[-2], device=qb.device).unsqueeze(-1)
        cols = torch.arange(key_start, key_start + kb.shape[-2], device=qb.device)
        scores = scores.masked_fill(cols > rows, float("-inf"))
    return scores


def flash_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, block_q: int = 16,
                  block_k: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention ``softmax(q k^T / sqrt(d)) v`` tile by tile, never holding more than a
    ``(block_q, block_k)`` tile of scores per (batch, head): q ``(..., T_q, d)``, k ``(..., T_k, d)``,
    v ``(..., T_k, d_v)``. Returns the output ``(..., T_q, d_v)`` and each query's log-sum-exp
    ``(..., T_q)``, which is all the backward pass needs to recompute the weights."""
    out = q.new_empty(*q.shape[:-1], v.shape[-1])
    lse = q.new_empty(q.shape[:-1])
    for qs in range(0, q.shape[-2], block_q):
        qb = q[..., qs:qs + block_q, :]
        acc = q.new_zeros(*qb.shape[:-1], v.shape[-1])
        stats = SoftmaxStats(q.new_full(qb.shape[:-1], float("-inf")), q.new_zeros(qb.shape[:-1]))
        for ks in key_blocks(qs, qs + qb.shape[-2], k.shape[-2], block_k, causal):
            scores = tile_scores(qb, k[..., ks:ks + block_k, :], qs, ks, causal)  # (..., bq, bk)
            merged = merge_softmax_stats(stats, softmax_stats(scores))
            finite = torch.where(torch.isneginf(merged.maximum), 0.0, merged.maximum).unsqueeze(-1)
            acc = acc * rescale(stats.maximum, merged.maximum).unsqueeze(-1) \
                + torch.exp(scores - finite) @ v[..., ks:ks + block_k, :]
            stats = merged
        out[..., qs:qs + block_q, :] = acc / stats.total.unsqueeze(-1)
        lse[..., qs:qs + block_q] = stats.maximum + torch.log(stats.total)
    return out, lse


def flash_backward(q, k, v, out, lse, grad_out, causal: bool = False, block_q: int = 16, block_k: int = 16):
    """The gradients of :func:`flash_forward` with respect to q, k and v, recomputing each tile's
    weights from the log-sum-exp (``P = exp(S - lse)``) instead of storing them; with
    ``D = rowsum(dO * O)``, ``dS = P * (dO V^T - D)``."""
    scale = 1.0 / math.sqrt(q.shape[-1])  # of the scores, so of their gradients
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    delta = (grad_out * out).sum(dim=-1)  # (..., T_q): D
    for qs in range(0, q.shape[-2], block_q):
        qb, dob = q[..., qs:qs + block_q, :], grad_out[..., qs:qs + block_q, :]
        for ks in key_blocks(qs, qs + qb.shape[-2], k.shape[-2], block_k, causal):
            kb, vb = k[..., ks:ks + block_k, :], v[..., ks:ks + block_k, :]
            scores = tile_scores(qb, kb, qs, ks, causal)
            probs = torch.exp(scores - lse[..., qs:qs + block_q].unsqueeze(-1))  # (..., bq, bk)
            dv[..., ks:ks + block_k, :] += probs.transpose(-2, -1) @ dob
            dscores = probs * (dob @ vb.transpose(-2, -1) - delta[..., qs:qs + block_q].unsqueeze(-1))
            dq[..., qs:qs + block_q, :] += (dscores @ kb) * scale
            dk[..., ks:ks + block_k, :] += (dscores.transpose(-2, -1) @ qb) * scale
    return dq, dk, dv


class FlashAttention(torch.autograd.Function):
    """Tiled attention with a backward pass by recomputation: it saves only q, k, v, the output
    and the log-sum-exp."""

    @staticmethod
    def forward(ctx, q, k, v, causal=False, block_q=16, block_k=16):
        out, lse = flash_forward(q, k, v, causal, block_q, block_k)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.options = (causal, block_q, block_k)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        return (*flash_backward(q, k, v, out, lse, grad_out, *ctx.options), None, None, None)
