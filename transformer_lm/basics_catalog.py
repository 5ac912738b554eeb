"""The catalogued mistakes that assignment 01 (attention basics) proves its hidden checks with, in
words. Part of :mod:`transformer_lm.catalog`: the attention mistakes here (:data:`BASICS_ATTENTION`)
are flaws of the reference's breakable twin, as the course's own attention mistakes are; the others
(:data:`BASICS_NAMED`) are named by the one check that tells them, from what it measures."""

from __future__ import annotations

from transformer_lm.flaws import Flaws
from transformer_lm.mistake import Mistake

BASICS_ATTENTION: tuple[Mistake, ...] = (
    Mistake(
        "bias_left_out", "the projections' weights used without their biases",
        "x @ W.weight.T is only the weight's part of an nn.Linear layer W: with qkv_bias=True the layer also adds "
        "its bias. Call the layer, W(x), which computes x @ W.weight.T + W.bias.",
        Flaws(bias_left_out=True), frozenset({"bias"}),
    ),
    Mistake(
        "scaled_by_sequence_length", "scores scaled by the number of tokens instead of the key width",
        "d_k is the width of the keys, their last dimension: keys.shape[-1]. keys.shape[0] of one sequence's keys "
        "(seq, d_out), or keys.shape[1] of a batch's keys (b, seq, d_out), counts the tokens instead.",
        Flaws(scale="tokens"), frozenset({"several_tokens"}),
    ),
    Mistake(
        "heads_concatenated_on_tokens", "the heads' outputs concatenated along the tokens",
        "Each head gives (b, num_tokens, d_out): concatenate them on the last dimension, torch.cat(..., dim=-1), "
        "so that each token gets num_heads * d_out features. dim=1 puts the heads' tokens one after another "
        "instead.",
        Flaws(heads_on_tokens=True), frozenset({"concatenated"}),
    ),
)

BASICS_NAMED: tuple[Mistake, ...] = (
    Mistake(
        "transfer_without_transpose", "weights copied without their transpose",
        "A linear layer from d_in to d_out features stores its weight as (d_out, d_in) and computes x @ weight.T, "
        "while SelfAttention_v1 computes x @ W with W of shape (d_in, d_out): copy weight.T into W. When "
        "d_in == d_out the copy without .T fits, and computes something else.",
    ),
    Mistake(
        "wrapper_width_not_per_head", "d_out given as the output's width instead of each head's",
        "MultiHeadAttentionWrapper concatenates num_heads outputs of d_out features each, so its outputs have "
        "num_heads * d_out features: for 2 features from 2 heads, each head's d_out is 1.",
    ),
)
