"""A row of scores handed over one block at a time, each made only when it is asked for: how the
online softmax's memory is judged (assignment 05).

``softmax_stats(blocks)`` is called on :func:`score_blocks`. At the grader's size the rows hold far
more scores than a capped run may hold at once (:mod:`transformer_lm.sandboxed.memory_cap`): an
answer that keeps the blocks (in a list, through ``torch.cat`` or ``torch.stack``) runs out of
memory, while one that folds each block into running statistics and lets it go holds about a block.
The generator keeps no block it has handed over, and every block is new memory (never a view of
another), so a kept block is always counted. The blocks are made from the inputs the plan gives (a
seed per block, shifts and spreads), never from the course's code or its secret.
"""

from __future__ import annotations

import contextlib

import torch

from transformer_lm.sandboxed.student_objects import parts_of
from transformer_lm.sandboxed.tensor_trace import trace_tensors


def score_blocks(seeds: torch.Tensor, shifts: torch.Tensor, spreads: torch.Tensor, width: int, length: int):
    """Yields the blocks, ``(rows, width)`` each (the last shorter where ``width`` does not divide
    ``length``), of rows of ``length`` scores: in block ``j``, row ``r`` is uniform from
    ``shifts[j, r]`` to ``shifts[j, r] + spreads[r]``, drawn from ``seeds[j]``. Each is made when
    asked for, and the generator keeps none it has handed over."""
    for index, start in enumerate(range(0, length, width)):
        yield _block(int(seeds[index]), shifts[index].tolist(), spreads.tolist(), min(width, length - start))


def _block(seed: int, shifts: list[float], spreads: list[float], width: int) -> torch.Tensor:
    """One block, ``(len(spreads), width)``, drawn row by row (one pass over it, on one thread)."""
    generator, block = torch.Generator().manual_seed(seed), torch.empty(len(spreads), width)
    for row, (shift, spread) in enumerate(zip(shifts, spreads)):
        block[row].uniform_(shift, shift + spread, generator=generator)
    return block


def probe_streamed(fn, seeds: torch.Tensor, shifts: torch.Tensor, spreads: torch.Tensor, width: int, length: int,
                   traced: bool = False) -> dict[str, torch.Tensor]:
    """Calls ``fn(blocks)`` once without gradients on :func:`score_blocks`, and records the
    ``maximum`` and ``total`` it returns; with ``traced``, under a
    :class:`~transformer_lm.sandboxed.tensor_trace.TensorTrace` (the blocks it is handed count as
    made during the call), recorded as ``trace.*``."""
    blocks = score_blocks(seeds, shifts, spreads, width, length)
    with torch.no_grad(), trace_tensors() if traced else contextlib.nullcontext() as trace:
        result = fn(blocks)
    record = parts_of(result, ["maximum", "total"])
    return {**record, **trace.record("trace")} if traced else record
