"""Judging a probe's record against the reference's: the course's tolerance policy, in one place.

Tolerance policy (float32, the same everywhere): ``|got - expected| <= ATOL + RTOL * |expected|``
element-wise, for outputs and for gradients. Shapes are compared first, then values, then
gradients. When an answer is wrong, :func:`identify_mistake` compares it with the records that
the catalogued mistakes give on the same inputs (:mod:`transformer_lm.instructor.mistakes` computes them),
so that the message can name the mistake (:mod:`transformer_lm.catalog`). Visible checks in the student's
kernel and the grader's trusted process judge alike; only the grader hides expected values (``values=False``).
"""

from __future__ import annotations

import builtins
import math
import sys
import threading
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from transformer_lm import catalog
from transformer_lm.verdict_texts import fit, numbers, render

RTOL = 1e-4
ATOL = 1e-5

TEXTS = {
    "shape": "{name:label} has shape {got:shape}, expected {expected:shape}.",
    "nan": "{name:label} contains NaN (first at index {index:shape}). A row whose every score is -inf gives NaN after "
           "the softmax; so does a softmax over the wrong dimension of a masked row.",
    "not_nan": "{name:label} has numbers where NaN was expected.",
    "overflow": "{name:label} is NaN or inf at index {index:shape}, where the expected value is finite: an "
                "overflow. Row {row:shape} of {input:label} holds ",
    "overflow_values": "{values:numbers}",
    "overflow_count": "{count:number} number(s)",
    "overflow_why": " above {limit:number}, and exp of a number above {limit:number} is inf in its dtype: the row's "
                    "sum is inf, and inf / inf is NaN. A softmax is unchanged when every score of a row is shifted "
                    "by the same number: shift each row so that its largest score is 0 before the exponential, and "
                    "no exp can overflow.",
    "values": "{name:label} has the right shape {shape:shape} but wrong values: the largest error is {error:number} at "
              "index {index:shape}.",
    "values_shown": "{name:label} has the right shape {shape:shape} but wrong values: the largest error is "
                    "{error:number} at index {index:shape} (expected {expected:number}, got {got:number}).\n  from "
                    "index {first:shape}, where they first differ:\n  expected {expected_row:numbers}\n  "
                    "got      {got_row:numbers}",
    "gradient_of": "the gradient of {name:label}",
    "no_gradient": " It is zero: no gradient reaches {name:label} through autograd (.detach() or no_grad?).",
    "not_produced": "{name:label} was not produced.",
    "not_the_same_twice": "Two calls in eval mode on the same input gave different outputs.",
    "passed_gradients": "Correct: outputs and gradients match the reference.",
    "passed_output": "Correct: the output matches the reference.",
    "passed_keys": "Correct: the {names:label} match the reference.",
    "at_call": "{call:call}: ",
    "no_parameter": "{name:call} has no parameter {missing:label}. It has: ",
    "parameter": "{name:label} {shape:shape}",
    "named_otherwise": "{count:number} parameter(s) named otherwise",
    "none": "no parameters",
    "parameter_shape": "{name:label} is {got:shape}, expected {expected:shape}",
    "weight_layout": ". nn.Linear(in, out) stores its weight as (out, in).",
    "parameters_passed": "{name:call} has the expected layers: {names:label}.",
    "raises": "{call:call} raises {exception:exception}.",
    "raises_not": "{call:call} {got:text}; expected a clear {exception:exception} that names the numbers that do "
                  "not fit.",
    "raised_nothing": "raised nothing",
    "raised": "raised {exception:exception}",
    "raised_other": "raised an exception",
}
"""What a check of values, of parameters or of an error says (:mod:`transformer_lm.verdict_texts`)."""


class CheckFailed(AssertionError):
    """A visible check failed; the message is written for the student, and ``mistake`` is the
    catalogued mistake it names, if any (a group of checks shows the failure that names one).

    In Jupyter it shows as that message alone (IPython asks an exception for
    ``_render_traceback_`` before it formats one), not the course package's own frames, its lines
    fitted to :data:`~transformer_lm.verdict_texts.WIDTH`; when the student's code raised the error
    behind it, the lines of the student's code follow."""

    def __init__(self, message: str = "", mistake: catalog.Mistake | None = None):
        super().__init__(message)
        self.mistake = mistake

    def _render_traceback_(self) -> list[str]:
        lines = fit(f"CheckFailed: {self}").split("\n")
        lines[0] = "\x1b[0;31mCheckFailed\x1b[0m" + lines[0][len("CheckFailed"):]
        cause = self.__cause__
        frames = [f for f in traceback.extract_tb(cause.__traceback__) if _written_by_student(f.filename)] \
            if cause is not None else []
        if frames:
            lines += ["", "Where your code raised it:", *"".join(traceback.format_list(frames)).rstrip().split("\n"),
                      *fit(f"{type(cause).__name__}: {cause}").split("\n")]
        return lines


_LIBRARIES = tuple(str(Path(path).resolve()) for path in
                   {Path(__file__).parent, Path(torch.__file__).parent, sys.prefix, sys.base_prefix})


def _written_by_student(filename: str) -> bool:
    """Whether a traceback's file is notebook code (a cell), not the course package, torch or Python's."""
    return not str(Path(filename).resolve()).startswith(_LIBRARIES)


def _show(t: torch.Tensor, start: int = 0, limit: int = 6) -> str:
    """``limit`` numbers of ``t`` (flattened) from position ``start``, as a short list."""
    values = t.flatten()[start:start + limit].tolist()
    return numbers((f"{v:.6g}" for v in values), start, t.numel() > start + limit)


def difference(name: str, got: torch.Tensor, expected: torch.Tensor,
               rtol: float = RTOL, atol: float = ATOL, values: bool = True) -> str | None:
    """None when ``got`` matches ``expected``; otherwise a sentence that says how it differs.
    With ``values=False`` (hidden checks) it names the largest error but lists no values."""
    if tuple(got.shape) != tuple(expected.shape):
        return render(TEXTS["shape"], name=name, got=tuple(got.shape), expected=tuple(expected.shape))
    if not got.is_floating_point():
        got = got.to(expected.dtype)
    got64, expected64 = got.double(), expected.double()
    nan_got, nan_expected = torch.isnan(got64), torch.isnan(expected64)
    if not torch.equal(nan_got, nan_expected):
        if (nan_got & ~nan_expected).any():
            where = tuple(torch.nonzero(nan_got & ~nan_expected)[0].tolist())
            return render(TEXTS["nan"], name=name, index=where)
        return render(TEXTS["not_nan"], name=name)
    error = torch.where(got64 == expected64, 0.0, (got64 - expected64).abs()).masked_fill(nan_got, 0.0)  # inf == inf
    allowed = (atol + rtol * expected64.abs()).masked_fill(nan_expected, math.inf)
    if bool((error <= allowed).all()):
        return None
    worst = int(torch.argmax(error - allowed))
    largest = dict(name=name, shape=tuple(got.shape), error=f"{error.flatten()[worst].item():.3g}",
                   index=_index(worst, got.shape))
    if not values:
        return render(TEXTS["values"], **largest)
    first = int(torch.nonzero((error > allowed).flatten())[0])   # the previews start where they first differ
    return render(TEXTS["values_shown"], **largest, expected=f"{expected64.flatten()[worst].item():.6g}",
                  got=f"{got64.flatten()[worst].item():.6g}", first=_index(first, got.shape),
                  expected_row=_show(expected, first), got_row=_show(got, first))


def exp_limit(dtype: torch.dtype) -> float:
    """The largest number whose exp is finite in ``dtype`` (88.72 in float32): exp of any larger one is inf."""
    return math.log(torch.finfo(dtype).max)


def overflowing(inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
    """The inputs of ``inputs`` that hold a number whose exp overflows in their dtype, or None: what a
    judge keeps to name an overflow (a softmax's scores in the hundreds), and only where one can happen."""
    found = {name: x for name, x in inputs.items()
             if isinstance(x, torch.Tensor) and x.is_floating_point() and bool((x > exp_limit(x.dtype)).any())}
    return found or None


def overflow(name: str, got: torch.Tensor, expected: torch.Tensor, inputs: dict[str, torch.Tensor],
             values: bool = True) -> str | None:
    """Names an overflow: ``got`` is NaN or inf where ``expected`` is finite, in a row (all indexes but
    the last) of an input of its shape that holds numbers whose exp is inf in the input's dtype. A
    softmax written without shifting its scores gives just that, and a message about -inf rows would
    send its author the wrong way. The row's offending numbers are shown, but for a hidden check
    (``values=False``), whose inputs are secret: it gives their count."""
    if not got.is_floating_point() or got.shape != expected.shape:
        return None
    broken = ~torch.isfinite(got) & torch.isfinite(expected)
    for input_name, x in inputs.items():
        if x.shape != got.shape or x.dim() == 0:
            continue
        limit = exp_limit(x.dtype)
        rows = torch.nonzero(broken.any(-1) & (x > limit).any(-1))
        if len(rows):
            row = tuple(rows[0].tolist())
            index = (*row, int(torch.nonzero(broken[row])[0]))
            over = x[row][x[row] > limit]
            held = render(TEXTS["overflow_values"], values=_show(over)) if values else \
                render(TEXTS["overflow_count"], count=over.numel())
            return (render(TEXTS["overflow"], name=name, index=index, row=row, input=input_name) + held
                    + render(TEXTS["overflow_why"], limit=f"{limit:.4g}"))
    return None


def _index(flat: int, shape: torch.Size) -> tuple[int, ...]:
    """The index of position ``flat`` of a tensor of ``shape`` (flattened), in row-major order.
    (Not ``torch.unravel_index``, whose first call imports sympy: 0.3 s of a grader's start.)"""
    index = []
    for size in reversed(shape):
        flat, position = divmod(flat, size)
        index.append(position)
    return tuple(reversed(index))


@dataclass
class Verdict:
    """The judgement of one check: ``passed`` or ``failed``, a message and, if named, a mistake."""

    status: str
    message: str
    mistake: catalog.Mistake | None = None
    names: dict[str, str] | None = None  # the notebook's names for shapes, which the hint speaks
    measured: bool = False
    """Failed on a figure that a moment of load on the machine can move (CPU time), not on a value:
    the grader measures it once more before it costs a point (``grading.grade_notebook``)."""

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
            raise self.refusal()

    def refusal(self) -> CheckFailed:
        """What a visible check raises for this verdict: its message and, where it names one, the
        mistake's title and hint."""
        hint = f"\nLikely mistake: {self.mistake.title}.\n  {self.hint}" if self.mistake else ""
        return CheckFailed(self.message + hint, self.mistake)


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


def _possible(candidates: dict[catalog.Mistake, dict[str, torch.Tensor]] | None, expected: dict[str, torch.Tensor],
              rtol: float, atol: float) -> dict[catalog.Mistake, dict[str, torch.Tensor]]:
    """The ``candidates`` that could be what went wrong: a mistake that gives the expected record on
    these inputs cannot be. (Sorted out only for a failing record, which alone is compared with them.)"""
    return {m: r for m, r in (candidates or {}).items()
            if any(k in expected and difference(k, v, expected[k], rtol, atol) for k, v in r.items())}


def judge(got: dict[str, torch.Tensor], expected: dict[str, torch.Tensor],
          candidates: dict[catalog.Mistake, dict[str, torch.Tensor]] | None = None,
          rtol: float = RTOL, atol: float = ATOL, values: bool = True, labels: dict[str, str] | None = None,
          inputs: dict[str, torch.Tensor] | None = None) -> Verdict:
    """Compares a probe's record with the expected one: output, then weights, then gradients.
    ``values=False`` keeps expected values out of the message (for hidden checks); ``labels``
    names keys in the message (a gradient's key ``grad.x`` reads "the gradient of x"); an output
    that is not finite where it should be is named an overflow when ``inputs`` explain it
    (:func:`overflow`)."""
    order = sorted(expected, key=lambda k: (k != "output", k.startswith("grad."), k))
    for key in order:
        label = (labels or {}).get(key) or (render(TEXTS["gradient_of"], name=key[len("grad."):])
                                            if key.startswith("grad.") else key)
        if key not in got:
            return Verdict("failed", render(TEXTS["not_produced"], name=label))
        problem = difference(label, got[key], expected[key], rtol, atol, values)
        if problem and key.startswith("grad.") and not got[key].any() and expected[key].any():
            problem += render(TEXTS["no_gradient"], name=key[len("grad."):])
        if problem and key == "output" and inputs:
            problem = overflow(label, got[key], expected[key], inputs, values) or problem
        if problem:
            return Verdict("failed", problem, identify_mistake(got, _possible(candidates, expected, rtol, atol),
                                                               rtol, atol))
    if _changes_between_calls(got, rtol, atol):
        return Verdict("failed", TEXTS["not_the_same_twice"],
                       catalog.BY_NAME["dropout_in_eval"])
    gradients = any(k.startswith("grad.") for k in expected)
    return Verdict("passed", TEXTS["passed_gradients"] if gradients else TEXTS["passed_output"] if "output" in expected
                   else render(TEXTS["passed_keys"], names=" and ".join(expected)))


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
    inputs: dict[str, torch.Tensor] | None = None   # the inputs whose exp overflows (:func:`overflowing`)

    def tolerance(self) -> dict[str, float]:
        """How far a value may be from the expected one; a judge whose honest answers err more widens it."""
        return {"rtol": RTOL, "atol": ATOL}

    def __call__(self, record: dict[str, torch.Tensor], value, values: bool) -> Verdict:
        later = isinstance(self.candidates, Computed)
        said = dict(values=values, labels=self.labels, inputs=self.inputs, **self.tolerance())
        verdict = judge(record, self.expected, None if later else self.candidates, **said)
        if later and not verdict.passed:
            verdict = judge(record, self.expected, self.candidates(), **said)
        verdict.names = self.names
        if verdict.passed and self.passed:
            verdict.message = self.passed
        elif not verdict.passed and self.call:
            verdict.message = render(TEXTS["at_call"], call=self.call) + verdict.message
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
        have = ", ".join([render(TEXTS["parameter"], name=n, shape=tuple(s)) for n, s in shown.items()] +
                         ([render(TEXTS["named_otherwise"], count=others)] if others else [])) or TEXTS["none"]
        return Verdict("failed", render(TEXTS["no_parameter"], name=name, missing=", ".join(missing)) + have + ".")
    wrong = [render(TEXTS["parameter_shape"], name=n, got=tuple(got[n]), expected=tuple(shape))
             for n, shape in expected.items() if tuple(got[n]) != tuple(shape)]
    if wrong:
        return Verdict("failed", render(TEXTS["at_call"], call=name) + "; ".join(wrong) + TEXTS["weight_layout"])
    return Verdict("passed", render(TEXTS["parameters_passed"], name=name, names=", ".join(expected)))


@dataclass
class ParametersJudge:
    """Judges a module's parameters (name -> shape, what the probe returns) against ``expected``;
    a failure whose parameters are exactly those a catalogued mistake's constructor makes
    (``candidates``: mistake -> its shapes) names that mistake."""

    object: str
    expected: dict[str, tuple[int, ...]]
    candidates: dict[catalog.Mistake, dict[str, tuple[int, ...]]] = field(default_factory=dict)

    def __call__(self, record, shapes, values: bool) -> Verdict:
        """``shapes`` as the probe returned it: only names with a shape of whole numbers count."""
        got = {n: tuple(s) for n, s in shapes.items() if isinstance(n, str) and isinstance(s, (list, tuple))
               and all(type(d) is int for d in s)} if isinstance(shapes, dict) else {}
        verdict = judge_parameters(self.object, got, self.expected, quote=values)
        if verdict.passed:
            return verdict
        made = next((mistake for mistake, made in self.candidates.items()
                     if got == {n: tuple(s) for n, s in made.items()}), None)
        return replace(verdict, mistake=made)


def is_builtin_exception(name) -> bool:
    """Whether ``name`` is one of Python's own exception types: the only exception name a message
    about a hidden run may carry (a student's class can be given any name, a hidden input included)."""
    found = getattr(builtins, name, None) if isinstance(name, str) else None
    return isinstance(found, type) and issubclass(found, BaseException)


@dataclass
class RaisesJudge:
    """Judges that building ``object`` with ``init`` raised ``exception`` (the probe returns the
    name of what it raised, or None); a failure names ``mistake``, the catalogued mistake of a
    constructor that does not raise it, where there is one."""

    object: str
    init: dict
    exception: str = "ValueError"
    mistake: catalog.Mistake | None = None

    def __call__(self, record, raised, values: bool) -> Verdict:
        if raised == self.exception:
            return Verdict("passed", render(TEXTS["raises"], call=self.called, exception=self.exception))
        got = TEXTS["raised_nothing"] if not raised else render(TEXTS["raised"], exception=raised) \
            if is_builtin_exception(raised) else TEXTS["raised_other"]
        return Verdict("failed", render(TEXTS["raises_not"], call=self.called, got=got, exception=self.exception),
                       self.mistake)

    @property
    def called(self) -> str:
        """The call, as the check's texts give it."""
        return f"{self.object}(" + ", ".join(f"{k}={v!r}" for k, v in self.init.items()) + ")"
