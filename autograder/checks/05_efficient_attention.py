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
# T*T = 16.8 million (64 MiB in float32); a tile 524,288
LARGE = TileCase(batch=1, heads=1, seq_q=4096, seq_k=4096, dim=4, dim_v=4, block_q=512, block_k=1024)

ITEMS = [
    Item("online_softmax", points=2, checks=(
        MergeStatsCheck("merge_stats", rows=7),
        # first: a shared maximum shows in the values
        OnlineSoftmaxCheck("online_softmax", rows=4, n=17, block=5, spread=True),
        OnlineSoftmaxCheck("online_softmax", rows=5, n=43, block=6),
        OnlineSoftmaxCheck("online_softmax", rows=2, n=9, block=16),                 # one block holds the whole row
    ), forbids=SOFTMAX, defines=("merge_stats", "online_softmax")),
    Item("flash_forward", points=2, checks=tuple(FlashForwardCheck("flash_forward", case) for case in (*VALUES,
                                                                                                       SPREAD)),
         forbids=TILED, defines=("flash_forward",), builds_on=("online_softmax",)),
    Item("flash_memory", points=1, checks=(
        FlashForwardCheck("flash_forward", MEMORY, "memory"),
        FlashForwardCheck("flash_forward", CAUSAL_MEMORY, "memory"),
        FlashForwardCheck("flash_forward", LARGE, "memory"),    # a tensor of the whole matrix only at a large T
        FlashForwardCheck("flash_forward", LARGE, "outside"),   # NumPy arrays, Python lists, memory maps, processes
    ), forbids=TILED, answer="flash_forward"),
    Item("causal_skipping", points=1, checks=(
        CausalWorkCheck("flash_forward", CAUSAL_MEMORY),
        CausalWorkCheck("flash_forward", TileCase(batch=2, heads=1, seq_q=112, seq_k=112, dim=8, dim_v=8, block_q=16,
                                                  block_k=16, causal=True)),
    ), forbids=TILED, answer="flash_forward"),
    Item("flash_backward", points=3, checks=tuple(FlashFunctionCheck("FlashAttention", case) for case in VALUES[:3]),
         forbids=TILED, builds_on=("flash_forward",)),
    Item("backward_memory", points=1, checks=(
        FlashFunctionCheck("FlashAttention", CAUSAL_MEMORY, "memory"),
        FlashFunctionCheck("FlashAttention", MEMORY, "memory"),
        FlashFunctionCheck("FlashAttention", LARGE, "outside"),   # the backward, outside torch's tensors
        CausalWorkCheck("FlashAttention", CAUSAL_MEMORY, backward=True),   # the backward skips the same tiles
    ), forbids=TILED, answer="flash_backward", builds_on=("flash_forward",)),
]
