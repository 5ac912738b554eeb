"""Random weights for tests: what the checks load into a student's module, and what a notebook's
test cell draws for PyTorch's own layers before comparing a student's copy of them."""

from __future__ import annotations

import torch


def randomize(module: torch.nn.Module, generator: torch.Generator, scale: float = 0.3) -> torch.nn.Module:
    """Draws every parameter of ``module`` from ``generator``, so tests see weights that no
    initialisation scheme would give (LayerNorm's weights included)."""
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * scale)
    return module
