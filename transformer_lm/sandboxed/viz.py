"""Attention heat maps with matplotlib.

The weights must already be probabilities (rows summing to 1, or 0 for a fully masked row);
these functions never apply a softmax, so a plot shows exactly what the model computed.
Rows are queries (the token that looks), columns are keys (the tokens looked at).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import torch


def _as_array(weights):
    if isinstance(weights, torch.Tensor):
        weights = weights.detach().float().cpu().numpy()
    if weights.ndim != 2:
        raise ValueError(f"expected one (queries, keys) matrix, got shape {tuple(weights.shape)}")
    return weights


def plot_attention(weights, tokens: list[str] | None = None, *, ax=None, title: str | None = None,
                   colorbar: bool = True):
    """Draws one head's ``(queries, keys)`` weights on ``ax`` (a new figure when None)."""
    matrix = _as_array(weights)
    if ax is None:
        _, ax = plt.subplots(figsize=(3.2 + 0.3 * matrix.shape[1], 2.8 + 0.3 * matrix.shape[0]))
    image = ax.imshow(matrix, cmap="viridis", vmin=0.0, vmax=1.0)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    if tokens is not None:
        ax.set_xticks(range(len(tokens)), tokens, rotation=90)
        ax.set_yticks(range(len(tokens)), tokens)
    if title:
        ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return ax


def plot_heads(weights, tokens: list[str] | None = None, *, title: str | None = None):
    """Draws every head of one sequence, ``(heads, queries, keys)``, side by side; returns the figure."""
    heads = weights.shape[0]
    fig, axes = plt.subplots(1, heads, figsize=(3.2 * heads + 0.8, 3.4), squeeze=False)
    for h, ax in enumerate(axes[0]):
        plot_attention(weights[h], tokens, ax=ax, title=f"head {h}", colorbar=h == heads - 1)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
