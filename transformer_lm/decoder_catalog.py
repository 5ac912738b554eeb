"""The catalogued mistakes of today's decoders (assignment 06), in words: rotary embeddings,
grouped-query attention, sliding windows, left padding and generation with a KV cache. Part of
:mod:`transformer_lm.catalog`, which selects them (:func:`transformer_lm.catalog.decoder_mistakes`)."""

from __future__ import annotations

from transformer_lm.flaws import DecoderFlaws
from transformer_lm.mistake import Mistake

DECODER: tuple[Mistake, ...] = (
    Mistake(
        "rope_interleaved", "interleaved and half-split rotary pairs mixed up",
        "Llama's convention (and this course's) turns each pair (x[i], x[i + d/2]): rotate_half splits the "
        "last dimension into halves, (x1, x2) -> (-x2, x1). The interleaved convention turns (x[2i], x[2i+1]); "
        "both keep scores relative, but weights trained under one give wrong scores under the other.",
        DecoderFlaws(rope_interleaved=True), frozenset({"rope", "gqa"}),
    ),
    Mistake(
        "rope_exponent_off", "the rotary frequencies' exponent off (i/d instead of 2i/d)",
        "Pair i turns by base ** (-2i / d) per position, for i = 0 .. d/2 - 1: the exponent runs over the even "
        "feature indices 0, 2, .., d - 2 divided by d, so it nearly reaches 1. Counting the pairs 0, 1, .., "
        "d/2 - 1 over d stops near 1/2, and the slowest pair turns about sqrt(base) times too fast.",
        DecoderFlaws(rope_exponent="i/d"), frozenset({"rope", "gqa"}),
    ),
    Mistake(
        "kv_heads_repeated_not_interleaved", "key/value heads repeated with repeat instead of repeat_interleave",
        "Query heads h * r .. h * r + r - 1 share key/value head h, so each key/value head is copied r times in "
        "place: repeat_interleave(r, dim=1) gives heads 0, 0, 1, 1; repeat(1, r, 1, 1) gives 0, 1, 0, 1 and pairs "
        "query heads with the wrong keys.",
        DecoderFlaws(kv_repeat="repeat"), frozenset({"gqa"}),
    ),
    Mistake(
        "window_off_by_one", "the sliding window off by one",
        "A window of w keys counts the query's own key: each query sees its own key and the w - 1 keys just "
        "before it, nothing earlier and nothing later. A window that reaches back w keys sees one key too "
        "many; one that reaches back w - 2 sees one too few.",
        DecoderFlaws(window_offset=1), frozenset({"window"}),
    ),
    Mistake(
        "pads_attended", "pad tokens attended to",
        "Combine the causal mask with the attention mask of the padding, so that no query looks at a pad key: a "
        "key is allowed only where both masks allow it, with the padding's mask (one row per sequence, one "
        "entry per key) shaped to broadcast over the heads and the queries.",
        DecoderFlaws(pads_attended=True), frozenset({"padding"}),
    ),
    Mistake(
        "positions_from_padding", "positions counted from the padding",
        "A left-padded prompt's first real token is at position 0, as it would be alone: count each row's real "
        "tokens so far along the attention mask, start that count at 0, and give the pads 0. Numbering every "
        "column from 0 counts the pads as tokens.",
        DecoderFlaws(positions_from_padding=True), frozenset({"padding"}),
    ),
    Mistake(
        "empty_rows_nan", "a query with every key masked gives NaN",
        "A pad query of a left-padded batch may look at no key: its scores are all -inf and softmax gives 0 / 0 "
        "= NaN, which the next layers spread to every token. Find those rows (torch.isneginf(scores).all(-1)), "
        "give them zero weights, and let their output be 0.",
        DecoderFlaws(empty_rows_nan=True), frozenset({"padded_gqa"}),
    ),
    Mistake(
        "cache_positions_not_offset_rope", "positions start at 0 again for the tokens after the cache",
        "With a KV cache, the new tokens come after the cached ones: rotate them at positions past_len .. "
        "past_len + T - 1 (per sequence: one more than its last position), not 0 .. T - 1.",
        DecoderFlaws(cache_positions_from_zero=True), frozenset({"cache"}),
    ),
    Mistake(
        "cache_causal_first_queries", "causal mask aligned to the first queries when there is a cache",
        "With a cache, the T new queries are the last T of the T_k keys: query row r is the token at index "
        "T_k - T + r and sees keys 0 to T_k - T + r. torch.tril(ones(T, T_k)) puts the diagonal in the top-left "
        "corner, as if the queries were the first T tokens, and hides most of the cache from them; shift it with "
        "diagonal=T_k - T.",
        DecoderFlaws(causal_from_first_query=True), frozenset({"cached_causal"}),
    ),
    Mistake(
        "cache_window_first_queries", "sliding window counted from the first queries when there is a cache",
        "With a cache, the T new queries are the last T of the T_k keys, so their window is the last T rows of the "
        "square window mask of the T_k tokens, each query seeing its own key and the window - 1 keys before it. Counted from the first rows, the new tokens see the oldest keys of the "
        "cache instead.",
        DecoderFlaws(window_from_first_query=True), frozenset({"cached_window"}),
    ),
    Mistake(
        "generation_reruns_sequence", "generation runs the whole sequence again instead of using its KV cache",
        "After the prompt, each step gives the model only the new tokens, one per sequence (B, 1), with each "
        "sequence's new position, a mask over all T_k keys (B, 1, 1, T_k) and the caches the last call returned, "
        "which hold the keys and values of every earlier token. Running the whole padded batch "
        "again repeats the work of every earlier step; the check's model accepts the whole prompts once, then one "
        "new token per call with its caches, and refuses any other call.",
        DecoderFlaws(reruns_sequence=True), frozenset({"generation"}),
    ),
    Mistake(
        "cache_keys_only", "the KV cache's size counts the keys or the values, not both",
        "A KV cache holds two vectors for each layer, key/value head, token and sequence: a key and a value, of "
        "head_dim numbers each. Count both when you multiply the sizes together, and then the bytes of one "
        "number: a count of one vector per position is half the cache.",
        DecoderFlaws(cache_keys_only=True), frozenset({"bytes"}),
    ),
)
