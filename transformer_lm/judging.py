"""Judging a probe's record against the reference's: the course's tolerance policy, in one place.

Tolerance policy (float32, the same everywhere): ``|got - expected| <= ATOL + RTOL * |expected|``
element-wise, for outputs and for gradients. Shapes are compared first, then values, then
gradients. When an answer is wrong, :func:`identify_mistake` compares it with the records that
the catalogued mistakes give on the same inputs (:mod:`transformer_lm.mistakes` computes them),
so that the message can name the mistake (:mod:`transformer_lm.catalog`). Visible checks in the
student's kernel and the grader's trusted process judge with these same functions; only the grader hides expected values (``values=False``).
"""

from __future__ import annotations

import builtins

import math
import sys
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path

import torch

from transformer_lm import catalog

RTOL = 1e-4


ATOL = 1e-5


class CheckFailed(AssertionError):
    """A visible check failed; the message is written for the student.

    In Jupyter it shows as that message alone (IPython asks an exception for
    ``_render_traceback_`` before it formats one), not the course package's own frames; when the
    student's code raised the error behind it, the lines of the student's code follow."""

    def _render_traceback_(self) -> list[str]:
        lines = [f"\x1b[0;31mCheckFailed\x1b[0m: {self}"]
        cause = self.__cause__
        frames = [f for f in traceback.extract_tb(cause.__traceback__) if _written_by_student(f.filename)] \
            if cause is not None else []
        if frames:
            lines += ["", "Where your code raised it:", *"".join(traceback.format_list(frames)).rstrip().split("\n"),
                      f"{type(cause).__name__}: {cause}"]
        return lines


_LIBRARIES = tuple(str(Path(path).resolve()) for path in
                   {Path(__file__).parent, Path(torch.__file__).parent, sys.prefix, sys.base_prefix})


def _written_by_student(filename: str) -> bool:
    """Whether a traceback's file is notebook code (a cell), not the course package, torch or Python's."""
    return not str(Path(filename).resolve()).startswith(_LIBRARIES)


def _show(t: torch.Tensor, start: int = 0, limit: int = 6) -> str:
    """``limit`` numbers of ``t`` (flattened) from position ``start``, as a short list."""
    values = t.flatten()[start:start + limit].tolist()
    before = "..., " if start else ""
    more = ", ..." if t.numel() > start + limit else ""
    return "[" + before + ", ".join(f"{v:.6g}" for v in values) + more + "]"


def difference(name: str, got: torch.Tensor, expected: torch.Tensor,
               rtol: float = RTOL, atol: float = ATOL, values: bool = True) -> str | None:
    """None when ``got`` matches ``expected``; otherwise a sentence that says how it differs.
    With ``values=False`` (hidden checks) it names the largest error but lists no values."""
    if tuple(got.shape) != tuple(expected.shape):
        return f"{name} has shape {tuple(got.shape)}, expected {tuple(expected.shape)}."
    if not got.is_floating_point():
        got = got.to(expected.dtype)
    got64, expected64 = got.double(), expected.double()
    nan_got, nan_expected = torch.isnan(got64), torch.isnan(expected64)
    if not torch.equal(nan_got, nan_expected):
        if (nan_got & ~nan_expected).any():
            where = tuple(torch.nonzero(nan_got & ~nan_expected)[0].tolist())
            return (f"{name} contains NaN (first at index {where}). A row whose every score is -inf "
                    f"gives NaN after the softmax; so does a softmax over the wrong dimension of a masked row.")
        return f"{name} has numbers where NaN was expected."
    error = torch.where(got64 == expected64, 0.0, (got64 - expected64).abs()).masked_fill(nan_got, 0.0)  # inf == inf
    allowed = (atol + rtol * expected64.abs()).masked_fill(nan_expected, math.inf)
    if bool((error <= allowed).all()):
        return None
    worst = int(torch.argmax(error - allowed))
    message = f"{name} has the right shape {tuple(got.shape)} but wrong values: the largest error is " \
              f"{error.flatten()[worst].item():.3g} at index {_index(worst, got.shape)}"
    if not values:
        return message + "."
    first = int(torch.nonzero((error > allowed).flatten())[0])   # the previews start where they first differ
    return (message + f" (expected {expected64.flatten()[worst].item():.6g}, got {got64.flatten()[worst].item():.6g})."
            f"\n  from index {_index(first, got.shape)}, where they first differ:"
            f"\n  expected {_show(expected, first)}\n  got      {_show(got, first)}")


def _index(flat: int, shape: torch.Size) -> tuple[int, ...]:
    """The index of position ``flat`` of a tensor of ``shape`` (flattened)."""
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), shape)) if len(shape) else ()


@dataclass
class Verdict:
    """The judgement of one check: ``passed`` or ``failed``, a message and, if named, a mistake."""

    status: str
    message: str
    mistake: catalog.Mistake | None = None
    names: dict[str, str] | None = None  # the notebook's names for shapes, which the hint speaks

    @property
    def hint(self) -> str:
        return self.mistake.hint_in(self.names) if self.mistake else ""

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def _ipython_display_(self) -> None:
        """What a notebook shows when a test cell ends with a check: nothing more, since the check
        printed its message already (and raised if it failed), never the raw ``Verdict(...)``."""

    def raise_if_failed(self) -> None:
        if not self.passed:
            hint = f"\nLikely mistake: {self.mistake.title}.\n  {self.hint}" if self.mistake else ""
            raise CheckFailed(self.message + hint)


def _changes_between_calls(got: dict[str, torch.Tensor], rtol: float, atol: float) -> bool:
    """Whether two calls in eval mode on the same input gave different outputs (dropout left on)."""
    return "output_again" in got and difference("output", got["output_again"], got["output"], rtol, atol) is not None


def identify_mistake(got: dict[str, torch.Tensor], candidates: dict[catalog.Mistake, dict[str, torch.Tensor]],
                     rtol: float = RTOL, atol: float = ATOL) -> catalog.Mistake | None:
    """The first catalogued mistake whose record matches ``got`` on every tensor it holds."""
    if _changes_between_calls(got, rtol, atol):
        return catalog.BY_NAME["dropout_in_eval"]
    for mistake, record in candidates.items():
        if all(key in got and difference(key, got[key], value, rtol, atol) is None for key, value in record.items()):
            return mistake
    return None


def judge(got: dict[str, torch.Tensor], expected: dict[str, torch.Tensor],
          candidates: dict[catalog.Mistake, dict[str, torch.Tensor]] | None = None,
          rtol: float = RTOL, atol: float = ATOL, values: bool = True, labels: dict[str, str] | None = None) -> Verdict:
    """Compares a probe's record with the expected one: output, then weights, then gradients.
    ``values=False`` keeps expected values out of the message (for hidden checks); ``labels``
    names keys in the message (a gradient's key ``grad.x`` reads "the gradient of x")."""
    order = sorted(expected, key=lambda k: (k != "output", k.startswith("grad."), k))
    # A mistake that gives the expected record here cannot be what went wrong.
    candidates = {m: r for m, r in (candidates or {}).items()
                  if any(k in expected and difference(k, v, expected[k], rtol, atol) for k, v in r.items())}
    for key in order:
        label = (labels or {}).get(key, key.replace("grad.", "the gradient of "))
        if key not in got:
            return Verdict("failed", f"{label} was not produced.")
        problem = difference(label, got[key], expected[key], rtol, atol, values)
        if problem:
            return Verdict("failed", problem, identify_mistake(got, candidates, rtol, atol))
    if _changes_between_calls(got, rtol, atol):
        return Verdict("failed", "Two calls in eval mode on the same input gave different outputs.",
                       catalog.BY_NAME["dropout_in_eval"])
    gradients = any(k.startswith("grad.") for k in expected)
    what = "outputs and gradients match" if gradients else \
        "the output matches" if "output" in expected else f"the {' and '.join(expected)} match"
    return Verdict("passed", f"Correct: {what} the reference.")


class Computed:
    """A value made on its first use and kept: what only a failing record needs, where making it
    costs seconds (the records of the catalogued mistakes at a capped check's size). Grading
    threads share it, so it is made once."""

    def __init__(self, make):
        self._make, self._value, self._lock = make, None, threading.Lock()

    def __call__(self):
        with self._lock:
            if self._make is not None:
                self._value, self._make = self._make(), None
        return self._value


@dataclass
class RecordJudge:
    """Judges a probe's record against ``expected``, naming the first of the ``candidates``
    (each mistake's record on the same inputs, or a :class:`Computed` that makes them when a
    record fails) that it matches, with hints in the notebook's ``names`` for shapes. Data alone
    (but for a :class:`Computed`), so a visible check can store it."""

    expected: dict[str, torch.Tensor]
    candidates: dict[catalog.Mistake, dict[str, torch.Tensor]] | Computed | None = None
    names: dict[str, str] | None = None
    call: str = ""     # what was called, put before a failure's message
    passed: str = ""   # the message of a pass, in place of the general one
    labels: dict[str, str] | None = None   # how a failure's message speaks of a record's key

    def __call__(self, record: dict[str, torch.Tensor], value, values: bool) -> Verdict:
        later = isinstance(self.candidates, Computed)
        verdict = judge(record, self.expected, None if later else self.candidates, values=values, labels=self.labels)
        if later and not verdict.passed:
            verdict = judge(record, self.expected, self.candidates(), values=values, labels=self.labels)
        verdict.names = self.names
        if verdict.passed and self.passed:
            verdict.message = self.passed
        elif not verdict.passed and self.call:
            verdict.message = f"{self.call}: {verdict.message}"
        return verdict


def judge_parameters(name: str, got: dict[str, list[int]], expected: dict[str, tuple[int, ...]],
                     quote: bool = True) -> Verdict:
    """Compares a module's parameters (name -> shape) with the expected ones. Without ``quote`` (a
    hidden check) a parameter's name is given only when it is one of the expected ones: the others
    were chosen by the run, which could spell a hidden input in them."""
    missing = [n for n in expected if n not in got]
    if missing:
        shown = got if quote else {n: s for n, s in got.items() if n in expected}
        others = len(got) - len(shown)
        have = ", ".join([f"{n} {tuple(s)}" for n, s in shown.items()] +
                         ([f"{others} parameter(s) named otherwise"] if others else [])) or "no parameters"
        return Verdict("failed", f"{name} has no parameter {', '.join(missing)}. It has: {have}.")
    wrong = [f"{n} is {tuple(got[n])}, expected {tuple(shape)}" for n, shape in expected.items()
             if tuple(got[n]) != tuple(shape)]
    if wrong:
        return Verdict("failed", f"{name}: " + "; ".join(wrong) + ". nn.Linear(in, out) stores its weight as (out, in).")
    return Verdict("passed", f"{name} has the expected layers: " + ", ".join(expected) + ".")


@dataclass
class ParametersJudge:
    """Judges a module's parameters (name -> shape, what the probe returns) against ``expected``."""

    object: str
    expected: dict[str, tuple[int, ...]]

    def __call__(self, record, shapes, values: bool) -> Verdict:
        """``shapes`` as the probe returned it: only names with a shape of whole numbers count."""
        got = {n: s for n, s in shapes.items() if isinstance(n, str) and isinstance(s, (list, tuple))
               and all(type(d) is int for d in s)} if isinstance(shapes, dict) else {}
        return judge_parameters(self.object, got, self.expected, quote=values)


def is_builtin_exception(name) -> bool:
    """Whether ``name`` is one of Python's own exception types: the only exception name a message
    about a hidden run may carry (a student's class can be given any name, a hidden input included)."""
    found = getattr(builtins, name, None) if isinstance(name, str) else None
    return isinstance(found, type) and issubclass(found, BaseException)


@dataclass
class RaisesJudge:
    """Judges that building ``object`` with ``init`` raised ``exception`` (the probe returns the
    name of what it raised, or None)."""

    object: str
    init: dict
    exception: str = "ValueError"

    def __call__(self, record, raised, values: bool) -> Verdict:
        arguments = ", ".join(f"{k}={v!r}" for k, v in self.init.items())
        if raised == self.exception:
            return Verdict("passed", f"{self.object}({arguments}) raises {self.exception}.")
        got = "raised nothing" if not raised else f"raised {raised}" if is_builtin_exception(raised) else \
            "raised an exception"
        return Verdict("failed", f"{self.object}({arguments}) {got}; expected a clear {self.exception} "
                                 f"that names the numbers that do not fit.")
