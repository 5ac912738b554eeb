"""What a failing check says, in the student's words: where two tensors first differ, the size of
a KV cache, positions of a padded batch, two empty softmax parts, the cache a layer returns, the
call a rotary embedding failed on, and nothing raw when a test cell ends with a check. (The
backward's named mistakes, D left out and dk without the scale, are in assignment 05's audit bank,
which the audit and tests/test_visible_and_hidden_agree.py run.)"""

from __future__ import annotations

import nbformat
import pytest
import torch
from nbclient import NotebookClient

from transformer_lm import checks
from transformer_lm.instructor import reference
from transformer_lm.decoder_judges import BytesJudge
from transformer_lm.judging import CheckFailed, difference


def refusal(group: str, *answers, **named) -> str:
    with pytest.raises(CheckFailed) as failed:
        checks.check(group, *answers, **named)
    return str(failed.value)


def test_previews_start_where_the_tensors_first_differ():
    expected = torch.arange(20.0).view(4, 5)
    got = expected.clone()
    got[2, 1] += 1
    got[3, 4] += 5
    message = difference("output", got, expected)
    assert "largest error is 5 at index (3, 4)" in message
    assert "from index (2, 1), where they first differ" in message
    assert "expected [..., 11, 12," in message and "got      [..., 12, 12," in message


@pytest.mark.parametrize("shape", [(7,), (2, 3, 4), (1, 5, 1, 3), (4, 1)])
def test_every_position_is_named_by_the_index_torch_gives_it(shape):
    """The messages' index is row-major, as ``torch.unravel_index`` has it (which the judge no longer
    calls: its first call imports sympy)."""
    expected = torch.zeros(shape)
    for flat in range(expected.numel()):
        got = expected.clone()
        got.view(-1)[flat] = 1.0
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), shape))
        assert f"largest error is 1 at index {index}" in difference("output", got, expected)


@pytest.mark.parametrize("value, words", [
    (500, ("only the keys or only the values", "2 byte(s) where torch.float32 takes 4 bytes")),
    (8000, ("bits, not bytes",)),
    (250, ("taken as 1 byte(s)",)),
])
def test_a_wrong_cache_size_is_explained_by_its_multiple(value, words):
    message = BytesJudge("kv_cache_bytes(...)", 1000, "float32", 4)({}, value, True).message
    assert all(word in message for word in words), message


def padded_attention_mask(attention_mask, query_len=None):
    return reference.padded_causal_mask(attention_mask, query_len or attention_mask.shape[-1])


@pytest.mark.parametrize("positions, words", [
    (lambda mask: mask.long().cumsum(-1), "one too high"),
    (lambda mask: mask.long().cumsum(-1) - 1, "the pads get 0"),
    (lambda mask: torch.arange(mask.shape[-1]).expand(mask.shape), "positions counted from the padding"),
])
def test_wrong_positions_of_a_padded_batch_are_explained(positions, words):
    def padded_positions(attention_mask):
        return positions(attention_mask)
    assert words in refusal("padding", padded_positions, padded_attention_mask)


def test_two_empty_softmax_parts_merged_into_nan_are_named():
    def merge_stats(max_a, sum_a, max_b, sum_b):
        maximum = torch.maximum(max_a, max_b)
        return maximum, sum_a * torch.exp(max_a - maximum) + sum_b * torch.exp(max_b - maximum)
    message = refusal("merge_stats", merge_stats)
    assert "NaN" in message and "two empty parts merged into NaN" in message


class CacheAfterTheCopy(reference.GroupedQueryAttention):
    """Right output; the cache returned after each key/value head was copied for its group."""

    def forward(self, x, positions, attn_mask=None, cache=None):
        out, (k, v) = super().forward(x, positions, attn_mask, cache)
        groups = self.n_heads // self.n_kv_heads
        return out, (k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1))


def test_the_layers_returned_cache_is_checked_with_task_3():
    message = refusal("grouped_query_attention", GroupedQueryAttention=CacheAfterTheCopy)
    assert "the returned cache's keys" in message and "before the copy for the groups" in message


def test_an_error_of_apply_rope_says_which_call_it_was():
    def apply_rope(x, positions, base=10000.0):   # angles (B, T, d/2) never given the heads' dimension
        d = x.shape[-1]
        angles = positions.double().unsqueeze(-1) * base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        angles = torch.cat((angles, angles), dim=-1)
        return x * angles.cos().to(x.dtype) + reference.rotate_half(x) * angles.sin().to(x.dtype)
    message = refusal("apply_rope", apply_rope)
    assert "positions of shape (3, 4), one row per sequence" in message and "(B, 1, T, d)" in message
    assert "raised RuntimeError" in message


def test_a_test_cell_that_ends_with_a_check_shows_no_raw_verdict():
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("from transformer_lm import checks\n"
                                                "def kv_cache_bytes(n_layers, n_kv_heads, head_dim, seq_len, batch, "
                                                "dtype):\n"
                                                "    return 2 * n_layers * n_kv_heads * head_dim * seq_len * batch "
                                                "* dtype.itemsize\n"
                                                "checks.check('kv_cache_bytes', kv_cache_bytes)")]
    NotebookClient(notebook, timeout=120, kernel_name="python3").execute()
    outputs = notebook.cells[0].outputs
    assert [o.output_type for o in outputs] == ["stream"], outputs
    assert "Verdict(" not in outputs[0].text and "Correct" in outputs[0].text
