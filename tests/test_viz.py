"""Attention heat maps draw what they are given, never a softmax of it."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

from transformer_lm.instructor import reference  # noqa: E402
from transformer_lm.sandboxed import viz  # noqa: E402


def test_one_head_shows_the_weights_as_they_are(tmp_path):
    weights = reference.masked_softmax(torch.randn(4, 4).masked_fill(~reference.causal_mask(4), float("-inf")))
    ax = viz.plot_attention(weights, ["a", "b", "c", "d"], title="causal")
    shown = ax.images[0].get_array()
    assert torch.allclose(torch.as_tensor(shown.data), weights)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c", "d"]
    ax.figure.savefig(tmp_path / "one.png")


def test_all_heads_of_one_sequence_side_by_side(tmp_path):
    weights = torch.softmax(torch.randn(3, 5, 5), dim=-1)
    fig = viz.plot_heads(weights, title="three heads")
    assert len(fig.axes) == 3 + 1  # three heads and one colour bar
    fig.savefig(tmp_path / "heads.png")


def test_a_batch_is_refused_with_a_clear_message():
    with pytest.raises(ValueError, match="one \\(queries, keys\\) matrix"):
        viz.plot_attention(torch.rand(2, 3, 3))
