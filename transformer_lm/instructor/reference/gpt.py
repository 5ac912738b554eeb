"""minGPT: its causal multi-head self-attention module, the transformer block, the model, and
generation (sampling a token from the logits, and a KV cache that reuses earlier keys and values).

The attention module computes with :func:`~transformer_lm.instructor.reference.attention.multi_head_attention`
on its own weights, so the model attends exactly as the functions of assignments 01 to 03 do.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from transformer_lm.instructor.reference.attention import Attention, AttentionWeights, multi_head_attention


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

    def cache_is_full(self, cached: int) -> bool:
        """Whether a KV cache of ``cached`` tokens has no room for one more: generation then restarts it."""
        return cached + 1 > self.config.block_size

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
            if not use_cache or self.cache_is_full(cached_len) or cached_len == 0:
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
