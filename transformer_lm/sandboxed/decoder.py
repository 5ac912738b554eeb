"""A small decoder in the shape of Llama's, built on whichever attention layer it is given: the
model that assignment 06's generation runs, with the student's ``GroupedQueryAttention`` in the
notebook and the grader's sandbox, and with the reference's in the trusted checks. It imports
only torch, so it runs in both places.

Each block: RMSNorm, attention, residual; RMSNorm, a SwiGLU feed-forward layer, residual. The
attention layer is called as ``attention(x, positions, attn_mask, cache) -> (output, cache)``.

The checks of generation with a KV cache run two variants of it (:class:`StepMarkedDecoder` on both
sides, :class:`CacheOnlyDecoder` handed to the answer).
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
        return self.decode(self.embed(idx), positions, attn_mask, caches)

    def decode(self, x, positions, attn_mask=None, caches=None):
        """The blocks, the final norm and the head on the embeddings ``x`` ``(B, T, d_model)``."""
        caches = caches or [None] * len(self.blocks)
        new_caches = []
        for layer, layer_cache in zip(self.blocks, caches):
            x, layer_cache = layer(x, positions, attn_mask, layer_cache)
            new_caches.append(layer_cache)
        return self.head(self.norm(x)), new_caches


class StepMarkedDecoder(TinyDecoder):
    """A :class:`TinyDecoder` whose calls differ, so that only a generation that keeps its KV cache
    gets the tokens the checks expect. A call without caches (the prompt) runs as TinyDecoder does;
    the n-th call after it adds ``step_marks[n - 1]`` (random, drawn by the check) to the embeddings
    of its tokens. A generation that keeps its caches gives each token the mark of the call that
    first ran it, whether its prompt runs alone or in a padded batch. One that runs the whole
    sequence again, by any route (this model without caches, a plain TinyDecoder with these
    weights, the blocks called one by one), embeds the earlier new tokens without their marks and
    so computes other keys and values for them."""

    def __init__(self, config: DecoderConfig, attention: type, steps: int):
        super().__init__(config, attention)
        self.step_marks = nn.Parameter(torch.zeros(steps, config.d_model))
        self.step = 0   # calls since the last call without caches

    def forward(self, idx, positions, attn_mask=None, caches=None):
        self.step = self.step + 1 if caches else 0
        x = self.embed(idx)                                             # (B, T, d_model)
        if self.step:
            x = x + self.step_marks[self.step - 1]
        return self.decode(x, positions, attn_mask, caches)


class Refused(Exception):
    """A call of :class:`CacheOnlyDecoder` that generation with a KV cache never makes. ``reason``
    says which: ``"again"`` (a call without caches after the prompt's), ``"positions"`` (several new
    positions in one call) or ``"steps"`` (more calls after the prompt's than new tokens)."""

    def __init__(self, reason: str):
        super().__init__(f"The model refused this call ({reason}): it runs the whole prompts once, then one new "
                         "token per call with the caches of the call before.")
        self.reason = reason


class CacheOnlyDecoder(StepMarkedDecoder):
    """The model a generation check hands to the answer: it runs the whole (padded) prompts once,
    then one new position per call with caches, at most ``steps`` calls after it, and raises
    :class:`Refused` for any other call before running it. The refusal only names the mistake:
    code in the same process can step around it (patch this class, run the blocks itself), and
    :class:`StepMarkedDecoder`'s marks are what make such a generation's tokens wrong."""

    def __init__(self, config: DecoderConfig, attention: type, steps: int):
        super().__init__(config, attention, steps)
        self.calls = 0

    def forward(self, idx, positions, attn_mask=None, caches=None):
        reason = self.refusal(idx, caches)
        if reason:
            raise Refused(reason)
        self.calls += 1
        return super().forward(idx, positions, attn_mask, caches)

    def refusal(self, idx, caches) -> str | None:
        """The reason (:class:`Refused`) to refuse a call on ``idx`` with ``caches``, or None."""
        if not self.calls:
            return None
        if not caches:
            return "again"
        if idx.shape[-1] != 1:
            return "positions"
        return "steps" if self.step >= len(self.step_marks) else None


def layer_arguments(inputs: dict[str, torch.Tensor]) -> tuple:
    """The arguments of a decoder layer's ``forward(x, positions, attn_mask=None, cache=None)``
    from ``inputs`` named ``x``, ``positions`` and, where the call has them, ``attn_mask``,
    ``cache_keys`` and ``cache_values`` (the cache is the pair of the two)."""
    cache = (inputs["cache_keys"], inputs["cache_values"]) if "cache_keys" in inputs else None
    return inputs["x"], inputs["positions"], inputs.get("attn_mask"), cache
