"""What became of one probe call of a run, as the trusted side reads it from the run's journal: a
module of its own so that the runner, which makes outcomes, and the judge, which reads them, share
one definition."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class ProbeOutcome:
    """What became of one probe call: ``ok`` (with its record or value), ``todo``, ``error``,
    ``timeout`` or ``killed``, with a message for the student; ``ran`` maps each watched torch
    function or ATen operator that ran during the call to the notebook cells (plan indexes,
    innermost first) on the stack when it did (:func:`transformer_lm.sandboxed.call_trace.trace_calls`)."""

    status: str
    message: str = ""
    record: dict[str, torch.Tensor] | None = None
    value: object = None
    ran: dict[str, list[tuple[int, ...]]] = field(default_factory=dict)
    absent_from: tuple[int, ...] = ()
    """For a call of what the run took out (``forbidden``): the notebook cells (plan indexes) on the
    stack when it was made, innermost first, as far as the run said."""
    exception: str = ""
    """For an ``error`` the student's code raised: the type the run named (the nearest of Python's
    own), which names a catalogued mistake whose twin raises the same on the same inputs
    (:attr:`transformer_lm.prepared.Prepared.raised`, whose names the trusted side made)."""
