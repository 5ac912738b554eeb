"""Test cases: the sizes and switches of one check, and the random tensors drawn for it.

A case says what to test (an attention layer of these sizes, causal or not, with a mask or not);
an API (:class:`AttentionAPI`, filled in for each assignment in :mod:`transformer_lm.instructor.adapters`)
says how one assignment's class is built and called for it. Visible checks draw a case's tensors
from a fixed seed, the grader from the course's secret.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch

from transformer_lm.instructor import reference
from transformer_lm.instructor.reference import AttentionWeights

@dataclass(frozen=True, kw_only=True)
class AttentionCase:
    """The sizes and switches of one attention test. ``batch=None`` feeds a single
    sequence ``(seq, d_in)`` instead of a batch ``(batch, seq, d_in)``."""

    batch: int | None
    seq: int
    d_in: int
    d_out: int
    num_heads: int = 1
    causal: bool = False
    bias: bool = True
    out_proj: bool = False
    mask: str | None = None  # None, "bool" (True = may attend) or "float" (added to the scores)
    dropout: float = 0.0
    context_length: int | None = None  # room for longer sequences than seq, where the class has a mask buffer
    d_value: int | None = None  # width of the values (and outputs) when it differs from d_out (queries, keys)

    @property
    def out_width(self) -> int:
        return self.d_value or self.d_out

    @property
    def features(self) -> frozenset[str]:
        """What this case can reveal, in the terms of :attr:`Mistake.shows_with`."""
        on = {"heads": self.num_heads > 1, "causal": self.causal, "mask": self.mask is not None,
              "projection": self.out_proj, "dropout": self.dropout > 0, "bias": self.bias,
              "float_mask": self.mask == "float", "several_tokens": self.seq > 1,
              "concatenated": self.num_heads > 1 and not self.out_proj,
              "input_width": self.d_in != self.d_out // self.num_heads,   # x's width is not one head's
              "size_one": 1 in (self.batch, self.seq, self.num_heads, self.out_width)}
        return frozenset(name for name, present in on.items() if present)


@dataclass(frozen=True)
class AttentionAPI:
    """How one student attention class is built and called, for :func:`attention_records`.

    ``state`` turns reference weights into the student's parameters by name (it is applied to
    gradients too, so it must only select, transpose, slice or stack). ``weights_layout``
    turns reference attention weights ``(..., heads, seq, seq)`` into what the class returns.
    ``names`` are the notebook's names for the shapes that hints speak of.
    """

    init: Callable[[AttentionCase], dict]
    state: Callable[[AttentionWeights, AttentionCase], dict[str, torch.Tensor]] | None = None
    call_kwargs: Callable[[AttentionCase], dict] = lambda case: {}
    mask_arg: str | None = None
    weights_layout: Callable[[torch.Tensor, AttentionCase], torch.Tensor] | None = None
    names: dict[str, str] | None = None  # the notebook's names for shapes, in hints (transformer_lm.catalog.NAMES)


@dataclass
class CaseTensors:
    """Concrete inputs for one :class:`AttentionCase`, drawn from one generator."""

    weights: AttentionWeights
    x: torch.Tensor
    grad_output: torch.Tensor
    mask: torch.Tensor | None = None
    extra: dict = field(default_factory=dict)


def make_case_tensors(case: AttentionCase, generator: torch.Generator) -> CaseTensors:
    """Random weights, input, mask and upstream gradient for ``case``."""
    def randn(*shape):
        return torch.randn(*shape, generator=generator) / math.sqrt(shape[-1] if len(shape) > 1 else 1)

    d_in, d_out, d_v = case.d_in, case.d_out, case.out_width
    weights = AttentionWeights(
        randn(d_out, d_in), randn(d_out, d_in), randn(d_v, d_in),
        *((randn(d_out), randn(d_out), randn(d_v)) if case.bias else (None, None, None)),
        *((randn(d_v, d_v), randn(d_v)) if case.out_proj else (None, None)),
    )
    lead = () if case.batch is None else (case.batch,)
    x = torch.randn(*lead, case.seq, d_in, generator=generator)
    grad_output = torch.randn(*lead, case.seq, d_v, generator=generator)
    mask = None
    if case.mask is not None:
        keep = torch.rand(case.seq, case.seq, generator=generator) < 0.7
        kept = torch.randint(case.seq, (case.seq,), generator=generator)
        keep[torch.arange(case.seq), kept] = True
        if case.seq > 1 and bool(keep.all()):   # a mask that blocks nothing would test nothing
            keep[0, (kept[0] + 1) % case.seq] = False
        mask = keep if case.mask == "bool" else torch.zeros(case.seq, case.seq).masked_fill(~keep, float("-inf"))
    return CaseTensors(weights, x, grad_output, mask)


def linear_shapes(names: str, input_size: int, hidden: int, bias: bool = True) -> dict[str, tuple[int, ...]]:
    """The parameter shapes of layers ``nn.Linear(input_size, hidden, bias=bias)`` named by the
    letters of ``names``: what a check of a constructor expects, or what one of its mistakes makes."""
    shapes = {}
    for name in names:
        shapes.update({f"{name}.weight": (hidden, input_size), **({f"{name}.bias": (hidden,)} if bias else {})})
    return shapes


@dataclass(frozen=True, kw_only=True)
class BlockCase:
    """The sizes of one transformer block test (``nn.TransformerEncoderLayer``'s names)."""

    batch: int
    seq: int
    model_dim: int
    num_heads: int
    ff_dim: int
    norm_first: bool = False
    activation: str = "relu"

    def config(self) -> reference.GPTConfig:
        return reference.GPTConfig(n_embd=self.model_dim, n_head=self.num_heads, block_size=self.seq,
                                   ff_dim=self.ff_dim, activation=self.activation, norm_first=self.norm_first)
