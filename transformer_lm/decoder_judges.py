"""Judges of assignment 06's answers whose records are not compared number by number (the
sliding-window mask, the size of a KV cache, the positions and mask of a left-padded batch, and
the tokens of padded generation), and the judge of rotary embeddings, whose tolerance grows with
the position.

Each is data (what the reference gave, and what catalogued mistakes give, on the check's inputs):
:mod:`transformer_lm.instructor.decoder_kinds` makes them with the reference, and :mod:`transformer_lm.stored`
keeps them for the visible checks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from transformer_lm import catalog
from transformer_lm.judging import ATOL, RTOL, RecordJudge, Verdict
from transformer_lm.verdict_texts import render

TEXTS = {
    "mask_shape": "{call:call} returned {got:text}; expected a boolean mask of shape {expected:shape}, True where a "
                  "query may look at a key.",
    "a_number": "a number",
    "shape": "shape {shape:shape}",
    "nothing": "nothing",
    "mask_passed": "Correct: causal, and at most window keys per query, itself included.",
    "row_wrong": "{call:call}: row {row:number} is wrong",
    "row_allows": " (it allows {got:numbers}, expected {expected:numbers})",
    "bytes_passed": "Correct: {expected:number} bytes.",
    "bytes_wrong": "{call:call} returned {got:text};",
    "not_a_number": "a value that is not a number",
    "bytes_expected": " expected {expected:number}",
    "not_that_size": " not the size of that cache",
    "element_size": " torch.{dtype:label} takes {size:number} bytes a number (torch.empty((), "
                    "dtype=dtype).element_size()).",
    "half": " Half the size: either only the keys or only the values are counted (a cache holds both, two vectors per "
            "layer, head and token), or each number is taken as {half:number} byte(s) where",
    "bits": " Eight times the size: bits, not bytes.",
    "times": " {ratio:number} times the size: each number is taken as {bytes:number} byte(s), where",
    "padding_shape": "{calls:call}: {what:text} {got:text}; expected shape {expected:shape}.",
    "positions_are": "the positions are",
    "mask_is": "the mask is",
    "padding_wrong": "{calls:call}: {what:text} wrong for prompt {row:number}",
    "padding_got": ": got {got:numbers}, expected {expected:numbers}",
    "padding_passed": "Correct: positions from each prompt's first token, and no query sees padding.",
    "pads_wrong": " The real tokens' positions are right; the pads' are not: the pads get 0, as a prompt's first "
                  "real token does.",
    "one_too_high": " Each real token's position is one too high: the first real token is at 0, one less than the "
                    "running count of real tokens up to it.",
    "tokens_passed": "Correct: each prompt's tokens in the padded batch are those it gets alone.",
    "rows": "{call:call} returned {rows:number} rows; expected one per prompt ({expected:number}).",
    "no_rows": "{call:call} returned no rows; expected one per prompt ({expected:number}).",
    "no_prompt": "{call:call}: row {row:number} does not start with its prompt (without padding).",
    "continues": "{call:call}: prompt {row:number} (of {tokens:number} tokens) continues differently in the batch "
                 "than alone",
    "continues_shown": " (got {got:numbers}, alone it gives {expected:numbers})",
    "continues_end": ". Generation runs your attention layer: if its check fails, fix that first.",
    "refused": "{call:call}: the model refused {why:text}. It runs the whole prompts once, then one new token per "
               "call with the caches the call before returned.",
    "refused_again": "a call without the caches after the prompt",
    "refused_positions": "a call with the caches that runs more than one new token per sequence",
    "refused_steps": "more calls after the prompt than new tokens to generate",
    "refused_other": "a call",
}
"""What the judges of assignment 06's masks, sizes, padded positions and tokens say
(:mod:`transformer_lm.verdict_texts`); a ``text`` slot holds another of these texts."""


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
            shape = TEXTS["a_number"] if got is None else render(TEXTS["shape"], shape=tuple(got.shape))
            return Verdict("failed", render(TEXTS["mask_shape"], call=self.call, got=shape,
                                            expected=tuple(self.expected.shape)))
        got = got.bool()
        if torch.equal(got, self.expected):
            return Verdict("passed", TEXTS["mask_passed"])
        row = int((got != self.expected).any(dim=-1).nonzero()[0])
        seen = render(TEXTS["row_allows"], got=got[row].int().tolist(), expected=self.expected[row].int().tolist()) \
            if values else ""
        mistake = self.mistake if any(torch.equal(got, w) for w in self.wrong) else None
        return Verdict("failed", render(TEXTS["row_wrong"], call=self.call, row=row) + seen + ".", mistake)


@dataclass
class BytesJudge:
    """A size in bytes (``call``) is ``expected``, for numbers of ``dtype`` that take
    ``element_size`` bytes each. A wrong size is explained by what it is a multiple of: half of it
    counts only the keys or the values, or takes each number at half its size (the two cannot be
    told apart from one size, so both are said); other multiples come from the size of a number. A
    size that is ``wrong`` names ``mistake``, the catalogued one that gives it (the keys counted
    without the values: the mistake students make; half a number's bytes is rare)."""

    call: str
    expected: int
    dtype: str = "bfloat16"
    element_size: int = 2
    wrong: int | None = None
    mistake: catalog.Mistake | None = None

    def __call__(self, record, value, values: bool) -> Verdict:
        if isinstance(value, (int, float)) and value == self.expected:
            return Verdict("passed", render(TEXTS["bytes_passed"], expected=self.expected))
        shown = render(TEXTS["bytes_expected"], expected=self.expected) if values else TEXTS["not_that_size"]
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        got = repr(value) if number or values else TEXTS["not_a_number"]  # a run's text is never quoted
        mistake = self.mistake if number and value == self.wrong else None
        return Verdict("failed", render(TEXTS["bytes_wrong"], call=self.call, got=got) + shown + "." + self._why(value),
                       mistake)

    def _why(self, value) -> str:
        if not isinstance(value, (int, float)) or not value:
            return ""
        size, ratio = self.element_size, value / self.expected
        number = render(TEXTS["element_size"], dtype=self.dtype, size=size)
        if ratio == 0.5:
            return render(TEXTS["half"], half=size // 2 or 0.5) + number
        if ratio == 8:
            return TEXTS["bits"] + number
        if (ratio * size) in (1, 2, 4, 8):
            return render(TEXTS["times"], ratio=f"{ratio:g}", bytes=f"{ratio * size:g}") + number
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
            what = TEXTS["positions_are" if key == "positions" else "mask_is"]
            if got is None or tuple(got.shape) != tuple(want.shape):
                shape = TEXTS["nothing"] if got is None else render(TEXTS["shape"], shape=tuple(got.shape))
                return Verdict("failed", render(TEXTS["padding_shape"], calls=self.calls, what=what, got=shape,
                                                expected=tuple(want.shape)))
            mistake = next((m for m, r in self.candidates.items()
                            if tuple(got.shape) == tuple(r[key].shape) and torch.equal(got.to(want.dtype), r[key].to(want.dtype))
                            and not torch.equal(r[key].to(want.dtype), want)), None)
            row = int((got.to(want.dtype) != want).flatten(1).any(dim=-1).nonzero()[0])
            detail = render(TEXTS["padding_got"], got=got[row].int().tolist(), expected=want[row].int().tolist()) \
                if values else ""
            hint = self._positions_hint(row, got[row].to(want.dtype), want[row]) if key == "positions" and not mistake \
                else ""
            return Verdict("failed", render(TEXTS["padding_wrong"], calls=self.calls, what=what, row=row) + detail + "."
                           + hint, mistake)
        return Verdict("passed", TEXTS["padding_passed"])

    def _positions_hint(self, row: int, got: torch.Tensor, want: torch.Tensor) -> str:
        """What prompt ``row``'s wrong positions (``got``) say, where a catalogued mistake does not:
        pads at other positions than the 0 the notebook pins, or real tokens counted from 1."""
        if self.attention_mask is None or self.attention_mask.shape[-1] != got.shape[-1]:
            return ""
        real = self.attention_mask[row].bool()
        if torch.equal(got[real], want[real]):
            return TEXTS["pads_wrong"]
        if bool(((got[real] - want[real]) == 1).all()):
            return TEXTS["one_too_high"]
        return ""


@dataclass
class PaddedTokensJudge:
    """Padded generation (``call``) gives each of the ``prompts`` the ``expected`` tokens it gets
    alone; tokens that a mistake gives (``candidates``) name it. A call of the model that it
    refused (``{"refused": why}``, what the run says of itself) fails, naming ``refused``: the run
    could hide a refusal, never turn one into a pass."""

    call: str
    prompts: list[list[int]]
    expected: list[list[int]]
    candidates: dict[catalog.Mistake, list[list[int]]]
    refused: catalog.Mistake | None = None

    def __call__(self, record, value, values: bool) -> Verdict:
        if value == self.expected:
            return Verdict("passed", TEXTS["tokens_passed"])
        if isinstance(value, dict):
            return self._refused(f"refused_{value.get('refused')}")
        if not isinstance(value, list) or len(value) != len(self.expected):
            return Verdict("failed", render(TEXTS["rows"], call=self.call, rows=len(value), expected=len(self.expected))
                           if isinstance(value, list) else render(TEXTS["no_rows"], call=self.call,
                                                                  expected=len(self.expected)))
        row = next(i for i, (got, want) in enumerate(zip(value, self.expected)) if got != want)
        prompt = self.prompts[row]
        if value[row][:len(prompt)] != prompt:
            return Verdict("failed", render(TEXTS["no_prompt"], call=self.call, row=row))
        mistake = next((m for m, tokens in self.candidates.items() if tokens == value), None)
        shown = render(TEXTS["continues_shown"], got=value[row], expected=self.expected[row]) if values else ""
        return Verdict("failed", render(TEXTS["continues"], call=self.call, row=row, tokens=len(prompt)) + shown
                       + TEXTS["continues_end"], mistake)

    def _refused(self, why: str) -> Verdict:
        """The failure of a generation whose call the model refused for ``why`` (a key of
        :data:`TEXTS`): one that runs the sequence again names ``refused``."""
        known = why if why in TEXTS else "refused_other"
        again = known in ("refused_again", "refused_positions")
        return Verdict("failed", render(TEXTS["refused"], call=self.call, why=TEXTS[known]),
                       self.refused if again else None)


FLOAT32_TURN = 4 * 2.0 ** -23
"""How far an angle ``p * ω`` (``ω <= 1``) computed in float32 may be from the exact one, in
radians per unit of ``p``: ``ω`` rounded to float32 and the product rounded are each off by at most
``2**-24`` of the product, so the angle by at most ``p * 2**-23``; four times that leaves room for
a power computed a few units off. Measured on four float32 writings at positions 300 and 3000:
at most ``0.2 * p * 2**-23``."""


@dataclass
class RopeJudge(RecordJudge):
    """The values of rotary embeddings at positions up to ``last_position``. Turning a pair
    ``(x[i], x[i + d/2])`` by an angle off by δ moves it by at most δ times the pair's length, so an
    answer whose angles are computed in float32 (as Llama's code in Hugging Face transformers
    does), where the reference computes them in float64, is off by up to
    :data:`FLOAT32_TURN` times the position times the longest pair: that is added to the
    tolerance. The same holds for the gradient of ``x``, turned back by the same angles."""

    last_position: int = 0

    def tolerance(self) -> dict[str, float]:
        longest = max(float(pair_lengths(value).max()) for value in self.expected.values())
        return {"rtol": RTOL, "atol": ATOL + FLOAT32_TURN * self.last_position * longest}


def pair_lengths(values: torch.Tensor) -> torch.Tensor:
    """The length of each half-split pair ``(values[..., i], values[..., i + d/2])``."""
    first, second = values.double().chunk(2, dim=-1)
    return torch.hypot(first, second)


JUDGES = (MaskJudge, BytesJudge, PaddingJudge, PaddedTokensJudge, RopeJudge)
