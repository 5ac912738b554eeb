"""The format of hidden checks.

An assignment's hidden checks live in ``autograder/checks/<assignment>.py``, a module that
defines ``ITEMS``: one :class:`Item` per graded answer. An item names

* ``grade_id``, the nbgrader id of the answer cell (its visible test cell is ``<grade_id>_test``,
  which holds the same ``points`` in the source notebook; a test holds the two equal);
* ``points``;
* ``checks``: what to call and what to expect, each one an object below that turns the
  secret seed into hidden inputs (:meth:`prepare`), naming the student object it probes
  and the reference it compares with;
* ``forbids``: library calls the answer may not make (the thing it has to write itself).

All checks of an item must pass for its points; the first one that fails explains why.
Tolerances are the course's policy (:data:`transformer_lm.checks.RTOL`, ``ATOL``) unless a
check says otherwise.

``prepare`` runs in the trusted process. What crosses into the sandbox is a
:class:`ProbeCall`: the name of a function of :mod:`transformer_lm.probes`, the student
objects it takes (by their names in the notebook), JSON arguments, and tensors.
What comes back is a record of tensors (or a small JSON value), judged by ``judge``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from transformer_lm import checks
from transformer_lm.checks import AttentionAPI, AttentionCase, Verdict


@dataclass
class ProbeCall:
    """One call of a probe in the sandbox: ``getattr(probes, probe)(**objects, **arguments, **tensors)``.

    ``tensors`` maps an argument name to a tensor, or ``"<argument>/<key>"`` to one entry of
    a dict of tensors (``state/W_query.weight``, ``inputs/x``).
    """

    probe: str
    objects: dict[str, str]
    arguments: dict = field(default_factory=dict)
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class Prepared:
    """A check made concrete: the call for the sandbox and how to judge what comes back."""

    call: ProbeCall
    judge: Callable[[dict[str, torch.Tensor], object], Verdict]


def _flatten(arguments: dict) -> tuple[dict, dict[str, torch.Tensor]]:
    """Splits probe arguments into JSON ones and tensors, flattening dicts of tensors."""
    plain, tensors = {}, {}
    for name, value in arguments.items():
        if isinstance(value, torch.Tensor):
            tensors[name] = value.detach().contiguous()
        elif isinstance(value, dict) and value and all(isinstance(v, torch.Tensor) for v in value.values()):
            tensors.update({f"{name}/{key}": v.detach().contiguous() for key, v in value.items()})
        elif value is not None:
            plain[name] = value
    return plain, tensors


def _judge_record(expected, candidates=None):
    """Judges a record without quoting expected values: they come from secret inputs."""
    def judge(record, value):
        return checks.judge(record, expected, candidates, values=False)
    return judge


@dataclass(frozen=True)
class AttentionCheck:
    """Builds the student's attention class for ``case``, loads reference weights into it,
    and compares outputs (and attention weights where returned) and gradients of the
    input and of every parameter with the reference, naming catalogued mistakes."""

    object: str
    api: AttentionAPI
    case: AttentionCase

    def prepare(self, generator: torch.Generator) -> Prepared:
        tensors = checks.make_case_tensors(self.case, generator)
        arguments, expected, candidates = checks.attention_records(self.api, self.case, tensors)
        plain, flat = _flatten(arguments)
        if not arguments["inputs"]:
            plain["inputs"] = {}
        return Prepared(ProbeCall("probe_module", {"cls": self.object}, plain, flat),
                        _judge_record(expected, candidates))


@dataclass(frozen=True)
class FunctionCheck:
    """Calls the student's function on inputs drawn by ``make_inputs`` and compares the
    result (and, with ``grad``, the gradients of the inputs) with ``expected``."""

    object: str
    expected: Callable[..., torch.Tensor]
    make_inputs: Callable[[torch.Generator], dict[str, torch.Tensor]]
    grad: bool = True

    def prepare(self, generator: torch.Generator) -> Prepared:
        inputs = self.make_inputs(generator)
        output = self.expected(*inputs.values())
        grad_output = torch.randn(output.shape, generator=generator) if self.grad else None
        expected = checks.function_records(self.expected, inputs, grad_output)
        plain, flat = _flatten({"inputs": inputs, "grad_output": grad_output})
        return Prepared(ProbeCall("probe_function", {"fn": self.object}, plain, flat), _judge_record(expected))


@dataclass(frozen=True)
class TransferCheck:
    """Calls the student's ``fn(source, target)`` between two of their attention classes and
    checks that the target then computes what the source's weights compute."""

    object: str
    source: str
    source_api: AttentionAPI
    target: str
    target_api: AttentionAPI
    case: AttentionCase

    def prepare(self, generator: torch.Generator) -> Prepared:
        tensors = checks.make_case_tensors(self.case, generator)
        arguments, expected = checks.transfer_records(self.source_api, self.target_api, self.case, tensors)
        plain, flat = _flatten(arguments)
        objects = {"fn": self.object, "source_cls": self.source, "target_cls": self.target}
        return Prepared(ProbeCall("probe_transfer", objects, plain, flat), _judge_record(expected))


@dataclass(frozen=True)
class RaisesCheck:
    """Checks that building the student's class with ``init`` raises ``exception``."""

    object: str
    init: dict
    exception: str = "ValueError"

    def prepare(self, generator: torch.Generator) -> Prepared:
        def judge(record, raised):
            arguments = ", ".join(f"{k}={v!r}" for k, v in self.init.items())
            if raised == self.exception:
                return Verdict("passed", f"{self.object}({arguments}) raises {self.exception}.")
            got = f"raised {raised}" if raised else "raised nothing"
            return Verdict("failed", f"{self.object}({arguments}) {got}; expected a clear {self.exception} "
                                     f"that names the numbers that do not fit.")
        return Prepared(ProbeCall("raised_exception", {"cls": self.object}, {"init": self.init}), judge)


@dataclass(frozen=True)
class FactoryCheck:
    """Calls the student's factory ``fn(**kwargs)`` and judges the module it returns, run on
    a random input ``(batch, seq, d_in)``, with ``judge(record)`` on the output and its
    parameters' shapes."""

    object: str
    kwargs: dict
    input_shape: tuple[int, ...]
    judge_record: Callable[[dict[str, torch.Tensor]], Verdict]

    def prepare(self, generator: torch.Generator) -> Prepared:
        x = torch.randn(*self.input_shape, generator=generator)
        return Prepared(ProbeCall("probe_factory", {"fn": self.object}, {"kwargs": self.kwargs}, {"x": x}),
                        lambda record, value: self.judge_record(record))


@dataclass(frozen=True)
class Item:
    """One graded answer and its hidden checks."""

    grade_id: str
    points: float
    checks: tuple
    forbids: tuple[str, ...] = ()

    @property
    def test_id(self) -> str:
        return f"{self.grade_id}_test"
