"""The course's one correct implementation of every concept it teaches.

Checks, hints, hidden grading and the mistake catalog all compute their expected values
here, so a fix in this file fixes every place that grades against it. The code favours
plain tensor operations that a student can read line by line over speed.

Conventions, the same as PyTorch's own ``F.scaled_dot_product_attention``:

* tensors are ``(..., seq, features)``; heads sit just before ``seq``: ``(..., heads, seq, head_dim)``;
* a boolean ``attn_mask`` is True where a query *may* attend to a key;
* a float ``attn_mask`` is *added* to the scores (``-inf`` blocks, ``0`` keeps);
* linear weights use ``nn.Linear``'s layout ``(out_features, in_features)``: ``y = x @ W.T + b``.

A query row whose keys are all masked gets zero weights and a zero output, never NaN (such rows
appear with left padding), as ``F.scaled_dot_product_attention`` of torch 2.13 gives on the CPU;
a softmax written as ``exp / sum`` gives NaN there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import NamedTuple

import torch
import torch.nn as nn
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


# --------------------------------------------------------------------------------------
# minGPT: attention module, block, model, generation with a KV cache
# --------------------------------------------------------------------------------------


@dataclass
class GPTConfig:
    """Sizes of a minGPT-style model. The defaults are the minGPT attention exercise's."""

    vocab_size: int = 11
    block_size: int = 5
    n_layer: int = 1
    n_head: int = 4
    n_embd: int = 12
    attn_pdrop: float = 0.0
    resid_pdrop: float = 0.0
    embd_pdrop: float = 0.0
    ff_dim: int | None = None  # width of the feed-forward layer; None means 4 * n_embd
    activation: str = "gelu"  # "gelu" as in GPT, or "relu" as in nn.TransformerEncoderLayer's default
    norm_first: bool = True  # pre-norm as in GPT-2; False gives the original post-norm layer


class MultiHeadSelfAttention(nn.Module):
    """minGPT's causal multi-head self-attention, with the member names of minGPT."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        if config.n_embd % config.n_head:
            raise ValueError(f"n_embd={config.n_embd} is not divisible by n_head={config.n_head}")
        self.key = nn.Linear(config.n_embd, config.n_embd)
        self.query = nn.Linear(config.n_embd, config.n_embd)
        self.value = nn.Linear(config.n_embd, config.n_embd)
        self.attn_drop = nn.Dropout(config.attn_pdrop)
        self.resid_drop = nn.Dropout(config.resid_pdrop)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        block = torch.tril(torch.ones(config.block_size, config.block_size))
        self.register_buffer("mask", block.view(1, 1, config.block_size, config.block_size))
        self.n_head = config.n_head

    def attention_weights(self) -> AttentionWeights:
        return AttentionWeights(
            self.query.weight, self.key.weight, self.value.weight,
            self.query.bias, self.key.bias, self.value.bias,
            self.proj.weight, self.proj.bias,
        )

    def forward(self, x: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None = None) -> Attention:
        """``x`` ``(B, T, C)`` -> Attention with output ``(B, T, C)`` and keys/values for a cache."""
        past_len = 0 if past is None else past[0].shape[-2]
        seq = x.shape[-2]
        allowed = self.mask[0, 0, past_len:past_len + seq, :past_len + seq].bool()
        att = multi_head_attention(
            x, self.attention_weights(), self.n_head, attn_mask=allowed, past=past,
            dropout_p=self.attn_drop.p if self.training else 0.0,
        )
        return att._replace(output=self.resid_drop(att.output))


class Block(nn.Module):
    """A transformer decoder block: causal self-attention and a feed-forward network, each
    with a residual connection and a LayerNorm (before the sublayer when ``norm_first``,
    after the residual sum otherwise, as in ``nn.TransformerEncoderLayer``)."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        ff_dim = config.ff_dim or 4 * config.n_embd
        activation = {"gelu": nn.GELU(), "relu": nn.ReLU()}[config.activation]
        self.ln1 = nn.LayerNorm(config.n_embd)
        self.attn = MultiHeadSelfAttention(config)
        self.ln2 = nn.LayerNorm(config.n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(config.n_embd, ff_dim),
            activation,
            nn.Linear(ff_dim, config.n_embd),
            nn.Dropout(config.resid_pdrop),
        )
        self.norm_first = config.norm_first

    def forward(self, x: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None = None):
        """``(B, T, C) -> (B, T, C)``, and the block's keys and values for a cache."""
        if self.norm_first:
            att = self.attn(self.ln1(x), past)
            x = x + att.output
            x = x + self.mlp(self.ln2(x))
        else:
            att = self.attn(x, past)
            x = self.ln1(x + att.output)
            x = self.ln2(x + self.mlp(x))
        return x, (att.keys, att.values)


class GPT(nn.Module):
    """A minGPT-style language model: token and position embeddings, blocks, a final
    LayerNorm and a linear head to the vocabulary."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.n_embd)
        self.pos_emb = nn.Parameter(torch.zeros(1, config.block_size, config.n_embd))
        self.drop = nn.Dropout(config.embd_pdrop)
        self.blocks = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        """GPT-2's initialisation: small normal weights, zero biases."""
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def position_embeddings(self, start: int, length: int) -> torch.Tensor:
        """The embeddings ``(1, length, C)`` of positions ``start .. start + length - 1``: with a KV
        cache, the new tokens come after the ``start`` cached ones."""
        return self.pos_emb[:, start:start + length]

    def context_window(self, idx: torch.Tensor) -> torch.Tensor:
        """What the model reads of ``idx`` ``(B, T)``: its last ``block_size`` tokens."""
        return idx[:, -self.config.block_size:]

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None, cache: list | None = None):
        """``idx`` ``(B, T)`` token ids -> logits ``(B, T, vocab)`` and the mean cross-entropy
        against ``targets`` (None without targets; target -1 is ignored).

        With ``cache`` (a list, empty at the start), each block's keys and values are kept
        there, and ``idx`` holds only the tokens that follow the cached ones.
        """
        past_len = cache[0][0].shape[-2] if cache else 0
        seq = idx.shape[1]
        if past_len + seq > self.config.block_size:
            raise ValueError(f"{past_len + seq} tokens do not fit block_size={self.config.block_size}")
        x = self.drop(self.tok_emb(idx) + self.position_embeddings(past_len, seq))
        pasts = list(cache) if cache else [None] * len(self.blocks)
        presents = []
        for block, past in zip(self.blocks, pasts):
            x, present = block(x, past)
            presents.append(present)
        if cache is not None:
            cache[:] = presents
        logits = self.head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-1)
        return logits, loss

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
                 top_k: int | None = None, use_cache: bool = False) -> torch.Tensor:
        """Appends ``max_new_tokens`` tokens to ``idx`` ``(B, T)``, each sampled from the
        softmax of the last logits divided by ``temperature``, among the ``top_k`` most
        likely when given (``top_k=1`` is greedy decoding). The context is cropped to the
        last ``block_size`` tokens. With ``use_cache`` the keys and values of earlier
        tokens are reused; when the context no longer fits, the cache restarts from the
        cropped context, so tokens equal those made without the cache.
        """
        cache: list = []
        for _ in range(max_new_tokens):
            context = self.context_window(idx)
            cached_len = cache[0][0].shape[-2] if cache else 0
            if not use_cache or cached_len + 1 > self.config.block_size or cached_len == 0:
                cache = []
                logits, _ = self(context, cache=cache if use_cache else None)
            else:
                logits, _ = self(idx[:, -1:], cache=cache)
            idx = torch.cat([idx, sample_next_token(logits[:, -1, :], temperature, top_k)], dim=1)
        return idx


def sampling_probabilities(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None) -> torch.Tensor:
    """The distribution a token is drawn from, per row of ``logits`` ``(B, vocab)``: the softmax of
    ``logits / temperature`` over the ``top_k`` largest logits of the row (all of them without
    ``top_k``); the others get probability 0."""
    logits = logits / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, [-1]]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.softmax(logits, dim=-1)


def sample_next_token(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None) -> torch.Tensor:
    """Draws one token id per row of ``logits`` ``(B, vocab)`` -> ``(B, 1)``."""
    if top_k == 1:
        return logits.argmax(dim=-1, keepdim=True)
    return torch.multinomial(sampling_probabilities(logits, temperature, top_k), num_samples=1)


# --------------------------------------------------------------------------------------
# Attention that fits in memory: online softmax, tiled forward and backward (FlashAttention)
# --------------------------------------------------------------------------------------


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


def online_softmax(scores: torch.Tensor, block: int) -> torch.Tensor:
    """The softmax over the last dimension of ``scores`` ``(..., n)``, its stats gathered ``block``
    scores at a time, as a tiled attention does (it never needs a whole row at once)."""
    stats = softmax_stats(scores[..., :block])
    for start in range(block, scores.shape[-1], block):
        stats = merge_softmax_stats(stats, softmax_stats(scores[..., start:start + block]))
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


# --------------------------------------------------------------------------------------
# Attention in today's decoders (assignment 06): rotary positions, grouped-query attention,
# sliding windows, left-padded batches, and what the KV cache costs
# --------------------------------------------------------------------------------------


def rope_inverse_frequencies(head_dim: int, base: float = 10000.0) -> torch.Tensor:
    """``base ** (-2i / head_dim)`` for ``i = 0 .. head_dim / 2 - 1``, in float64: how many radians
    pair ``i`` turns per position (the first pair fastest, the last about ``1 / base`` as fast)."""
    if head_dim % 2:
        raise ValueError(f"rotary embeddings rotate pairs of features; head_dim={head_dim} is odd")
    return base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``(x1, x2) -> (-x2, x1)`` on the two halves of the last dimension: a quarter turn of every
    pair ``(x[i], x[i + d/2])``."""
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def rope_cos_sin(positions: torch.Tensor, head_dim: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Cosines and sines of every position's angles, ``(..., T, head_dim)``, each angle repeated for
    both halves (``positions`` ``(..., T)``), computed in float64."""
    angles = positions.to(torch.float64).unsqueeze(-1) * rope_inverse_frequencies(head_dim, base)  # (..., T, d/2)
    angles = torch.cat((angles, angles), dim=-1)                                                  # (..., T, d)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotary position embedding in the half-split convention of Llama: each pair of features
    ``(x[i], x[i + d/2])`` of a token at position ``p`` turns by ``p * base ** (-2i / d)``.
    ``x`` ``(B, H, T, d)`` (or ``(..., T, d)``); ``positions`` ``(T,)``, or ``(B, T)`` when every
    sequence has its own (left padding). The score of a query at ``m`` and a key at ``n`` then
    depends on ``m - n`` only."""
    cos, sin = rope_cos_sin(positions, x.shape[-1], base)
    if positions.dim() == 2 and x.dim() == 4:   # one row of positions per sequence, shared by the heads
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return x * cos.to(x.dtype) + rotate_half(x) * sin.to(x.dtype)


def repeat_kv(x: torch.Tensor, repeats: int) -> torch.Tensor:
    """``(B, n_kv_heads, T, d) -> (B, n_kv_heads * repeats, T, d)``: key/value head ``j`` serves the
    ``repeats`` consecutive query heads ``j * repeats .. (j + 1) * repeats - 1``."""
    return x.repeat_interleave(repeats, dim=-3)


def sliding_window_mask(query_len: int, key_len: int | None = None, *, window: int, device=None) -> torch.Tensor:
    """Boolean ``(query_len, key_len)``, True where a query may look at a key: causal, and at most
    ``window`` keys, itself included (queries are the last ``query_len`` of the keys, as in
    :func:`causal_mask`)."""
    key_len = query_len if key_len is None else key_len
    ones = torch.ones(query_len, key_len, dtype=torch.bool, device=device)
    return torch.tril(ones, diagonal=key_len - query_len) & torch.triu(ones, diagonal=key_len - query_len - window + 1)


def left_padded_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """The positions of a left-padded batch, ``(B, T)`` from its mask (1 for a real token, 0 for
    padding): each prompt's first real token is at position 0 (padding gets 0 as well)."""
    return (attention_mask.long().cumsum(dim=-1) - 1).clamp(min=0)


def padded_causal_mask(attention_mask: torch.Tensor, query_len: int | None = None) -> torch.Tensor:
    """``(B, 1, query_len, T_k)``, True where a query may look at a key: causal, and never at
    padding. ``attention_mask`` ``(B, T_k)`` covers every key so far (the cache's and the new
    ones'); the queries are the last ``query_len`` of them."""
    key_len = attention_mask.shape[-1]
    causal = causal_mask(key_len if query_len is None else query_len, key_len, device=attention_mask.device)
    return causal & attention_mask.bool()[:, None, None, :]


class GroupedQueryAttention(nn.Module):
    """Causal self-attention of today's decoders: ``n_heads`` query heads share ``n_kv_heads``
    key/value heads (``n_kv_heads == n_heads``: multi-head; 1: multi-query), with rotary position
    embeddings on queries and keys and no biases, as in Llama (the layer names are Llama's), and,
    with ``window``, each query seeing at most ``window`` keys, as in Mistral."""

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, head_dim: int | None = None,
                 rope_base: float = 10000.0, window: int | None = None):
        super().__init__()
        if n_heads % n_kv_heads:
            raise ValueError(f"n_heads={n_heads} is not a multiple of n_kv_heads={n_kv_heads}")
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        self.head_dim = head_dim or d_model // n_heads
        self.rope_base, self.window = rope_base, window
        self.q_proj = nn.Linear(d_model, n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(n_heads * self.head_dim, d_model, bias=False)

    def causal_mask(self, query_len: int, key_len: int, device=None) -> torch.Tensor:
        """The mask when none is given: causal, within the sliding window if the layer has one."""
        if self.window is None:
            return causal_mask(query_len, key_len, device=device)
        return sliding_window_mask(query_len, key_len, window=self.window, device=device)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, attn_mask: torch.Tensor | None = None,
                cache: tuple[torch.Tensor, torch.Tensor] | None = None):
        """``x`` ``(B, T, d_model)`` at ``positions`` ``(T,)`` or ``(B, T)``; ``attn_mask`` boolean,
        broadcastable to ``(B, 1, T, T_k)`` (:meth:`causal_mask` when None); ``cache``: the rotated keys and the
        values of the earlier tokens, ``(B, n_kv_heads, T_past, head_dim)`` each. Returns the output
        ``(B, T, d_model)`` and the keys and values so far, for the cache."""
        q = apply_rope(split_heads(self.q_proj(x), self.n_heads), positions, self.rope_base)     # (B, H, T, hd)
        k = apply_rope(split_heads(self.k_proj(x), self.n_kv_heads), positions, self.rope_base)  # (B, KV, T, hd)
        v = split_heads(self.v_proj(x), self.n_kv_heads)                                         # (B, KV, T, hd)
        if cache is not None:
            k, v = torch.cat((cache[0], k), dim=-2), torch.cat((cache[1], v), dim=-2)
        if attn_mask is None:
            attn_mask = self.causal_mask(x.shape[-2], k.shape[-2], device=x.device)
        repeats = self.n_heads // self.n_kv_heads
        out = scaled_dot_product_attention(q, repeat_kv(k, repeats), repeat_kv(v, repeats), attn_mask).output
        return self.o_proj(merge_heads(out)), (k, v)


def kv_cache_bytes(n_layers: int, n_kv_heads: int, head_dim: int, seq_len: int, batch: int = 1,
                   dtype: torch.dtype = torch.bfloat16) -> int:
    """Bytes a KV cache holds: a key and a value vector per layer, key/value head and token of
    every sequence."""
    return 2 * n_layers * n_kv_heads * head_dim * seq_len * batch * torch.empty((), dtype=dtype).element_size()


def left_pad(prompts: list[list[int]], pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts of different lengths as one batch, padded on the left: the token ids ``(B, T)`` and
    the attention mask ``(B, T)``, 1 for a real token and 0 for padding. (Left, so that every
    prompt's next token comes at the same place, the end.)"""
    longest = max(len(prompt) for prompt in prompts)
    idx = torch.tensor([[pad_id] * (longest - len(p)) + list(p) for p in prompts], dtype=torch.long)
    mask = torch.tensor([[0] * (longest - len(p)) + [1] * len(p) for p in prompts], dtype=torch.long)
    return idx, mask


def padded_inputs(attention_mask: torch.Tensor, query_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The positions ``(B, query_len)`` and the mask ``(B, 1, query_len, T_k)`` of the last
    ``query_len`` tokens of a left-padded batch whose ``attention_mask`` covers every token so far."""
    return left_padded_positions(attention_mask)[:, -query_len:], padded_causal_mask(attention_mask, query_len)


@torch.no_grad()
def generate_padded(model: nn.Module, prompts: list[list[int]], max_new_tokens: int, pad_id: int = 0,
                    inputs=padded_inputs) -> list[list[int]]:
    """Greedy generation for prompts of different lengths in one left-padded batch with a KV cache:
    each prompt followed by ``max_new_tokens`` tokens, the same as generating it alone.
    ``model(idx, positions, attn_mask, caches) -> (logits, caches)``; ``inputs(attention_mask,
    query_len)`` gives the positions and the mask of each call (:func:`padded_inputs`)."""
    idx, attention_mask = left_pad(prompts, pad_id)
    logits, caches = model(idx, *inputs(attention_mask, idx.shape[-1]))
    new = []
    for step in range(max_new_tokens):
        token = logits[:, -1].argmax(dim=-1, keepdim=True)                  # (B, 1)
        new.append(token)
        if step + 1 < max_new_tokens:
            attention_mask = torch.cat([attention_mask, torch.ones_like(token)], dim=-1)
            logits, caches = model(token, *inputs(attention_mask, 1), caches)
    tokens = torch.cat(new, dim=-1) if new else idx[:, :0]
    return [list(prompt) + tokens[b].tolist() for b, prompt in enumerate(prompts)]
