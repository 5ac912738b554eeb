"""Hidden checks of assignment 04 (minGPT, seed 000).

The notebook checks the attention layer with seed 000's gradient fingerprint (every parameter
0.1, ``y.sum()`` backpropagated); here every case has random weights and a random upstream
gradient, and every gradient is compared element by element, which is stronger: a merge of the
heads without transpose, for one, keeps the fingerprint but not the gradients. Sizes differ
from the notebook's: other widths, one head and several, a single token, sequences shorter than
``block_size``, dropout switched on with the module in eval mode (a block or a model called twice:
two outputs name dropout left on).

Blocks and models get the reference's randomized weights by parameter name; the loss is
checked with targets of -1 among them, and the forward pass with a KV cache against the whole
sequence run at once. ``sample_next_token`` draws thousands of tokens from random logits,
whose frequencies must follow the reference's distribution. Generation is greedy (``top_k=1``) against the
reference, with prompts longer than ``block_size`` (cropping) and generations that outgrow it
(the cache must restart), under weights whose greedy tokens depend on the context (see
:class:`transformer_lm.instructor.gpt_kinds.GenerateCheck`). Inputs come from the course's secret seed.
"""

from dataclasses import asdict

import torch

from autograder.reading.spec import Also, Item
from transformer_lm.instructor import adapters, mistakes, reference
from transformer_lm.instructor.cases import AttentionCase
from transformer_lm.forbidding import LIBRARY_ATTENTION
from transformer_lm.instructor.gpt_kinds import CachedForwardCheck, GenerateCheck, LossCheck, SamplingCheck
from transformer_lm.instructor.kinds import AttentionCheck, ModuleCheck


def config(**sizes) -> dict:
    """Every field of the reference's GPTConfig: the probe turns the dict into the object with
    attributes that minGPT's classes take, so a missing field would be a missing attribute."""
    return asdict(reference.GPTConfig(**sizes))


def attention(batch, seq, width, heads, **extra) -> AttentionCheck:
    case = AttentionCase(batch=batch, seq=seq, d_in=width, d_out=width, num_heads=heads, causal=True, out_proj=True,
                         **extra)
    return AttentionCheck("MultiHeadSelfAttention", adapters.MINGPT_ATTENTION, case)


def block(sizes: dict, batch: int, seq: int) -> ModuleCheck:
    cfg = reference.GPTConfig(**sizes)
    return ModuleCheck("Block", {"config": asdict(cfg)}, lambda: reference.Block(cfg),
                       lambda g: {"x": torch.randn(batch, seq, cfg.n_embd, generator=g)},
                       mistakes=mistakes.BLOCK_MISTAKES, repeat=True)


def gpt(sizes: dict, batch: int, seq: int) -> ModuleCheck:
    cfg = reference.GPTConfig(**sizes)
    return ModuleCheck("GPT", {"config": asdict(cfg)}, lambda: reference.GPT(cfg),
                       lambda g: {"idx": torch.randint(cfg.vocab_size, (batch, seq), generator=g)}, repeat=True)


SMALL = dict(vocab_size=9, block_size=7, n_layer=2, n_head=2, n_embd=8)
ONE_HEAD = dict(vocab_size=6, block_size=5, n_layer=1, n_head=1, n_embd=6)
DEEP = dict(vocab_size=11, block_size=6, n_layer=3, n_head=4, n_embd=12)
DROPOUT = dict(vocab_size=8, block_size=6, n_layer=2, n_head=3, n_embd=9, attn_pdrop=0.3, resid_pdrop=0.3,
               embd_pdrop=0.3)

ITEMS = [
    Item("mingpt_attention", points=3, checks=(
        attention(2, 7, 16, 4, context_length=9),        # block_size longer than the sequence
        Also(attention(3, 5, 6, 1)),                     # one head
        Also(attention(2, 1, 8, 2, context_length=4)),   # one token: a squeeze fails here
        attention(2, 6, 12, 3, dropout=0.3),             # dropout must do nothing in eval mode
    ), forbids=LIBRARY_ATTENTION, defines=("MultiHeadSelfAttention",)),
    Item("block", points=1, checks=(
        block(dict(n_embd=12, n_head=3, block_size=8), 2, 6),
        Also(block(dict(n_embd=6, n_head=1, block_size=3), 3, 1)),   # one token: a squeeze fails here
        block(dict(n_embd=8, n_head=2, block_size=5, attn_pdrop=0.3, resid_pdrop=0.3), 2, 5),
    ), forbids=LIBRARY_ATTENTION, defines=("Block",), builds_on=("mingpt_attention",)),
    Item("gpt", points=2, checks=(
        gpt(SMALL, 2, 6),
        Also(gpt(ONE_HEAD, 3, 5)),   # one layer, block_size the sequence's length
        Also(gpt(DROPOUT, 2, 4)),    # dropout must do nothing in eval mode
        LossCheck("GPT", config(**SMALL), batch=3, seq=7),
        CachedForwardCheck("GPT", config(**SMALL), batch=2, seq=7, prefix=3),   # the cache: positions go on after it
        Also(CachedForwardCheck("GPT", config(**DEEP), batch=3, seq=6, prefix=1)),
    ), forbids=LIBRARY_ATTENTION, defines=("GPT",), builds_on=("block",)),
    Item("generate", points=2, checks=(
        SamplingCheck("sample_next_token", vocab=8, temperature=0.6),
        Also(SamplingCheck("sample_next_token", vocab=10, temperature=1.7, top_k=4)),
        Also(SamplingCheck("sample_next_token", vocab=5, temperature=0.8, top_k=2)),
        GenerateCheck("GPT", config(**SMALL), batch=4, prompt=4, max_new_tokens=8),      # grows past block_size
        Also(GenerateCheck("GPT", config(**ONE_HEAD), batch=4, prompt=3, max_new_tokens=8)),
        # the prompt alone is longer than block_size
        Also(GenerateCheck("GPT", config(**DEEP), batch=4, prompt=9, max_new_tokens=4)),
    ), defines=("sample_next_token", "generate_tokens"), builds_on=("gpt",)),
    # Equality with the reference's tokens (made without a cache). The grader cannot tell whether the
    # cache is used at all; the visible check counts the tokens the model sees at each step.
    Item("kv_cache", points=2, checks=(
        # the cache fits
        GenerateCheck("GPT", config(**SMALL), batch=4, prompt=3, max_new_tokens=4, call_kwargs={"use_cache": True}),
        # it fills up, restarts
        Also(GenerateCheck("GPT", config(**ONE_HEAD), batch=4, prompt=2, max_new_tokens=10,
                           call_kwargs={"use_cache": True})),
        # cropped prompt, 3 blocks
        Also(GenerateCheck("GPT", config(**DEEP), batch=4, prompt=8, max_new_tokens=8, call_kwargs={"use_cache": True})),
    ), builds_on=("gpt", "generate")),
]
