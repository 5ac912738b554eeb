"""The course's minGPT of assignment 04, in the notebook's API (a KV cache is a dict per block
with ``"k"`` and ``"v"``), built on the reference: an item that builds on a wrong earlier
answer (the block on the attention, GPT on the block, generation on GPT) is graded with these
in its place, so that one mistake costs points once (see :mod:`autograder.running.harness`).

Names a student's code looks up when it runs (``generate_tokens``, ``generate_with_cache``,
``MultiHeadSelfAttention`` inside ``Block``) resolve to the student's own unless the grader
stands in for them too.
"""

import torch
from torch import nn

from transformer_lm.instructor import reference


class MultiHeadSelfAttention(reference.MultiHeadSelfAttention):
    def __init__(self, config):
        super().__init__(config)
        self.verbose = False
        self.last_att = None

    def forward(self, x, kv_cache=None):
        past = (kv_cache["k"], kv_cache["v"]) if kv_cache else None
        att = super().forward(x, past)
        if kv_cache is not None:
            kv_cache["k"], kv_cache["v"] = att.keys, att.values
        self.last_att = att.weights.detach()
        return att.output


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln1 = nn.LayerNorm(config.n_embd)
        self.attn = MultiHeadSelfAttention(config)
        self.ln2 = nn.LayerNorm(config.n_embd)
        self.mlp = nn.Sequential(nn.Linear(config.n_embd, 4 * config.n_embd), nn.GELU(),
                                 nn.Linear(4 * config.n_embd, config.n_embd), nn.Dropout(config.resid_pdrop))

    def forward(self, x, kv_cache=None):
        x = x + self.attn(self.ln1(x), kv_cache)
        return x + self.mlp(self.ln2(x))


class GPT(reference.GPT):
    """The reference GPT (its own blocks: whenever GPT is stood in for, so are the block and the
    attention it builds on), with the notebook's cache: one dict of keys and values per block."""

    def forward(self, idx, targets=None, kv_cache=None):
        cache = None if kv_cache is None else [(slot["k"], slot["v"]) for slot in kv_cache if slot]
        logits, loss = super().forward(idx, targets, cache)
        for slot, (keys, values) in zip(kv_cache or [], cache or []):
            slot["k"], slot["v"] = keys, values
        return logits, loss

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, use_cache=False):
        if use_cache:
            return generate_with_cache(self, idx, max_new_tokens, temperature, top_k)  # noqa: F821 - the student's
        return generate_tokens(self, idx, max_new_tokens, temperature, top_k)


sample_next_token = reference.sample_next_token


def generate_tokens(model, idx, max_new_tokens, temperature=1.0, top_k=None):
    for _ in range(max_new_tokens):
        logits, _ = model(idx[:, -model.config.block_size:])
        idx = torch.cat([idx, sample_next_token(logits[:, -1, :], temperature, top_k)], dim=1)
    return idx
