"""A check made concrete: the probe call to make and how to judge what comes back.

A kind of check (:mod:`transformer_lm.instructor.kinds`) prepares a :class:`Prepared` from a random generator
with the reference; what it holds is then plain data and pure functions of it, which need no
reference: the visible checks can store it (:mod:`transformer_lm.stored`) and judge against the
stored values, and the grader judges a hidden run's record with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from transformer_lm.judging import Verdict
from transformer_lm.mistake import Mistake
from transformer_lm.sandboxed import probes, wire

Judge = Callable[[dict[str, torch.Tensor], object, bool], Verdict]
"""``judge(record, value, values)``: a probe's tensors (or its plain value), judged; with
``values=False`` the message lists no expected values (they come from secret inputs)."""


@dataclass
class ProbeCall:
    """One call of a probe: ``probe(**objects, **arguments, **tensors)``, where ``objects`` maps
    an argument to the name of a student object, resolved where the call runs.

    ``tensors`` maps an argument name to a tensor, or ``"<argument>/<key>"`` to one entry of
    a dict of tensors (``state/W_query.weight``, ``inputs/x``): see
    :func:`transformer_lm.sandboxed.wire.flatten_arguments`.
    """

    probe: Callable
    objects: dict[str, str]
    arguments: dict = field(default_factory=dict)
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)

    @classmethod
    def of(cls, probe: Callable, objects: dict[str, str], arguments: dict) -> ProbeCall:
        """The call of ``probe`` with ``arguments`` that may hold tensors and dicts of tensors."""
        plain, tensors = wire.flatten_arguments(arguments)
        return cls(probe, objects, plain, tensors)

    def plan(self) -> dict:
        """The call as the harness reads it from a plan (JSON): the tensors travel apart, by name."""
        if probes.PROBES.get(self.probe.__name__) is not self.probe:
            raise ValueError(f"{self.probe!r} is not a probe of transformer_lm.sandboxed.probes")
        return {"probe": self.probe.__name__, "objects": self.objects, "arguments": self.arguments,
                "tensor_keys": list(self.tensors)}

    def run_here(self, namespace: dict) -> object:
        """Makes the call in this process, on the objects of ``namespace``, as the harness does."""
        return wire.call_probe(self.plan(), namespace, self.tensors)


@dataclass
class Clocked:
    """How the grader times a check's call from outside the run (the server reads the run's CPU
    clock around each window: :mod:`autograder.running.harness.clock`). The call is made once per
    window of ``windows`` (keyword arguments), each on inputs of its own, made by ``inputs(window)``
    (tensors by the call's flattened names) on the trusted side and handed to the run only when
    its window opens. The course's code, standing in for ``stands_in``, makes the calls of the
    windows ``reference`` names, on their inputs, in a run of its own in the same sandbox: what the
    answer's figures are compared with."""

    windows: list[dict]
    inputs: Callable[[int], dict[str, torch.Tensor]]
    reference: list[int]
    stands_in: str


@dataclass
class Prepared:
    """A check made concrete: the call to make and how to judge what comes back. A check with a
    ``memory_cap`` runs in a run whose memory the kernel caps at that many bytes more than it held
    before its first cell; ``on_error`` is what a call that failed there is told. A check that is
    ``clocked`` has its windows timed by the server. A visible check with ``refused`` feeds its call
    non-finite numbers on purpose: a call that refuses them with a ``ValueError`` is told that text
    and not judged, since checking one's inputs is right. ``raised`` names the catalogued mistakes
    whose twins raise an error on this check's inputs, by the name of that error's type (the nearest
    of Python's own): a call that raises an error of that type made that mistake."""

    call: ProbeCall
    judge: Judge
    memory_cap: int = 0
    on_error: str = ""
    clocked: Clocked | None = None
    refused: str = ""
    raised: dict[str, Mistake] = field(default_factory=dict)

    def judge_result(self, result: object, values: bool) -> Verdict:
        """Judges what the probe returned (a record of tensors, or a plain value)."""
        record = wire.as_record(result)
        return self.judge(record or {}, None if record is not None else result, values)
