"""Hidden checks of assignment 05 (attention that fits in memory).

Values are compared with exact attention computed in float64, at the course's float32 tolerance,
on sizes the notebook never shows: T not a multiple of either block, block_q unlike block_k,
fewer queries than keys, a single query, and rows whose scores lie hundreds apart (a maximum
shared by all rows underflows there).

Memory and work earn points only from facts the student's process cannot forge. Memory: the
online softmax's ``softmax_stats`` reads rows of 100 MiB of scores, handed over 1 MiB at a time
and made on demand, in a run capped at 48 MiB more than it held before its first cell (only a pass
that folds each block in and lets it go fits), and its statistics are judged here. The tiled
forward, and the backward, with the mask and without, at two lengths drawn from the secret (3584
to 4096, 7168 to 8192: one head's score matrix up to 256 MiB in float32), the forward without
autograd, with it, and on inputs that require grad, run in a run whose memory the kernel caps at
48 MiB more than it held before its first cell; a tiled pass needs a few MiB, and the values are
judged here. Work: the CPU time the kernel counts for each
call of ``flash_forward`` and of ``flash_backward`` under the causal mask, read by the sandbox's
server around the call (:mod:`transformer_lm.instructor.timed_kinds`), against the same answer's
without the mask and the course's code on the same inputs. A trace of
the student's own call at T=96 (:mod:`transformer_lm.instructor.tiled_kinds`) only explains: when an item
fails, it names the line's mistake (a tensor of T x T numbers, a reduction over a whole row, a
block too many, what the forward keeps for the backward). Inputs come from the course's secret
seed.

A case wrapped in ``Also`` is one more case of the check before it (the same purpose on other
inputs), so that each item's checks are what some catalogued mistake fails alone (the audit
holds this): the merge of two parts' statistics, which two empty parts merged into NaN fail
alone; the online softmax's values and statistics, the streamed rows under the cap among them,
which one maximum for all rows or a reduction over a whole row fails alone; the tiled values
on every shape, forward and backward (one maximum for all rows fails only the rows hundreds apart,
a tile's mask off by one only the causal shapes); the capped calls of each mode and length, which
the whole score matrix built in any one mode fails. The sizes, modes, repeats and limits of the
capped and timed checks are calibrated: grouping changes none of them.
"""

from autograder.reading.spec import Also, Explains, Item
from transformer_lm.forbidding import LIBRARY_ATTENTION, SOFTMAX
from transformer_lm.instructor.capped_kinds import MEMORY_CAP, capped_checks
from transformer_lm.instructor.tiled_kinds import (CausalWorkCheck, FlashForwardCheck, FlashFunctionCheck, MergeStatsCheck,
                                                   OnlineSoftmaxCheck, TileCase)
from transformer_lm.instructor.stream_kinds import STREAMED, StreamStatsCheck
from transformer_lm.instructor.timed_kinds import TIMED, TIMED_BACKWARD, SkipTimeCheck

TILED = SOFTMAX + LIBRARY_ATTENTION

VALUES = (
    # T a multiple of neither block
    TileCase(batch=2, heads=2, seq_q=45, seq_k=45, dim=8, dim_v=5, block_q=12, block_k=7),
    # block_q < block_k: the diagonal crosses tiles
    TileCase(batch=1, heads=3, seq_q=45, seq_k=45, dim=16, dim_v=4, block_q=7, block_k=12, causal=True),
    # fewer queries than keys
    TileCase(batch=2, heads=1, seq_q=11, seq_k=53, dim=8, dim_v=8, block_q=4, block_k=16),
    TileCase(batch=1, heads=2, seq_q=1, seq_k=9, dim=4, dim_v=3, block_q=16, block_k=16),                   # one query
)
# rows hundreds apart: forward only
SPREAD = TileCase(batch=2, heads=1, seq_q=33, seq_k=33, dim=8, dim_v=6, block_q=6, block_k=8, causal=True, spread=True)
# T*T = 9216; a tile of every head 768, q 3072, the output 2304
MEMORY = TileCase(batch=2, heads=2, seq_q=96, seq_k=96, dim=8, dim_v=6, block_q=16, block_k=12)
CAUSAL_MEMORY = TileCase(batch=1, heads=3, seq_q=96, seq_k=96, dim=8, dim_v=8, block_q=12, block_k=16, causal=True)
# square tiles, seven query blocks
SKIPPING = TileCase(batch=2, heads=1, seq_q=112, seq_k=112, dim=8, dim_v=8, block_q=16, block_k=16, causal=True)


def one_check(cases):
    """``cases`` as one check, each after the first wrapped in ``Also``: they serve one purpose on
    other inputs, so the audit asks a catalogued mistake to need them together, not each case."""
    return (cases[0], *map(Also, cases[1:]))


def cases_of(kind, name, tile_cases):
    """One check of ``name``'s values, a ``kind`` check on each of ``tile_cases`` (each shape is a
    case of it: the values' purpose does not change with the shape)."""
    return one_check([kind(name, case) for case in tile_cases])


ITEMS = [
    Item("online_softmax", points=2, checks=(
        MergeStatsCheck("merge_stats", rows=7),
        # first: a shared maximum shows in the values
        OnlineSoftmaxCheck("online_softmax", rows=4, n=17, block=5, spread=True),
        Also(OnlineSoftmaxCheck("online_softmax", rows=5, n=43, block=6)),
        Also(OnlineSoftmaxCheck("online_softmax", rows=2, n=9, block=16)),           # one block holds the whole row
        Also(StreamStatsCheck("softmax_stats", rows=5, width=6, blocks=11, last=2, spread=True)),
        # 100 MiB of scores in 1 MiB blocks, made on demand: only a pass that lets each block go fits
        Also(StreamStatsCheck("softmax_stats", memory_cap=MEMORY_CAP, **STREAMED)),
        Explains(StreamStatsCheck("softmax_stats", rows=3, width=8, blocks=24, last=5, judges="memory")),
    ), forbids=SOFTMAX, defines=("merge_stats", "softmax_stats", "online_softmax")),
    Item("flash_forward", points=2, checks=cases_of(FlashForwardCheck, "flash_forward", (*VALUES, SPREAD)),
         forbids=TILED, defines=("flash_forward",), builds_on=("online_softmax",)),
    Item("flash_memory", points=1, checks=(
        *one_check(capped_checks("flash_forward")),
        Explains(FlashForwardCheck("flash_forward", MEMORY, "memory")),
        Explains(FlashForwardCheck("flash_forward", CAUSAL_MEMORY, "memory")),
    ), forbids=TILED, answer="flash_forward"),
    Item("causal_skipping", points=1, checks=(
        SkipTimeCheck("flash_forward", TIMED),
        Explains(CausalWorkCheck("flash_forward", CAUSAL_MEMORY)),
        Explains(CausalWorkCheck("flash_forward", SKIPPING)),
    ), forbids=TILED, answer="flash_forward"),
    Item("flash_backward", points=3, checks=cases_of(FlashFunctionCheck, "FlashAttention", VALUES[:3]),
         forbids=TILED, builds_on=("flash_forward",)),
    Item("backward_memory", points=1, checks=(
        *one_check(capped_checks("FlashAttention", backward=True)),
        SkipTimeCheck("flash_backward", TIMED_BACKWARD, backward=True),
        Explains(FlashFunctionCheck("FlashAttention", CAUSAL_MEMORY, "memory")),
        Explains(FlashFunctionCheck("FlashAttention", MEMORY, "memory")),
        Explains(CausalWorkCheck("FlashAttention", CAUSAL_MEMORY, backward=True)),   # the backward skips the same tiles
    ), forbids=TILED, answer="flash_backward", builds_on=("flash_forward", "flash_memory", "causal_skipping")),
]
