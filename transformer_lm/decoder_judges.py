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
    """A size in bytes (``call``) is ``expected``, for numbers of ``dtype`` that take
    ``element_size`` bytes each. A wrong size is explained by what it is a multiple of: half of it
    counts only the keys or the values, or takes each number at half its size (the two cannot be
    told apart from one size, so both are said); other multiples come from the size of a number."""

    call: str
    expected: int
    dtype: str = "bfloat16"
    element_size: int = 2

    def __call__(self, record, value, values: bool) -> Verdict:
        if isinstance(value, (int, float)) and value == self.expected:
            return Verdict("passed", f"Correct: {self.expected} bytes.")
        shown = f" expected {self.expected}" if values else ""
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        got = repr(value) if number or values else "a value that is not a number"  # a run's text is never quoted
        return Verdict("failed", f"{self.call} returned {got};{shown or ' not the size of that cache'}."
                                 f"{self._why(value)}")

    def _why(self, value) -> str:
        if not isinstance(value, (int, float)) or not value:
            return ""
        size, ratio = self.element_size, value / self.expected
        number = f" torch.{self.dtype} takes {size} bytes a number (torch.empty((), dtype=dtype).element_size())."
        if ratio == 0.5:
            return (" Half the size: either only the keys or only the values are counted (a cache holds both, two "
                    f"vectors per layer, head and token), or each number is taken as {size // 2 or 0.5} byte(s) "
                    f"where{number}")
        if ratio == 8:
            return f" Eight times the size: bits, not bytes.{number}"
        if (ratio * size) in (1, 2, 4, 8):
            return f" {ratio:g} times the size: each number is taken as {ratio * size:g} byte(s), where{number}"
        return ""


@dataclass
class PaddingJudge:
    """A left-padded batch's ``positions`` and ``mask`` (``calls``) are the ``expected`` ones; the
    mistake whose record (``candidates``) they are instead is named."""

    calls: str
    expected: dict[str, torch.Tensor]
    candidates: dict[catalog.Mistake, dict[str, torch.Tensor]]
    attention_mask: torch.Tensor | None = None   # (B, T): where the pads are, which the positions' hints need

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
            hint = self._positions_hint(row, got[row].to(want.dtype), want[row]) if key == "positions" and not mistake \
                else ""
            return Verdict("failed", f"{self.calls}: {what} wrong for prompt {row}{detail}.{hint}", mistake)
        return Verdict("passed", "Correct: positions from each prompt's first token, and no query sees padding.")

    def _positions_hint(self, row: int, got: torch.Tensor, want: torch.Tensor) -> str:
        """What prompt ``row``'s wrong positions (``got``) say, where a catalogued mistake does not:
        pads at other positions than the 0 the notebook pins, or real tokens counted from 1."""
        if self.attention_mask is None or self.attention_mask.shape[-1] != got.shape[-1]:
            return ""
        real = self.attention_mask[row].bool()
        if torch.equal(got[real], want[real]):
            return " The real tokens' positions are right; the pads' are not: the pads get 0, " \
                   "(attention_mask.cumsum(-1) - 1).clamp(min=0)."
        if bool(((got[real] - want[real]) == 1).all()):
            return " Each real token's position is one too high: the first real token is at 0, so subtract 1 " \
                   "from the running count, (attention_mask.cumsum(-1) - 1).clamp(min=0)."
        return ""


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
