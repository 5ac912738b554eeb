"""The check of the online softmax's statistics read from a stream of blocks (assignment 05's
``softmax_stats(blocks)``): its values, and, at the grader's size, its memory.

The answer is handed a generator that makes each block of scores only when it is asked for
(:func:`transformer_lm.sandboxed.score_blocks.score_blocks`, built in the run from a seed per
block and a few numbers the plan gives). At :data:`STREAMED`'s size the rows hold about 100 MiB of
scores, twice the memory cap of the run (:data:`transformer_lm.instructor.capped_kinds.MEMORY_CAP`),
so an answer that keeps the blocks runs out of memory, while one that folds each block into running
statistics holds a block or two (1 MiB each). The statistics it returns are judged here against
float64 ones, computed a block at a time from the same seeds: a run that forges its report cannot
give statistics it did not compute, and it could not hold the row to compute them otherwise. A trace
of a call at a small size (:class:`transformer_lm.tiled_judges.StreamJudge`) only names a whole-row
pass.
"""

from __future__ import annotations

import itertools
from dataclasses import KW_ONLY, dataclass

import torch

from transformer_lm import catalog
from transformer_lm.instructor import mistakes, reference
from transformer_lm.judging import RecordJudge
from transformer_lm.prepared import Prepared, ProbeCall
from transformer_lm.sandboxed import score_blocks
from transformer_lm.tiled_judges import SPREAD, TEXTS, StreamJudge
from transformer_lm.verdict_texts import render

PARTS = ("maximum", "total")
CHUNK = 10
"""How many blocks :func:`exact_stats` takes at once: fewer, larger operations on many threads."""


def exact_stats(blocks) -> reference.SoftmaxStats:
    """The statistics of the rows that ``blocks`` make up, in float64, :data:`CHUNK` blocks at a time."""
    stream = iter(blocks)
    chunks = iter(lambda: list(itertools.islice(stream, CHUNK)), [])
    return reference.streamed_stats(torch.cat(chunk, dim=-1).double() for chunk in chunks)


@dataclass(frozen=True)
class StreamStatsCheck:
    """``object(blocks) -> (maximum, total)``, the softmax statistics of each of ``rows`` rows
    handed over as ``blocks`` blocks of ``width`` scores (the last ``last`` long), made on demand.
    Block ``j`` drifts by a shift of its own, so that a row's maximum rises and falls from block to
    block; with ``spread``, every other row lies some 300 above its neighbours (one maximum shared
    by all rows underflows). ``judges="values"`` compares the statistics with float64 ones, naming
    the catalogued mistakes they match; with a ``memory_cap`` the call runs in a run capped at that
    many bytes, untraced, and a failing record names none (the small checks do). ``judges="memory"``
    traces the call and only names a whole-row pass."""

    object: str
    _: KW_ONLY
    rows: int
    width: int
    blocks: int
    last: int
    spread: bool = False
    judges: str = "values"
    memory_cap: int = 0

    @property
    def length(self) -> int:
        return self.width * (self.blocks - 1) + self.last

    def prepare(self, generator: torch.Generator) -> Prepared:
        stream = {"seeds": torch.randint(0, 2**62, (self.blocks,), generator=generator),
                  "shifts": torch.randn(self.blocks, self.rows, generator=generator) * 2,
                  "spreads": torch.rand(self.rows, generator=generator) * 4 + 1, "width": self.width,
                  "length": self.length}
        if self.spread:
            stream["shifts"][:, 1::2] += 5 * SPREAD
        call = render(TEXTS["stream_call"], name=self.object, rows=self.rows, length=self.length, width=self.width)
        if self.judges == "memory":
            return Prepared(ProbeCall.of(score_blocks.probe_streamed, {"fn": self.object}, {**stream, "traced": True}),
                            StreamJudge(call, self.rows, self.length, self.width))
        blocks = (stream["seeds"], stream["shifts"], stream["spreads"], self.width, self.length)
        expected = {name: value.float() for name, value in zip(PARTS, exact_stats(score_blocks.score_blocks(*blocks)))}
        candidates = None if self.memory_cap else {
            m: dict(zip(PARTS, mistakes.flawed_streamed_stats(score_blocks.score_blocks(*blocks), m.flaws)))
            for m in catalog.tiling_mistakes("online")}
        judge = RecordJudge(expected, candidates, call=call, passed=TEXTS["stream_stats_passed"])
        probe_call = ProbeCall.of(score_blocks.probe_streamed, {"fn": self.object}, stream)
        if not self.memory_cap:
            return Prepared(probe_call, judge)
        failure = render(TEXTS["stream_error"], call=call, cap=f"{self.memory_cap / 2**20:g}",
                         size=f"{self.rows * self.length * 4 / 2**20:.0f}", block=f"{self.rows * self.width * 4 / 2**20:g}")
        return Prepared(probe_call, judge, memory_cap=self.memory_cap, on_error=failure)


STREAMED = dict(rows=4, width=2**16, blocks=100, last=2**16 - 4321)
"""The capped check's size: 4 rows of 6.5 million scores (100 MiB in float32, twice the cap), in
blocks of 4 x 65,536 (1 MiB)."""
