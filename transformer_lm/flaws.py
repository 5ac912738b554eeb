"""The flaws that make each catalogued mistake: which step of a computation goes wrong, as a flag.

Each dataclass below holds the switches of one family of deliberately breakable twins of the
reference (:mod:`transformer_lm.instructor.mistakes`); its defaults are all correct. A
:class:`~transformer_lm.catalog.Mistake` names one setting of them, so that the catalogue's words
and what the mistake computes cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Flaws:
    """Ways an attention implementation can go wrong; the defaults are all correct."""

    softmax_dim: int = -1
    scale: str = "head"  # "head": 1/sqrt(head_dim); "none"; "model": 1/sqrt(all heads' width); "input": x's width;
    # "tokens": 1/sqrt(seq)
    masked_fill: float = float("-inf")
    causal_diagonal: int = 0  # the last key a causal query may see, counted from itself: -1 hides it, 1 leaks the next
    mask_after_softmax: bool = False  # masked weights zeroed after the softmax, rows not renormalised
    invert_mask: bool = False
    split_without_transpose: bool = False
    merge_without_transpose: bool = False
    skip_output_projection: bool = False
    dropout_in_eval: float = 0.0
    float_mask_ignored: bool = False  # an additive float mask left out, only a boolean one applied
    squeezed: bool = False  # .squeeze() on what the module returns: every dimension of size 1 removed
    bias_left_out: bool = False  # the projections' weights used alone, x @ W.weight.T, without their biases
    heads_on_tokens: bool = False  # the heads' outputs concatenated along the tokens, not the features


@dataclass(frozen=True)
class GenerationFlaws:
    """Ways sampling and generation with minGPT can go wrong; the defaults are all correct."""

    temperature: str = "divide"  # "multiply"; or "ignore" (dividing the probabilities does that too)
    greedy: bool = False  # the most likely token every time, whatever the temperature
    top_k_unmapped: bool = False  # the position drawn among the top k used as the token id
    crop_first: bool = False  # the context cropped to its first block_size tokens, not its last
    positions_from_zero: bool = False  # with a KV cache, the new tokens' positions start at 0 again
    restart_early: bool = False  # the KV cache restarted when it has room for one token more


@dataclass(frozen=True)
class TilingFlaws:
    """Ways attention computed tile by tile (assignment 05) can go wrong; the defaults are all correct.
    The first group changes the values; the second only what the computation holds or does, which
    the memory checks see in a trace of what ran (:class:`transformer_lm.sandboxed.tensor_trace.TensorTrace`)."""

    total_not_rescaled: bool = False  # the running sum of exponentials kept when the maximum grows
    unguarded_rescale: bool = False  # exp(m_a - m) of two empty parts: exp(-inf - (-inf)) = nan
    output_not_rescaled: bool = False  # the running output kept when the maximum grows
    global_maximum: bool = False  # one running maximum shared by every row (of every batch and head)
    lse_without_max: bool = False  # log(total) returned as the log-sum-exp
    causal_blocks: str = "skip"  # "miss_diagonal": stop before the query block starts; "all"
    delta_from_tile: bool = False  # D = rowsum(P * dP) over one tile instead of rowsum(dO * O)
    delta_left_out: bool = False  # dS = P * dP, without D
    dk_unscaled: bool = False  # dk = dS^T q, without the 1/sqrt(d) the scores were scaled by
    tile_diagonal: int = 0  # the last key a causal query sees in a tile, from itself: -1 hides it, 1 leaks the next
    scores_unscaled: bool = False  # each tile's scores (in the forward and the backward) without the 1/sqrt(d)
    full_scores: bool = False  # the whole (T_q, T_k) score matrix built at once
    full_row: bool = False  # each query block's maximum and sum taken over its whole row of keys
    backward_full: bool = False  # the backward rebuilds the whole (T_q, T_k) weight matrix
    saves_weights: bool = False  # the forward keeps its tiles of weights for the backward


@dataclass(frozen=True)
class DecoderFlaws:
    """Ways the attention of today's decoders (assignment 06) can go wrong; the defaults are all correct."""

    rope_interleaved: bool = False  # pairs (x[2i], x[2i+1]) turned, where the weights expect (x[i], x[i + d/2])
    rope_exponent: str = "2i/d"  # "i/d": the frequencies' exponent off by a factor of 2
    kv_repeat: str = "interleave"  # "repeat": key/value heads tiled (0, 1, 0, 1) instead of (0, 0, 1, 1)
    window_offset: int = 0  # +1: each query sees one key too many; -1: one too few
    pads_attended: bool = False  # the padding of a left-padded prompt not masked
    positions_from_padding: bool = False  # positions counted from the first pad, not the first real token
    cache_positions_from_zero: bool = False  # with a KV cache, the new tokens' positions start at 0 again
    empty_rows_nan: bool = False  # a query whose every key is masked (a pad) gets NaN, not zeros
    causal_from_first_query: bool = False  # with a cache and no mask, the causal mask of the first T queries
    window_from_first_query: bool = False  # with a cache and no mask, the window of the first T queries
    reruns_sequence: bool = False  # generation runs the whole padded batch again at each step, no cache
    cache_keys_only: bool = False  # a KV cache's size counts the keys or the values, not both
