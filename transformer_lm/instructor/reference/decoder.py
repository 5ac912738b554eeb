"""Attention in today's decoders (assignment 06): rotary position embeddings, grouped-query
attention (key/value heads shared by several query heads), sliding windows, left-padded batches
and their generation with a KV cache, and what that cache costs in memory.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from transformer_lm.instructor.reference.attention import (causal_mask, merge_heads, scaled_dot_product_attention,
                                                           split_heads)


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
