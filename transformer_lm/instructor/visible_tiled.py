"""Assignment 05's visible checks (tiled attention): the sizes the test cells use, and the groups of
:mod:`transformer_lm.instructor.visible_checks`' table for its notebook."""

from __future__ import annotations

from dataclasses import replace

from transformer_lm.instructor.capped_kinds import MEMORY_CAP, capped_checks
from transformer_lm.instructor.stream_kinds import STREAMED, StreamStatsCheck
from transformer_lm.instructor.tiled_kinds import (CausalWorkCheck, FlashForwardCheck, FlashFunctionCheck,
                                                   MergeStatsCheck, OnlineSoftmaxCheck, SkippedTilesCheck, TileCase)
from transformer_lm.instructor.visible_entries import Entry, each, entry, seeded

TILED_VALUE_CASES = (
    # T not a multiple of either block
    TileCase(batch=2, heads=3, seq_q=37, seq_k=37, dim=8, dim_v=6, block_q=8, block_k=5),
    TileCase(batch=2, heads=3, seq_q=37, seq_k=37, dim=8, dim_v=6, block_q=8, block_k=5, causal=True),
    # fewer queries than keys, one query block
    TileCase(batch=1, heads=2, seq_q=19, seq_k=45, dim=4, dim_v=7, block_q=16, block_k=16),
)
TILED_SPREAD_CASE = TileCase(batch=2, heads=2, seq_q=29, seq_k=29, dim=8, dim_v=6, block_q=8, block_k=4, causal=True,
                             spread=True)
"""Rows whose scores lie hundreds apart: one maximum shared by all rows underflows. (Only for the
forward: float32 gradients of scores in the hundreds stray past the course's tolerance.)"""
TILED_MEMORY_CASE = TileCase(batch=1, heads=2, seq_q=160, seq_k=160, dim=8, dim_v=8, block_q=16, block_k=16,
                             causal=True)
"""The visible checks' sizes: at T=160 the (T, T) score matrix is 25,600 numbers, a 16 x 16 tile
of one batch and head 256, and the output of every head 2,560."""
TILED_LARGE_CASE = TileCase(batch=1, heads=1, seq_q=4096, seq_k=4096, dim=4, dim_v=4, block_q=1024, block_k=512)
"""Where a (T, T) matrix of scores dwarfs the interpreter's own allocations: 16 million numbers
(64 MiB in float32), a tile 524,288, q, k and v 16,384 each. (The memory cap, which sees every
form of memory, is checked at the grader's lengths and modes, :func:`capped_checks`.)"""


def efficient_attention() -> dict[str, list[Entry]]:
    return {
        "merge_stats": each("merge_stats", MergeStatsCheck("merge_stats")),
        # the values, the rows of 100 MiB under the memory cap, and a trace that names a whole-row pass
        "softmax_stats": each("softmax_stats", StreamStatsCheck("softmax_stats", rows=4, width=5, blocks=9, last=3,
                                                                spread=True),
                              StreamStatsCheck("softmax_stats", memory_cap=MEMORY_CAP, **STREAMED))
        + [entry("softmax_stats", seeded(StreamStatsCheck("softmax_stats", rows=3, width=8, blocks=24, last=5,
                                                          judges="memory")), explains=True)],
        "online_softmax": each("online_softmax",
                               OnlineSoftmaxCheck("online_softmax", rows=6, n=21, block=4, spread=True),
                               OnlineSoftmaxCheck("online_softmax", rows=4, n=50, block=8)),
        "flash_forward": each("flash_forward", *(FlashForwardCheck("flash_forward", case)
                                                   for case in (*TILED_VALUE_CASES, TILED_SPREAD_CASE))),
        "flash_memory": each("flash_forward", FlashForwardCheck("flash_forward", TILED_MEMORY_CASE, "memory"),
                             FlashForwardCheck("flash_forward", TILED_LARGE_CASE, "memory"),
                             *capped_checks("flash_forward", names_mistakes=False)),
        # the trace's count first, which says how many tiles ran; then the NaN key block, which no
        # inflated count can pass (the grader's check)
        "causal_skipping": each("flash_forward", CausalWorkCheck("flash_forward", TILED_MEMORY_CASE),
                                SkippedTilesCheck("flash_forward", TILED_MEMORY_CASE)),
        "flash_backward": each("FlashAttention.backward", *(FlashFunctionCheck("FlashAttention", case)
                                                              for case in TILED_VALUE_CASES)),
        # the trace with the mask and without (what the forward keeps may differ), then the cap
        "backward_memory": each("FlashAttention", FlashFunctionCheck("FlashAttention", TILED_MEMORY_CASE, "memory"),
                                FlashFunctionCheck("FlashAttention", replace(TILED_MEMORY_CASE, causal=False),
                                                   "memory"),
                                *capped_checks("FlashAttention", backward=True, names_mistakes=False))
        + each("FlashAttention.backward", CausalWorkCheck("FlashAttention", TILED_MEMORY_CASE, backward=True))
        + each("FlashAttention", SkippedTilesCheck("FlashAttention", TILED_MEMORY_CASE, backward=True)),
    }
