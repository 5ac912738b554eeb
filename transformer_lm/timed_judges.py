"""Judges of the work a tiled attention does under the causal mask, from the CPU time the kernel
counted for each of its calls, read by the grader's server from outside the run
(:mod:`autograder.running.harness.clock`).

Why time, and why this ratio. Skipping the key blocks wholly in a query block's future is work
not done; no value shows it, and a trace of what ran is the run's own word. The kernel's count of
CPU time shows it: a causal call that skips spends about the share of the tiles it visits of what
the same answer spends without the mask, one that computes every tile and masks it (whatever
makes it safe against NaN) spends all of it or more. That ratio does not depend on how fast the
answer's code is, nor on the precision it computes in, nor on what else it does once per call
(checking its inputs). What a skipping call's ratio comes to on a machine (the mask inside the
diagonal tiles, the cost of handing a window its inputs) is learnt from the course's code on the
same inputs in the same sandbox, and the answer's may be at most :data:`OWN_FACTOR` times that.

The course's figure is not a bound on the answer's own time: an honest answer may do twice the
course's work (two passes over the tiles, or its tiles in float64) while skipping rightly, which
costs as much as computing every tile once.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import torch

from transformer_lm import catalog
from transformer_lm.judging import Computed, Verdict
from transformer_lm.verdict_texts import render

OWN_FACTOR = 1.28
"""How many times the course's ratio (:func:`paired_ratio` of its calls) an answer's may be. At the
timed sizes (eight blocks of each: 36 of 64 tiles) the course's ratio came to 0.67 to 0.71; on a
two-core machine, quiet and beside a spinning process, the honest answers of the corpus reached at
most 1.16 times it, those that compute the tiles under the mask at least 1.45 times it
(``benchmarks/skipping_calibration.py``; docs/grading.md gives the figures and the margins)."""

TEXTS = {
    "unclocked": "{call:call}: the grader could not time the call (a window of it ended out of order), so it "
                 "cannot tell which tiles it computed.",
    "skip_passed": "Correct: with causal=True the call took {own:number} of the CPU time it takes without the "
                   "mask; the course's code takes {course:number} on the same inputs.",
    "skip_more": "{call:call} took {own:number} of the CPU time with causal=True that it takes without the mask, "
                 "where the course's code takes {course:number} on the same inputs. Skipping every key block that "
                 "starts at or after the end of its query block leaves {share:number} of the tiles to compute: a "
                 "call that computes the others and masks them (or makes them safe against NaN) does the work it "
                 "should skip.",
}
"""What the judges of this module say (:mod:`transformer_lm.verdict_texts`)."""


@dataclass
class SkipTimeJudge:
    """A tiled call (``call``) timed window by window. Its windows with the mask (``causal``) must
    give the values ``values`` judges (it makes a :class:`~transformer_lm.judging.RecordJudge` for
    each, naming a catalogued mistake, when first asked: exact values at this size take the grader
    a second to make); their CPU time, each over the window without the mask after it (``full``:
    :func:`paired_ratio`), may be at most :data:`OWN_FACTOR` times the course's ratio on the same inputs (``reference.own``).
    ``share``: the share of the tiles a causal call visits."""

    call: str
    causal: list[int]
    full: list[int]
    values: Computed
    share: float

    def __call__(self, record: dict[str, torch.Tensor], value, values: bool) -> Verdict:
        for window, judge in self.values().items():
            verdict = judge(self.window(record, window), value, values)
            if not verdict.passed:
                return verdict
        found = self.figures(record)
        if found is None:
            return Verdict("failed", render(TEXTS["unclocked"], call=self.call), measured=True)
        own, course = found
        figures = dict(own=f"{own:.0%}", course=f"{course:.0%}")
        if own <= OWN_FACTOR * course:
            return Verdict("passed", render(TEXTS["skip_passed"], **figures))
        return Verdict("failed", render(TEXTS["skip_more"], call=self.call, share=f"{self.share:.0%}", **figures),
                       catalog.BY_NAME["future_blocks_computed"], measured=True)

    @staticmethod
    def window(record: dict[str, torch.Tensor], window: int) -> dict[str, torch.Tensor]:
        """One window's record, its names without the window's prefix."""
        return {name.split(".", 1)[1]: t for name, t in record.items() if name.startswith(f"w{window}.")}

    def figures(self, record: dict[str, torch.Tensor]) -> tuple[float, float] | None:
        """The answer's ratio (:func:`paired_ratio` of its windows, in the order they ran) and the
        course's; None when a window counted for nothing."""
        order = sorted(self.causal + self.full)
        seconds = [float(record[f"clock.w{window}"]) for window in order]
        if any(math.isnan(s) for s in seconds):
            return None
        course = float(record["reference.own"])
        if not course > 0:
            raise ValueError("the course's code was not timed in this sandbox")
        return paired_ratio(seconds, [window in self.causal for window in order]), course


def paired_ratio(seconds: list[float], causal: list[bool]) -> float:
    """The median, over each causal call and the call without the mask made next after it, of the
    first's CPU time over the second's (``seconds`` and ``causal`` in the order the calls ran).

    Why pairs and a median: a single call's CPU time on a shared machine drifts by a quarter from one
    moment to the next (other processes, the host's clock speed), while two calls made one after the
    other drift together; a pair's ratio keeps what the mask saved and loses the drift, and the
    median leaves out the pair that a moment of load split. The fastest causal call over the
    fastest without the mask, taken at different moments, let a moment of load decide."""
    ratios, waiting = [], None
    for spent, masked in zip(seconds, causal):
        if masked:
            waiting = spent
        elif waiting is not None:
            ratios.append(waiting / spent)
            waiting = None
    return statistics.median(ratios) if ratios else math.nan
