"""Judges of assignment 06's answers whose records are not compared number by number: the
sliding-window mask, the size of a KV cache, the positions and mask of a left-padded batch, and
the tokens of padded generation.

Each is data (what the reference gave, and what catalogued mistakes give, on the check's inputs):
:mod:`transformer_lm.decoder_kinds` makes them with the reference, and :mod:`transformer_lm.stored`
keeps them for the visible checks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from transformer_lm import catalog
from transformer_lm.judging import Verdict


@dataclass
class MaskJudge:
    """A boolean mask (``call``) is ``expected``; one of the ``wrong`` masks is ``mistake``."""

    call: str
    expected: torch.Tensor
    wrong: list[torch.Tensor]
    mistake: catalog.Mistake

    def __call__(self, record, value, values: bool) -> Verdict:
        got = record.get("output")
        if got is None or tuple(got.shape) != tuple(self.expected.shape):
            shape = "a number" if got is None else f"shape {tuple(got.shape)}"
            return Verdict("failed", f"{self.call} returned {shape}; expected a boolean mask of shape "
                                     f"{tuple(self.expected.shape)}, True where a query may look at a key.")
        got = got.bool()
        if torch.equal(got, self.expected):
            return Verdict("passed", "Correct: causal, and at most window keys per query, itself included.")
        row = int((got != self.expected).any(dim=-1).nonzero()[0])
        seen = f" (it allows {got[row].int().tolist()}, expected {self.expected[row].int().tolist()})" if values else ""
        mistake = self.mistake if any(torch.equal(got, w) for w in self.wrong) else None
        return Verdict("failed", f"{self.call}: row {row} is wrong{seen}.", mistake)


@dataclass
class BytesJudge:
    """A size in bytes (``call``) is ``expected``; half of it counts only the keys or the values."""

    call: str
    expected: int

    def __call__(self, record, value, values: bool) -> Verdict:
        if not isinstance(value, (int, float)) or value != self.expected:
            why = " Count the keys and the values: two vectors per layer, head and token." \
                if value == self.expected / 2 else ""
            shown = f" expected {self.expected}" if values else ""
            return Verdict("failed", f"{self.call} returned {value!r};{shown or ' not the size of that cache'}.{why}")
        return Verdict("passed", f"Correct: {self.expected} bytes.")


@dataclass
class PaddingJudge:
    """A left-padded batch's ``positions`` and ``mask`` (``calls``) are the ``expected`` ones; the
    mistake whose record (``candidates``) they are instead is named."""

    calls: str
    expected: dict[str, torch.Tensor]
    candidates: dict[catalog.Mistake, dict[str, torch.Tensor]]

    def __call__(self, record, value, values: bool) -> Verdict:
        for key in ("positions", "mask"):
            got, want = record.get(key), self.expected[key]
            if got is not None and tuple(got.shape) == tuple(want.shape) and torch.equal(got.to(want.dtype), want):
                continue
            what = {"positions": "the positions are", "mask": "the mask is"}[key]
            if got is None or tuple(got.shape) != tuple(want.shape):
                shape = "nothing" if got is None else f"shape {tuple(got.shape)}"
                return Verdict("failed", f"{self.calls}: {what} {shape}; expected shape {tuple(want.shape)}.")
            mistake = next((m for m, r in self.candidates.items()
                            if tuple(got.shape) == tuple(r[key].shape) and torch.equal(got.to(want.dtype), r[key].to(want.dtype))
                            and not torch.equal(r[key].to(want.dtype), want)), None)
            row = int((got.to(want.dtype) != want).flatten(1).any(dim=-1).nonzero()[0])
            detail = f": got {got[row].int().tolist()}, expected {want[row].int().tolist()}" if values else ""
            return Verdict("failed", f"{self.calls}: {what} wrong for prompt {row}{detail}.", mistake)
        return Verdict("passed", "Correct: positions from each prompt's first token, and no query sees padding.")


@dataclass
class PaddedTokensJudge:
    """Padded generation (``call``) gives each of the ``prompts`` the ``expected`` tokens it gets
    alone; tokens that a mistake gives (``candidates``) name it."""

    call: str
    prompts: list[list[int]]
    expected: list[list[int]]
    candidates: dict[catalog.Mistake, list[list[int]]]

    def __call__(self, record, value, values: bool) -> Verdict:
        if value == self.expected:
            return Verdict("passed", "Correct: each prompt's tokens in the padded batch are those it gets alone.")
        if not isinstance(value, list) or len(value) != len(self.expected):
            return Verdict("failed", f"{self.call} returned {len(value) if isinstance(value, list) else 'no'} rows; "
                                     f"expected one per prompt ({len(self.expected)}).")
        row = next(i for i, (got, want) in enumerate(zip(value, self.expected)) if got != want)
        prompt = self.prompts[row]
        if value[row][:len(prompt)] != prompt:
            return Verdict("failed", f"{self.call}: row {row} does not start with its prompt (without padding).")
        mistake = next((m for m, tokens in self.candidates.items() if tokens == value), None)
        shown = f" (got {value[row]}, alone it gives {self.expected[row]})" if values else ""
        return Verdict("failed", f"{self.call}: prompt {row} (of {len(prompt)} tokens) continues differently in the "
                                 f"batch than alone{shown}. Generation runs your attention layer: if its check "
                                 "fails, fix that first.", mistake)


JUDGES = (MaskJudge, BytesJudge, PaddingJudge, PaddedTokensJudge)
