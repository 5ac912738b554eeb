"""Hidden checks of assignment 05 (attention that fits in memory).

Values are compared with exact attention computed in float64, at the course's float32 tolerance,
on sizes the notebook never shows: T not a multiple of either block, block_q unlike block_k,
fewer queries than keys, a single query, and rows whose scores lie hundreds apart (a maximum
shared by all rows underflows there). Memory and work are judged from a trace of the student's
own call in the sandbox (:mod:`transformer_lm.tiled_kinds`): at T=96 with tiles of 16 x 12, a
tensor of T x T numbers, a reduction over a whole row of keys, a causal forward (or backward) that
computes the key blocks in the future, or a forward that keeps more than q, k, v, the output and
the log-sum-exp each lose their own item. At T=4096, where the score matrix holds 16.8 million
numbers, the forward is traced again, and what the forward and the backward each hold outside
torch's tensors (NumPy arrays, Python objects, memory maps) is measured, with the processes they
start. Inputs come from the
course's secret seed.
"""

from autograder.spec import Item
from transformer_lm.forbidding import LIBRARY_ATTENTION, SOFTMAX
from transformer_lm.tiled_kinds import (CausalWorkCheck, FlashForwardCheck, FlashFunctionCheck, MergeStatsCheck,
                                        OnlineSoftmaxCheck, TileCase)

TILED = SOFTMAX + LIBRARY_ATTENTION

VALUES = (
    TileCase(2, 2, 45, 45, 8, 5, 12, 7),                  # T a multiple of neither block
    TileCase(1, 3, 45, 45, 16, 4, 7, 12, causal=True),    # block_q < block_k: the diagonal crosses tiles
    TileCase(2, 1, 11, 53, 8, 8, 4, 16),                  # fewer queries than keys
    TileCase(1, 2, 1, 9, 4, 3, 16, 16),                   # one query
)
SPREAD = TileCase(2, 1, 33, 33, 8, 6, 6, 8, causal=True, spread=True)   # rows hundreds apart: forward only
MEMORY = TileCase(2, 2, 96, 96, 8, 6, 16, 12)   # T*T = 9216; a tile of every head 768, q 3072, the output 2304
CAUSAL_MEMORY = TileCase(1, 3, 96, 96, 8, 8, 12, 16, causal=True)
LARGE = TileCase(1, 1, 4096, 4096, 4, 4, 512, 1024)   # T*T = 16.8 million (64 MiB in float32); a tile 524,288

ITEMS = [
    Item("online_softmax", 2, (
        MergeStatsCheck("merge_stats", rows=7),
        OnlineSoftmaxCheck("online_softmax", 4, 17, 5, spread=True),   # first: a shared maximum shows in the values
        OnlineSoftmaxCheck("online_softmax", 5, 43, 6),
        OnlineSoftmaxCheck("online_softmax", 2, 9, 16),                 # one block holds the whole row
    ), forbids=SOFTMAX, defines=("merge_stats", "online_softmax")),
    Item("flash_forward", 2, tuple(FlashForwardCheck("flash_forward", case) for case in (*VALUES, SPREAD)),
         forbids=TILED, defines=("flash_forward",), builds_on=("online_softmax",)),
    Item("flash_memory", 1, (
        FlashForwardCheck("flash_forward", MEMORY, "memory"),
        FlashForwardCheck("flash_forward", CAUSAL_MEMORY, "memory"),
        FlashForwardCheck("flash_forward", LARGE, "memory"),    # a tensor of the whole matrix only at a large T
        FlashForwardCheck("flash_forward", LARGE, "outside"),   # NumPy arrays, Python lists, memory maps, processes
    ), forbids=TILED, answer="flash_forward"),
    Item("causal_skipping", 1, (
        CausalWorkCheck("flash_forward", CAUSAL_MEMORY),
        CausalWorkCheck("flash_forward", TileCase(2, 1, 112, 112, 8, 8, 16, 16, causal=True)),
    ), forbids=TILED, answer="flash_forward"),
    Item("flash_backward", 3, tuple(FlashFunctionCheck("FlashAttention", case) for case in VALUES[:3]),
         forbids=TILED, builds_on=("flash_forward",)),
    Item("backward_memory", 1, (
        FlashFunctionCheck("FlashAttention", CAUSAL_MEMORY, "memory"),
        FlashFunctionCheck("FlashAttention", MEMORY, "memory"),
        FlashFunctionCheck("FlashAttention", LARGE, "outside"),   # the backward, outside torch's tensors
        CausalWorkCheck("FlashAttention", CAUSAL_MEMORY, backward=True),   # the backward skips the same tiles
    ), forbids=TILED, answer="flash_backward", builds_on=("flash_forward",)),
]
