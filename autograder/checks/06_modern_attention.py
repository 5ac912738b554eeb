"""Hidden checks of assignment 06 (attention in today's decoders).

Against the reference (:mod:`transformer_lm.instructor.decoder_kinds`), on sizes and positions the notebook
never shows: rotary embeddings at positions that start late (as after a cache), one row of
positions per sequence (as with left padding) and other bases; grouped-query attention with one,
some and as many key/value heads as query heads, a sliding window and a single token, its weights
loaded by Llama's layer names, output, returned cache and every gradient compared; sliding-window
masks for the last queries of a cache; the positions and masks of left-padded batches, and their
greedy generation with a KV cache, which must give each prompt the tokens it gets alone (under
weights redrawn until every catalogued mistake changes them); the size of a KV cache in three
dtypes. Inputs and weights come from the course's secret seed.

A case wrapped in ``Also`` is one more case of the check before it (the same purpose on other
inputs), so that each item's checks are what some catalogued mistake fails alone (the audit
holds this): the rotation at every start, base and row of positions; the window mask in every
shape; the layer's values without padding (head groupings, a window, one token, a cache), which a
cache's causal mask made for its first queries fails alone, and on left-padded batches, where
pad queries see no key, which empty rows left NaN fail alone; the padded batch's positions and
mask, which positions counted from the padding fail alone, and its greedy generation; the cache's
size in three dtypes, which a count of the keys without the values fails.

Every path of the API is called. ``GroupedQueryAttention.forward(x, positions, attn_mask=None,
cache=None)`` runs on each of its four branches: no cache and no mask, no cache and the mask of a
left-padded batch, a cache and no mask (the layer's own mask must be for the last T of the T_k
tokens, without and with a window), a cache and a mask; the cache passed in is random keys and
values drawn from the secret seed, and its gradients are compared too. ``generate_padded`` runs
prompts of different lengths (padded, with the default ``pad_id`` and another) and of one length
(nothing padded).

What the generation item rests on, since it is about how the answer computes (with its KV cache)
as well as what:

* **The tokens, judged here.** The points come only from the tokens the answer returns, compared
  on this side with the reference's tokens for each prompt alone. The model handed to the answer
  is a ``transformer_lm.sandboxed.decoder.StepMarkedDecoder`` (its marks drawn from the secret
  seed): it adds to the embeddings of the n-th call after the prompt a vector of that call's own.
  Keys and values computed by an earlier call carry its mark into later steps only through the
  cache, so a generation that runs the whole sequence again, by whatever route (the model without
  caches, ``TinyDecoder.forward``, a copy of the model built from its weights, the blocks called
  one by one), embeds the earlier new tokens without their marks and returns other tokens. The
  weights and marks are drawn again until that generation's tokens differ from the expected ones.
* **The refusal, a message only.** The same model (``CacheOnlyDecoder``) runs the whole prompts
  once, then one new position per call with caches, and raises ``Refused`` for a call without the
  caches after the prompt, one of several new positions, or more calls than new tokens. The probe
  reports a refusal that reaches it as ``{"refused": why}``, which fails the item naming
  "generation runs the whole sequence again instead of using its KV cache". That is what the run
  says of itself: code in the same process can patch the class, reset its count or catch the
  error, which only hides the name; it can never turn a refusal into a pass.

What a student could still do: read the marks (``model.step_marks``, as every weight is in the
run's process) and rerun the whole sequence adding each token's mark by hand through
``model.decode``. That keeps a record per token of what each call embedded, a cache of its own,
and redoes the work of every earlier step; nothing in the tokens tells it apart, and no cost of it
is measured (the model is far too small for CPU time to say). A generation that uses its cache and
also runs the sequence again on a copy of the model, throwing that result away, keeps its points.
"""

from autograder.reading.spec import Also, Item
from transformer_lm.instructor.decoder_kinds import (CacheBytesCheck, GroupedQueryCheck, PaddedGenerationCheck,
                                                     PaddingCheck, RopeCheck, WindowMaskCheck)
from transformer_lm.forbidding import LIBRARY_ATTENTION

SMALL = (("vocab_size", 11), ("d_model", 24), ("n_layers", 2), ("n_heads", 6), ("n_kv_heads", 2), ("ff_dim", 32))
MULTI_QUERY = (("vocab_size", 9), ("d_model", 16), ("n_layers", 1), ("n_heads", 4), ("n_kv_heads", 1),
               ("ff_dim", 16), ("rope_base", 500.0))

ITEMS = [
    Item("apply_rope", points=2, checks=(
        RopeCheck("apply_rope", batch=2, heads=3, seq=7, head_dim=8),
        Also(RopeCheck("apply_rope", batch=1, heads=2, seq=5, head_dim=16, start=11, base=500000.0)),
        Also(RopeCheck("apply_rope", batch=3, heads=2, seq=6, head_dim=8, start=4, per_sequence=True)),
        # one token, late: a step after the cache
        Also(RopeCheck("apply_rope", batch=2, heads=1, seq=1, head_dim=32, start=300)),
    ), defines=("apply_rope",)),
    Item("sliding_window_mask", points=1, checks=(
        WindowMaskCheck("sliding_window_mask", query_len=7, key_len=7, window=2),
        Also(WindowMaskCheck("sliding_window_mask", query_len=7, key_len=7, window=7)),
        # the last 3 queries of 9 keys
        Also(WindowMaskCheck("sliding_window_mask", query_len=3, key_len=9, window=4)),
        Also(WindowMaskCheck("sliding_window_mask", query_len=1, key_len=5, window=2)),
        Also(WindowMaskCheck("sliding_window_mask", query_len=4, key_len=4, window=1)),
    ), defines=("sliding_window_mask",)),
    Item("grouped_query_attention", points=3, checks=(
        # multi-query
        GroupedQueryCheck("GroupedQueryAttention", d_model=24, n_heads=4, n_kv_heads=1, batch=2, seq=6, start=3),
        # 3 query heads per group
        Also(GroupedQueryCheck("GroupedQueryAttention", d_model=24, n_heads=6, n_kv_heads=2, batch=2, seq=5)),
        # multi-head
        Also(GroupedQueryCheck("GroupedQueryAttention", d_model=12, n_heads=2, n_kv_heads=2, batch=1, seq=7, start=5,
                               base=100.0)),
        Also(GroupedQueryCheck("GroupedQueryAttention", d_model=16, n_heads=4, n_kv_heads=2, batch=2, seq=9,
                               window=4)),
        Also(GroupedQueryCheck("GroupedQueryAttention", d_model=16, n_heads=4, n_kv_heads=2, batch=3, seq=1, start=8)),
        # a cache and no mask: the causal mask of the last queries, then of a window
        Also(GroupedQueryCheck("GroupedQueryAttention", d_model=24, n_heads=6, n_kv_heads=2, batch=2, seq=3, past=5,
                               start=5)),
        Also(GroupedQueryCheck("GroupedQueryAttention", d_model=16, n_heads=4, n_kv_heads=1, batch=2, seq=1, past=7,
                               start=7)),
        Also(GroupedQueryCheck("GroupedQueryAttention", d_model=16, n_heads=4, n_kv_heads=2, batch=2, seq=3, past=6,
                               start=6, window=4)),
        # pad queries see no key, without a cache and after one
        GroupedQueryCheck("GroupedQueryAttention", d_model=24, n_heads=6, n_kv_heads=3, batch=3, seq=6, padded=(6, 2,
                                                                                                                4)),
        Also(GroupedQueryCheck("GroupedQueryAttention", d_model=24, n_heads=6, n_kv_heads=3, batch=3, seq=3, past=4,
                               padded=(7, 2, 5))),
    ), forbids=LIBRARY_ATTENTION, defines=("GroupedQueryAttention",),
        builds_on=("apply_rope", "sliding_window_mask")),
    Item("padded_generation", points=3, checks=(
        PaddingCheck("padded_positions", "padded_attention_mask", lengths=(4, 1, 6)),
        Also(PaddingCheck("padded_positions", "padded_attention_mask", lengths=(5, 2, 3), query_len=1)),
        PaddedGenerationCheck("generate_padded", "GroupedQueryAttention", SMALL, lengths=(5, 2, 7), max_new_tokens=4),
        Also(PaddedGenerationCheck("generate_padded", "GroupedQueryAttention", MULTI_QUERY, lengths=(4, 1, 3, 6),
                                   max_new_tokens=5, pad_id=4)),
        # prompts of one length: nothing padded
        Also(PaddedGenerationCheck("generate_padded", "GroupedQueryAttention", SMALL, lengths=(3, 3),
                                   max_new_tokens=4)),
    ), builds_on=("grouped_query_attention",)),
    Item("kv_cache_bytes", points=1, checks=(
        CacheBytesCheck("kv_cache_bytes", n_layers=32, n_kv_heads=8, head_dim=128, seq_len=8192, batch=1,
                        dtype="bfloat16"),
        Also(CacheBytesCheck("kv_cache_bytes", n_layers=24, n_kv_heads=4, head_dim=64, seq_len=1000, batch=3,
                             dtype="float16")),
        Also(CacheBytesCheck("kv_cache_bytes", n_layers=2, n_kv_heads=1, head_dim=16, seq_len=77, batch=5,
                             dtype="float32")),
    )),
]
