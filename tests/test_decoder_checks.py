"""Assignment 06's check kinds (transformer_lm/decoder_kinds.py): the course's own code passes
every visible check, and each catalogued mistake of rotary embeddings, grouped-query attention
and sliding windows is caught and named by the visible check that concerns it."""

import pytest
import torch

from transformer_lm import checks, mistakes, reference
from transformer_lm.judging import CheckFailed


class GroupedQueryAttention(reference.GroupedQueryAttention):
    """The reference in the notebook's API, with ``flaws`` in its forward when a test gives some."""

    flaws = mistakes.DecoderFlaws()

    def __init__(self, d_model, n_heads, n_kv_heads, rope_base=10000.0, window=None):
        super().__init__(d_model, n_heads, n_kv_heads, rope_base=rope_base, window=window)

    def forward(self, x, positions, attn_mask=None, cache=None):
        if attn_mask is None:
            attn_mask = mistakes.flawed_sliding_window_mask(x.shape[-2], x.shape[-2], self.window, self.flaws) \
                if self.window else reference.causal_mask(x.shape[-2])
        return mistakes.flawed_grouped_query_attention(self, x, positions, attn_mask, self.flaws), None


def with_flaws(flaws):
    return type("GroupedQueryAttention", (GroupedQueryAttention,), {"flaws": flaws})


def apply_rope(x, positions, base=10000.0):
    return reference.apply_rope(x, positions, base)


def sliding_window_mask(query_len, key_len, window):
    return reference.sliding_window_mask(query_len, key_len, window=window)


def kv_cache_bytes(n_layers, n_kv_heads, head_dim, seq_len, batch=1, dtype=torch.bfloat16):
    return reference.kv_cache_bytes(n_layers, n_kv_heads, head_dim, seq_len, batch, dtype)


def test_the_course_code_passes_every_visible_check():
    assert checks.check_rope(apply_rope).passed
    assert checks.check_grouped_query_attention(GroupedQueryAttention).passed
    assert checks.check_sliding_window_mask(sliding_window_mask).passed
    assert checks.check_kv_cache_bytes(kv_cache_bytes).passed


@pytest.mark.parametrize("mistake", mistakes.decoder_mistakes("rope"), ids=lambda m: m.name)
def test_every_rope_mistake_is_caught_and_named(mistake):
    def apply_rope(x, positions, base=10000.0):
        return mistakes.flawed_apply_rope(x, positions, base, mistake.flaws)

    with pytest.raises(CheckFailed) as failure:
        checks.check_rope(apply_rope)
    assert mistake.title in str(failure.value), str(failure.value)


@pytest.mark.parametrize("mistake", mistakes.decoder_mistakes("gqa") + mistakes.decoder_mistakes("window"),
                         ids=lambda m: m.name)
def test_every_mistake_of_the_attention_layer_is_caught_and_named(mistake):
    with pytest.raises(CheckFailed) as failure:
        checks.check_grouped_query_attention(with_flaws(mistake.flaws))
    assert mistake.title in str(failure.value), str(failure.value)


@pytest.mark.parametrize("step", [1, -1])
def test_a_window_off_by_one_either_way_is_named(step):
    def sliding_window_mask(query_len, key_len, window):
        return reference.sliding_window_mask(query_len, key_len, window=window + step)

    with pytest.raises(CheckFailed, match="the sliding window off by one"):
        checks.check_sliding_window_mask(sliding_window_mask)


def test_a_cache_size_without_the_values_is_told_to_count_them():
    def kv_cache_bytes(n_layers, n_kv_heads, head_dim, seq_len, batch=1, dtype=torch.bfloat16):
        return n_layers * n_kv_heads * head_dim * seq_len * batch * torch.empty((), dtype=dtype).element_size()

    with pytest.raises(CheckFailed, match="Count the keys and the values"):
        checks.check_kv_cache_bytes(kv_cache_bytes)
