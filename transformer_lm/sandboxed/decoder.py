"""A small decoder in the shape of Llama's, built on whichever attention layer it is given: the
model that assignment 06's generation runs, with the student's ``GroupedQueryAttention`` in the
notebook and the grader's sandbox, and with the reference's in the trusted checks. It imports
only torch, so it runs in both places.

Each block: RMSNorm, attention, residual; RMSNorm, a SwiGLU feed-forward layer, residual. The
attention layer is called as ``attention(x, positions, attn_mask, cache) -> (output, cache)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class DecoderConfig:
    vocab_size: int = 16
    d_model: int = 16
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    ff_dim: int = 32
    rope_base: float = 10000.0


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x^2) + eps) * weight``: LayerNorm without the mean and the bias."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight


class DecoderBlock(nn.Module):
    def __init__(self, config: DecoderConfig, attention: type):
        super().__init__()
        self.attention_norm = RMSNorm(config.d_model)
        self.attention = attention(config.d_model, config.n_heads, config.n_kv_heads, rope_base=config.rope_base)
        self.mlp_norm = RMSNorm(config.d_model)
        self.gate_proj = nn.Linear(config.d_model, config.ff_dim, bias=False)
        self.up_proj = nn.Linear(config.d_model, config.ff_dim, bias=False)
        self.down_proj = nn.Linear(config.ff_dim, config.d_model, bias=False)

    def forward(self, x, positions, attn_mask=None, cache=None):
        attended, cache = self.attention(self.attention_norm(x), positions, attn_mask, cache)
        x = x + attended
        h = self.mlp_norm(x)
        return x + self.down_proj(nn.functional.silu(self.gate_proj(h)) * self.up_proj(h)), cache


class TinyDecoder(nn.Module):
    """Token embeddings (no position embeddings: the attention rotates queries and keys), blocks,
    a final RMSNorm and a linear head. ``forward(idx, positions, attn_mask=None, caches=None)``
    returns the logits ``(B, T, vocab_size)`` and one cache per block."""

    def __init__(self, config: DecoderConfig, attention: type):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList([DecoderBlock(config, attention) for _ in range(config.n_layers)])
        self.norm = RMSNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)

    def forward(self, idx, positions, attn_mask=None, caches=None):
        x = self.embed(idx)                                             # (B, T, d_model)
        caches = caches or [None] * len(self.blocks)
        new_caches = []
        for layer, layer_cache in zip(self.blocks, caches):
            x, layer_cache = layer(x, positions, attn_mask, layer_cache)
            new_caches.append(layer_cache)
        return self.head(self.norm(x)), new_caches
