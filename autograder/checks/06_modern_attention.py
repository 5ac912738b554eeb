"""Hidden checks of assignment 06 (attention in today's decoders).

Against the reference (:mod:`transformer_lm.decoder_kinds`), on sizes and positions the notebook
never shows: rotary embeddings at positions that start late (as after a cache), one row of
positions per sequence (as with left padding) and other bases; grouped-query attention with one,
some and as many key/value heads as query heads, a sliding window and a single token, its weights
loaded by Llama's layer names, output and every gradient compared; sliding-window masks for the
last queries of a cache; the positions and masks of left-padded batches, and their greedy
generation with a KV cache, which must give each prompt the tokens it gets alone (under weights
redrawn until every catalogued mistake changes them); the size of a KV cache in three dtypes.
Inputs and weights come from the course's secret seed.
"""

from autograder.spec import Item
from transformer_lm.decoder_kinds import (CacheBytesCheck, GroupedQueryCheck, PaddedGenerationCheck, PaddingCheck,
                                          RopeCheck, WindowMaskCheck)
from transformer_lm.forbidding import LIBRARY_ATTENTION

SMALL = (("vocab_size", 11), ("d_model", 24), ("n_layers", 2), ("n_heads", 6), ("n_kv_heads", 2), ("ff_dim", 32))
MULTI_QUERY = (("vocab_size", 9), ("d_model", 16), ("n_layers", 1), ("n_heads", 4), ("n_kv_heads", 1),
               ("ff_dim", 16), ("rope_base", 500.0))

ITEMS = [
    Item("apply_rope", 2, (
        RopeCheck("apply_rope", 2, 3, 7, 8),
        RopeCheck("apply_rope", 1, 2, 5, 16, start=11, base=500000.0),
        RopeCheck("apply_rope", 3, 2, 6, 8, start=4, per_sequence=True),
        RopeCheck("apply_rope", 2, 1, 1, 32, start=300),          # one token, late: a step after the cache
    ), defines=("apply_rope",)),
    Item("sliding_window_mask", 1, (
        WindowMaskCheck("sliding_window_mask", 7, 7, 2),
        WindowMaskCheck("sliding_window_mask", 7, 7, 7),
        WindowMaskCheck("sliding_window_mask", 3, 9, 4),          # the last 3 queries of 9 keys
        WindowMaskCheck("sliding_window_mask", 1, 5, 2),
        WindowMaskCheck("sliding_window_mask", 4, 4, 1),
    ), defines=("sliding_window_mask",)),
    Item("grouped_query_attention", 3, (
        GroupedQueryCheck("GroupedQueryAttention", 24, 4, 1, 2, 6, start=3),             # multi-query
        GroupedQueryCheck("GroupedQueryAttention", 24, 6, 2, 2, 5),                      # 3 query heads per group
        GroupedQueryCheck("GroupedQueryAttention", 12, 2, 2, 1, 7, start=5, base=100.0),  # multi-head
        GroupedQueryCheck("GroupedQueryAttention", 16, 4, 2, 2, 9, window=4),
        GroupedQueryCheck("GroupedQueryAttention", 16, 4, 2, 3, 1, start=8),
        GroupedQueryCheck("GroupedQueryAttention", 24, 6, 3, 3, 6, padded=(6, 2, 4)),   # pad queries see no key
    ), forbids=LIBRARY_ATTENTION, defines=("GroupedQueryAttention",),
        builds_on=("apply_rope", "sliding_window_mask")),
    Item("padded_generation", 3, (
        PaddingCheck("padded_positions", "padded_attention_mask", (4, 1, 6)),
        PaddingCheck("padded_positions", "padded_attention_mask", (5, 2, 3), query_len=1),
        PaddedGenerationCheck("generate_padded", "GroupedQueryAttention", SMALL, (5, 2, 7), 4),
        PaddedGenerationCheck("generate_padded", "GroupedQueryAttention", MULTI_QUERY, (4, 1, 3, 6), 5),
    ), builds_on=("grouped_query_attention",)),
    Item("kv_cache_bytes", 1, (
        CacheBytesCheck("kv_cache_bytes", 32, 8, 128, 8192, 1, "bfloat16"),
        CacheBytesCheck("kv_cache_bytes", 24, 4, 64, 1000, 3, "float16"),
        CacheBytesCheck("kv_cache_bytes", 2, 1, 16, 77, 5, "float32"),
    )),
]
