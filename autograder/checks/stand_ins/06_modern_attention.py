"""The course's answers of assignment 06 in the notebook's API, built on the reference: the
attention layer builds on ``apply_rope`` and ``sliding_window_mask``, padded generation on the
layer, so that one mistake costs points once (see :mod:`autograder.running.harness`)."""

from transformer_lm.instructor import reference


def apply_rope(x, positions, base=10000.0):
    return reference.apply_rope(x, positions, base)


def sliding_window_mask(query_len, key_len, window):
    return reference.sliding_window_mask(query_len, key_len, window=window)


class GroupedQueryAttention(reference.GroupedQueryAttention):
    def __init__(self, d_model, n_heads, n_kv_heads, rope_base=10000.0, window=None):
        super().__init__(d_model, n_heads, n_kv_heads, rope_base=rope_base, window=window)
