"""The visible checks of assignment 04 (minGPT): its groups of :mod:`transformer_lm.instructor.visible_checks`'
table, in a module of their own. Each case that only one hidden check has (a single token; dropout,
which the module must switch off in eval mode) has a visible case too, so that the notebook refuses and
names what the grader does."""

from __future__ import annotations

from dataclasses import asdict

import torch

from transformer_lm.instructor import adapters, mistakes, reference
from transformer_lm.instructor.cases import AttentionCase
from transformer_lm.instructor.gpt_kinds import CachedForwardCheck, GenerateCheck, LossCheck, sampling_check
from transformer_lm.instructor.kinds import ModuleCheck
from transformer_lm.instructor.visible_entries import Entry, attention_entries, entry, seeded

TINY_GPT = reference.GPTConfig(vocab_size=7, block_size=6, n_layer=2, n_head=2, n_embd=8)


def generation(call_kwargs: dict, sizes) -> list[Entry]:
    """Greedy generation from the tiny GPT (seed 7: weights under which the next token depends on
    the context), one check for each ``(batch, prompt, max_new_tokens)``."""
    options = "".join(f", {name}={value}" for name, value in call_kwargs.items())
    return [entry("GPT.generate", seeded(GenerateCheck("GPT", asdict(TINY_GPT), batch=batch, prompt=prompt,
                                                       max_new_tokens=new, call_kwargs=call_kwargs), 7),
                  f"generate(a prompt of {prompt} tokens, max_new_tokens={new}, top_k=1{options}) with "
                  f"block_size={TINY_GPT.block_size}")
            for batch, prompt, new in sizes]


def blocks() -> list[Entry]:
    """The Block on two heads, on one head with dropout (called twice: dropout left on shows), and
    on a single token (a squeezed output shows)."""
    generator = torch.Generator().manual_seed(2)
    made = []
    for config, shape in ((reference.GPTConfig(n_embd=8, n_head=2, block_size=6), (2, 5, 8)),
                          (reference.GPTConfig(n_embd=6, n_head=1, block_size=4, attn_pdrop=0.3, resid_pdrop=0.3),
                           (3, 4, 6)),
                          (reference.GPTConfig(n_embd=8, n_head=2, block_size=6), (2, 1, 8))):
        x = torch.randn(shape, generator=generator)
        check = ModuleCheck("Block", {"config": asdict(config)}, lambda config=config: reference.Block(config),
                            lambda _, x=x: {"x": x}, mistakes=mistakes.BLOCK_MISTAKES, repeat=True)
        made.append(entry("Block", seeded(check), f"Block(n_embd={config.n_embd}, n_head={config.n_head}) on x of "
                                                  f"shape {shape}"))
    return made


def models() -> list[Entry]:
    """The GPT's forward (called twice: dropout left on shows), its loss, and its forward with a cache."""
    generator = torch.Generator().manual_seed(3)
    made = []
    for config, seq in ((TINY_GPT, 5), (reference.GPTConfig(vocab_size=5, block_size=4, n_layer=1, n_head=1, n_embd=6,
                                                            attn_pdrop=0.2, resid_pdrop=0.2, embd_pdrop=0.2), 4)):
        idx = torch.randint(config.vocab_size, (2, seq), generator=generator)
        check = ModuleCheck("GPT", {"config": asdict(config)}, lambda config=config: reference.GPT(config),
                            lambda _, idx=idx: {"idx": idx}, repeat=True)
        made.append(entry("GPT", seeded(check), f"GPT(n_layer={config.n_layer}, n_head={config.n_head}) on idx of "
                                                f"shape {tuple(idx.shape)}"))
    made.append(entry("GPT", seeded(LossCheck("GPT", asdict(TINY_GPT), batch=3, seq=6), 3)))
    made.append(entry("GPT.forward with a KV cache", seeded(CachedForwardCheck("GPT", asdict(TINY_GPT), batch=2,
                                                                               seq=5, prefix=2), 3)))
    return made


def mingpt() -> dict[str, list[Entry]]:
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0], [-0.5, 1.5, 0.0, 1.0]])
    sampling = [entry("sample_next_token", sampling_check("sample_next_token", logits, temperature, top_k, 4000))
                for temperature, top_k in ((1.0, None), (0.5, None), (2.0, 2))]
    return {
        "mingpt_attention": attention_entries("MultiHeadSelfAttention", adapters.MINGPT_ATTENTION, (
            AttentionCase(batch=2, seq=6, d_in=8, d_out=8, num_heads=2, causal=True, out_proj=True),
            AttentionCase(batch=3, seq=4, d_in=6, d_out=6, num_heads=1, causal=True, out_proj=True, context_length=7),
            AttentionCase(batch=2, seq=5, d_in=6, d_out=6, num_heads=3, causal=True, out_proj=True, dropout=0.5),
            AttentionCase(batch=2, seq=1, d_in=8, d_out=8, num_heads=2, causal=True, out_proj=True, context_length=4))),
        "block": blocks(),
        "gpt": models(),
        "generate": generation({}, ((2, 3, 3), (2, 4, 7), (1, 9, 2))) + sampling,
        "kv_cache": generation({"use_cache": True}, ((2, 3, 3), (2, 2, 9), (1, 8, 3))),
    }
