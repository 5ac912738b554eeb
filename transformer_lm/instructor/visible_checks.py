"""The visible checks of the six notebooks, prepared with the reference from fixed seeds.

Each notebook's test cell runs one group of this table (``checks.check("<group>", answer)``):
every check of the group in turn, against the values that :mod:`transformer_lm.instructor.make_test_values`
stores from here, with the groups that each concept module of :mod:`transformer_lm.instructor.concepts`
names in its ``VISIBLE``. This module is the instructor's: it imports the reference, which students
never receive; they receive only what it stores.
"""

from __future__ import annotations

import functools

import torch

from transformer_lm import catalog, checks
from transformer_lm.instructor import adapters, concepts, mistakes, reference
from transformer_lm.instructor.cases import AttentionCase, BlockCase, linear_shapes
from transformer_lm.instructor.decoder_kinds import (CacheBytesCheck, GroupedQueryCheck, PaddedGenerationCheck,
                                                     PaddingCheck, RopeCheck, WindowMaskCheck)
from transformer_lm.flaws import Flaws
from transformer_lm.instructor.kinds import (DecoderLoadCheck, MultiheadLoadCheck, ParametersCheck, RaisesCheck,
                                             TransferCheck, function_check)
from transformer_lm.instructor import visible_mingpt, visible_tiled
from transformer_lm.instructor.visible_entries import Entry, attention_entries, each, entry, seeded


def _transfer_weights() -> list[Entry]:
    return [entry("transfer_weights", seeded(TransferCheck("transfer_weights", "SelfAttention_v2",
                                                           adapters.SELF_ATTENTION_V2, "SelfAttention_v1",
                                                           adapters.SELF_ATTENTION_V1, case)),
                  f"transfer_weights between classes built with d_in={case.d_in}, d_out={case.d_out}")
            for case in (AttentionCase(batch=None, seq=6, d_in=3, d_out=2, bias=False),
                         AttentionCase(batch=None, seq=4, d_in=3, d_out=3, bias=False))]


def _attention_basics() -> dict[str, list[Entry]]:
    generator = torch.Generator().manual_seed(1)
    softmax = [entry("softmax_stable", function_check("softmax_stable", lambda x: torch.softmax(x, dim=-1), {"x": x},
                                                      torch.randn(x.shape, generator=generator),
                                                      mistakes.SOFTMAX_MISTAKES.records(x),
                                                      raised=mistakes.SOFTMAX_MISTAKES.raised(x)),
                     f"softmax_stable on x of shape {tuple(x.shape)}")
               for x in (torch.randn(6, generator=generator), 4 * torch.randn(2, 4, 5, generator=generator),
                         torch.tensor([[1000.0, 1001.0, 1002.0], [-1000.0, 0.0, 1000.0]]))]
    generator = torch.Generator().manual_seed(2)

    def unscaled_self_attention(x):   # queries = keys = values = x, no 1/sqrt(d) scaling
        return reference.scaled_dot_product_attention(x, x, x, scale=1.0).output

    context = []
    for shape in ((6, 3), (4, 5), (1, 2)):
        x = torch.randn(shape, generator=generator)
        context.append(entry("context_vectors", function_check("context_vectors", unscaled_self_attention,
                                                               {"inputs": x},
                                                               torch.randn(shape, generator=generator),
                                                               mistakes.CONTEXT_VECTOR_MISTAKES.records(x)),
                             f"context_vectors on inputs of shape {shape}"))
    one_sequence = (AttentionCase(batch=None, seq=6, d_in=3, d_out=2, bias=False),
                    AttentionCase(batch=None, seq=1, d_in=4, d_out=3, bias=False))
    return {
        "softmax_stable": softmax,
        "context_vectors": context,
        "self_attention_v1": attention_entries("SelfAttention_v1", adapters.SELF_ATTENTION_V1, one_sequence),
        "self_attention_v2": attention_entries("SelfAttention_v2", adapters.SELF_ATTENTION_V2, (
            AttentionCase(batch=None, seq=6, d_in=3, d_out=2, bias=False),
            AttentionCase(batch=None, seq=5, d_in=4, d_out=3, bias=True),
            AttentionCase(batch=None, seq=1, d_in=3, d_out=2, bias=False))),
        "transfer_weights": _transfer_weights(),
        "causal_attention": attention_entries("CausalAttention", adapters.CAUSAL_ATTENTION, (
            AttentionCase(batch=2, seq=6, d_in=3, d_out=2, causal=True, bias=False),
            AttentionCase(batch=3, seq=4, d_in=5, d_out=4, causal=True, bias=True, context_length=8),
            AttentionCase(batch=1, seq=1, d_in=3, d_out=2, causal=True, bias=False),
            AttentionCase(batch=2, seq=6, d_in=3, d_out=2, causal=True, bias=False, dropout=0.5))),
        "multihead_wrapper": attention_entries("MultiHeadAttentionWrapper", adapters.MULTI_HEAD_ATTENTION_WRAPPER, (
            AttentionCase(batch=1, seq=6, d_in=3, d_out=4, num_heads=2, causal=True, bias=False),
            AttentionCase(batch=2, seq=5, d_in=4, d_out=6, num_heads=3, causal=True, bias=True, context_length=7))),
        "multihead_attention": attention_entries("MultiHeadAttention", adapters.MULTI_HEAD_ATTENTION, (
            AttentionCase(batch=2, seq=6, d_in=3, d_out=4, num_heads=2, causal=True, out_proj=True, bias=False),
            AttentionCase(batch=3, seq=5, d_in=4, d_out=6, num_heads=3, causal=True, out_proj=True, bias=True,
                          context_length=8),
            AttentionCase(batch=1, seq=1, d_in=2, d_out=4, num_heads=4, causal=True, out_proj=True, bias=False),
            AttentionCase(batch=2, seq=6, d_in=3, d_out=4, num_heads=2, causal=True, out_proj=True, bias=False,
                          dropout=0.5))),
    }


def _multihead_attention() -> dict[str, list[Entry]]:
    api = adapters.MULTI_HEAD_SELF_ATTENTION
    parameters = ParametersCheck("SelfAttention", {"input_size": 7, "hidden": 9}, linear_shapes("qkv", 7, 9),
                                 {"linear_sizes_swapped": linear_shapes("qkv", 9, 7),
                                  "layers_without_bias": linear_shapes("qkv", 7, 9, bias=False)})
    unshared = RaisesCheck("MultiHeadSelfAttention", {"input_size": 7, "hidden": 10, "num_heads": 3},
                           mistake="heads_not_checked")   # 10 features cannot be cut into 3 equal heads
    return {
        "self_attention_init": [entry("SelfAttention", seeded(parameters))],
        "self_attention_forward": attention_entries("SelfAttention", adapters.SELF_ATTENTION, (
            AttentionCase(batch=3, seq=5, d_in=7, d_out=9), AttentionCase(batch=2, seq=1, d_in=4, d_out=6),
            AttentionCase(batch=1, seq=6, d_in=5, d_out=5))),
        "mha_scores": attention_entries("MultiHeadSelfAttention", api, (
            AttentionCase(batch=3, seq=5, d_in=7, d_out=9, num_heads=3, out_proj=True),
            AttentionCase(batch=2, seq=4, d_in=6, d_out=8, num_heads=4, out_proj=True),
            AttentionCase(batch=2, seq=3, d_in=5, d_out=6, num_heads=1, out_proj=True),
            AttentionCase(batch=1, seq=1, d_in=3, d_out=6, num_heads=2, out_proj=True))),
        "mha_causal_mask": attention_entries("MultiHeadSelfAttention", api, (
            AttentionCase(batch=3, seq=5, d_in=7, d_out=9, num_heads=3, causal=True, out_proj=True),
            AttentionCase(batch=2, seq=6, d_in=4, d_out=8, num_heads=2, causal=True, out_proj=True),
            AttentionCase(batch=2, seq=1, d_in=3, d_out=6, num_heads=3, causal=True, out_proj=True))),
        "mha_output": attention_entries("MultiHeadSelfAttention", api, (
            AttentionCase(batch=2, seq=5, d_in=7, d_out=9, num_heads=3, out_proj=True, dropout=0.5),
            AttentionCase(batch=2, seq=6, d_in=4, d_out=8, num_heads=2, causal=True, out_proj=True, dropout=0.5)))
        + [entry("MultiHeadSelfAttention", seeded(unshared))],
    }


def _pytorch_attention() -> dict[str, list[Entry]]:
    generator = torch.Generator().manual_seed(3)

    def random_mask(kind, len_q, len_k):   # every query keeps at least one key
        if kind is None:
            return None
        keep = torch.rand(len_q, len_k, generator=generator) < 0.6
        keep[torch.arange(len_q), torch.randint(len_k, (len_q,), generator=generator)] = True
        if kind == "bool":
            return keep
        return torch.randn(len_q, len_k, generator=generator).masked_fill(~keep, float("-inf"))

    def expected(q, k, v, mask=None):
        return reference.scaled_dot_product_attention(q, k, v, mask).output

    q, k, v = (torch.randn(2, length, width, generator=generator) for length, width in ((5, 4), (7, 4), (7, 3)))
    functions = []
    for kind in (None, "bool", "float"):
        mask = random_mask(kind, 5, 7)
        inputs = {"q": q, "k": k, "v": v} if mask is None else {"q": q, "k": k, "v": v, "attn_mask": mask}
        functions.append(entry("my_attention", function_check("my_attention", expected, inputs,
                                                              torch.randn(2, 5, 3, generator=generator),
                                                              mistakes.ATTENTION_FUNCTION_MISTAKES.records(
                                                                  *inputs.values())),
                               f"my_attention on 5 queries over 7 keys in a batch of 2, mask: {kind}"))
    one = {**{name: torch.randn(1, width, generator=generator) for name, width in (("q", 2), ("k", 2), ("v", 1))},
           "attn_mask": torch.ones(1, 1, dtype=torch.bool)}   # one query over one key, values of width 1
    functions.append(entry("my_attention", function_check("my_attention", expected, one, torch.randn(
        1, 1, generator=generator), mistakes.ATTENTION_FUNCTION_MISTAKES.records(*one.values())),
                           "my_attention on 1 query over 1 key, values of width 1, mask: bool"))
    return {
        "my_attention": functions,
        "self_attention_head": attention_entries("SelfAttentionHead", adapters.SELF_ATTENTION_HEAD, (
            AttentionCase(batch=2, seq=5, d_in=6, d_out=3, d_value=6),
            AttentionCase(batch=None, seq=4, d_in=5, d_out=5, d_value=5, mask="bool"),
            AttentionCase(batch=3, seq=6, d_in=4, d_out=7, d_value=4, mask="float"),
            AttentionCase(batch=2, seq=1, d_in=4, d_out=3, d_value=4))),
        "multiheaded_self_attention": attention_entries("MultiheadedSelfAttention",
                                                        adapters.MULTIHEADED_SELF_ATTENTION, (
            AttentionCase(batch=2, seq=5, d_in=6, d_out=6, num_heads=3, bias=True, out_proj=True),
            AttentionCase(batch=3, seq=4, d_in=8, d_out=8, num_heads=2, bias=True, out_proj=True, mask="bool"),
            AttentionCase(batch=2, seq=6, d_in=4, d_out=4, num_heads=1, bias=True, out_proj=True, mask="float"),
            AttentionCase(batch=1, seq=1, d_in=8, d_out=8, num_heads=2, bias=True, out_proj=True)),
            kind=MultiheadLoadCheck),
        "transformer_decoder_layer": _decoder_layers(),
    }


def _decoder_layers() -> list[Entry]:
    """Assignment 03's layer: post-norm and pre-norm, with dropout (off in eval mode) and without; one token."""
    layers = []
    for seq, norm_first, dropout in ((5, False, 0.0), (5, True, 0.0), (5, True, 0.3), (5, False, 0.3), (1, False, 0.0)):
        init = {"model_dim": 8, "num_heads": 2, "ff_dim": 16, "dropout": dropout, "norm_first": norm_first}
        case = BlockCase(batch=2 if seq > 1 else 1, seq=seq, model_dim=8, num_heads=2, ff_dim=16, norm_first=norm_first)
        layers.append(entry("TransformerDecoderLayer", seeded(DecoderLoadCheck("TransformerDecoderLayer", init, case)),
                            f"TransformerDecoderLayer({', '.join(f'{k}={v!r}' for k, v in init.items())})"
                            + ("" if seq > 1 else " on a single token")))
    return layers


def _modern_attention() -> dict[str, list[Entry]]:
    config = (("vocab_size", 13), ("d_model", 16), ("n_layers", 2), ("n_heads", 4), ("n_kv_heads", 2), ("ff_dim", 24))
    return {
        "apply_rope": [entry("apply_rope", seeded(kind), kind.call) for kind in (
            RopeCheck("apply_rope", batch=1, heads=2, seq=5, head_dim=8),
            RopeCheck("apply_rope", batch=2, heads=3, seq=6, head_dim=16, start=7),
            RopeCheck("apply_rope", batch=3, heads=2, seq=4, head_dim=8, start=2, per_sequence=True, base=500000.0))],
        "sliding_window_mask": each("sliding_window_mask", *(
            WindowMaskCheck("sliding_window_mask", query_len=query_len, key_len=key_len, window=window)
            for query_len, key_len, window in ((6, 6, 3), (6, 6, 1), (2, 7, 4), (5, 5, 9)))),
        "grouped_query_attention": [entry("GroupedQueryAttention", seeded(kind), kind.call) for kind in (
            GroupedQueryCheck("GroupedQueryAttention", **sizes) for sizes in (
                dict(d_model=16, n_heads=4, n_kv_heads=1, batch=2, seq=5),
                dict(d_model=16, n_heads=4, n_kv_heads=2, batch=2, seq=6, start=3),
                dict(d_model=12, n_heads=3, n_kv_heads=3, batch=1, seq=4, start=9, base=100.0),
                dict(d_model=16, n_heads=4, n_kv_heads=2, batch=2, seq=7, window=3),
                dict(d_model=16, n_heads=4, n_kv_heads=2, batch=2, seq=5, padded=(2, 5)),
                dict(d_model=16, n_heads=4, n_kv_heads=2, batch=2, seq=3, past=4, start=4),
                dict(d_model=16, n_heads=4, n_kv_heads=2, batch=2, seq=2, past=5, start=5, window=3),
                dict(d_model=16, n_heads=4, n_kv_heads=2, batch=2, seq=2, past=3, padded=(5, 2))))],
        "padding": each("padded_attention_mask", *(
            PaddingCheck("padded_positions", "padded_attention_mask", lengths=lengths, query_len=query_len)
            for lengths, query_len in (((3, 5, 1), None), ((2, 4), 1)))),
        "padded_generation": each("generate_padded", *(
            PaddedGenerationCheck("generate_padded", "GroupedQueryAttention", config, lengths=lengths, max_new_tokens=5,
                                  pad_id=pad_id)
            for lengths, pad_id in (((3, 6, 1), None), ((2, 5), 3), ((4, 4), None)))),
        "kv_cache_bytes": each("kv_cache_bytes", *(
            CacheBytesCheck("kv_cache_bytes", n_layers=layers, n_kv_heads=heads, head_dim=dim, seq_len=seq,
                            batch=batch, dtype=dtype)
            for layers, heads, dim, seq, batch, dtype in ((32, 8, 128, 8192, 1, "bfloat16"),
                                                          (2, 3, 16, 100, 4, "float32")))),
    }


SEED_000_CONFIG = reference.GPTConfig(vocab_size=11, block_size=5, n_head=4, n_embd=12)


def flawed_fingerprint(flaws: Flaws) -> list[int]:
    """The fingerprint of the original minGPT exercise (every parameter 0.1, its 5-token input,
    ``y.sum()`` backpropagated) that attention with ``flaws`` gives."""
    width = SEED_000_CONFIG.n_embd
    weights = reference.AttentionWeights(*(torch.full((width, width), 0.1) for _ in range(3)),
                                         *(torch.full((width,), 0.1) for _ in range(3)),
                                         torch.full((width, width), 0.1), torch.full((width,), 0.1))
    weights = weights.map(lambda t: t.requires_grad_(True))
    output, _ = mistakes.flawed_multi_head_attention(checks.seed_000_input(), weights, SEED_000_CONFIG.n_head, flaws,
                                                    causal=True)
    output.sum().backward()
    return checks.fingerprint([weights.w_query.grad, weights.b_query.grad, weights.w_key.grad, weights.b_key.grad,
                               weights.w_value.grad, weights.b_value.grad])


def fingerprints() -> dict:
    """The exercise's fingerprint, and each mistake's that minGPT's attention can make and that
    changes it (at weights of 0.1 everywhere, some do not)."""
    expected = flawed_fingerprint(Flaws())
    made = {mistake: flawed_fingerprint(mistake.flaws) for mistake in catalog.revealed_by({"heads", "causal",
                                                                                          "projection"})}
    mistakes = {m: fingerprint for m, fingerprint in made.items() if fingerprint != expected}
    return {"expected": expected, "mistakes": mistakes}


ASSIGNMENTS = {"01_attention_basics": _attention_basics, "02_multihead_attention": _multihead_attention,
               "03_pytorch_attention": _pytorch_attention, "04_mingpt": visible_mingpt.mingpt,
               "05_efficient_attention": visible_tiled.efficient_attention, "06_modern_attention": _modern_attention}


def concept_groups(concept) -> dict[str, list[Entry]]:
    """The groups a concept module names in its ``VISIBLE`` (group -> its kinds of check), each
    check from seed 0: a new concept's visible checks live in its own module, not in this table."""
    return {group: each(group, *kinds) for group, kinds in getattr(concept, "VISIBLE", {}).items()}


def make() -> dict:
    """Every group of every assignment and of every concept module (a notebook's test cell names
    one, so no two share a name), and the minGPT exercise's fingerprints: what is stored."""
    groups = {}
    made_by = {**ASSIGNMENTS, **{concept.__name__: functools.partial(concept_groups, concept)
                                 for concept in concepts.modules()}}
    for assignment, groups_of in made_by.items():
        made = groups_of()
        if set(made) & set(groups):
            raise ValueError(f"{assignment} names checks that another assignment names: {set(made) & set(groups)}")
        groups.update(made)
    return {"groups": groups, "fingerprints": fingerprints()}
