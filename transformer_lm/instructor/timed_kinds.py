"""The kind of check that judges causal block skipping by CPU time (:mod:`transformer_lm.timed_judges`
says how it is judged, :mod:`autograder.running.clocked` how it is timed).

Why these sizes: the work a call may skip must outweigh anything else it does, or the figures
say more about how the answer is written than about which tiles it computed. So the queries and
keys have many features and the values few (the products that make the scores dominate each
tile's cost), and the tiles are large (Python's cost per tile, a few dozen microseconds, is small
beside each tile's products). With eight blocks of each, a causal call visits 36 of the 64 tiles.
The calls run in the run that the memory cap bounds (48 MiB more than it held before its first
cell), with the cap's allocator, as the course's code runs for the figures they are compared with;
the backward's features are half the forward's, so that a backward kept in float64 fits there.
"""

from __future__ import annotations

import functools
import math
from dataclasses import KW_ONLY, dataclass

import torch

from transformer_lm import catalog
from transformer_lm.instructor import mistakes
from transformer_lm.instructor.tiled_kinds import exact_attention, tile_share
from transformer_lm.judging import Computed, RecordJudge
from transformer_lm.prepared import Clocked, Prepared, ProbeCall
from transformer_lm.sandboxed import probes
from transformer_lm.tiled_judges import TileCase
from transformer_lm.timed_judges import SkipTimeJudge

TIMED = TileCase(batch=1, heads=1, seq_q=1024, seq_k=1024, dim=1024, dim_v=8, block_q=128, block_k=128, causal=True)
"""Where a forward is timed: eight blocks of each, 36 of 64 tiles visited under the mask, so that
computing them all costs nearly twice as much; q and k 4 MiB each, a tile's scores 17 million
multiply-adds, which outweigh the softmax's work on them: an answer that makes every tile's scores
and skips only the rest is caught too. With six blocks (T = 768) the cost of handing a window its
inputs weighs so much more that the honest answers and the evasions came within 3% of each other;
at T = 2048 with 128 features an answer that makes every tile's scores came within 3% of the
limit."""
TIMED_BACKWARD = TileCase(batch=1, heads=1, seq_q=2048, seq_k=2048, dim=128, dim_v=8, block_q=256, block_k=256,
                          causal=True)
"""Where a backward is timed: eight blocks of each again. A tile's work there is three products of its
features and the softmax's on its scores, all of which a call may skip, while what it must do whatever
tiles it visits (take its inputs, allocate its gradients, send its record) grows with T times the
features: so T is long and q and k have 128 features (1 MiB each). At T = 1024 with 512 features (the
same products, twice the inputs) a backward that sweeps dk and dv over every tile and skips only dq's
products took 1.37 times the course's ratio, two points above the limit; here 1.47."""
REPEATS = 5
"""Windows with the mask, and as many without, in turn: the median of the five pairs' ratios is judged
(:func:`~transformer_lm.timed_judges.paired_ratio`). With the fastest of three of each, a fresh
clone's test run (two test workers beside each other's sandboxes) once let an answer that sweeps dk
and dv over every tile through, and with the fastest of five, once again."""
REFERENCE_REPEATS = 3
"""How many times the course's code makes each window's call: its figure, made once per class
and compared with every answer's, is the median of fifteen pairs, so that a moment of load
when it was made does not move every answer's limit. (Calibrated quiet and beside a CPU hog, the
course's figure stayed within 0.65 to 0.70 for the forward and 0.68 to 0.71 for the backward with
three times as with five: docs/grading.md.)"""
FORWARD_NAMES = ("q", "k", "v")
BACKWARD_NAMES = ("q", "k", "v", "out", "lse", "grad_out")


def exact_backward(q, k, v, out, lse, grad_out, causal: bool) -> dict[str, torch.Tensor]:
    """The gradients of q, k and v that the backward by recomputation gives for this ``out`` and
    ``lse`` (as a tiled backward receives them), in float64 all through, whole rows at a time:
    ``P = exp(S - lse)``, ``D = rowsum(dO * O)``, ``dS = P * (dO V^T - D)``, rounded to float32."""
    q, k, v, out, lse, grad_out = (t.double() for t in (q, k, v, out, lse, grad_out))
    scale = 1 / math.sqrt(q.shape[-1])
    scores = q @ k.mT * scale
    if causal:
        scores = scores.masked_fill(torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1), -math.inf)
    weights = torch.exp(scores - lse.unsqueeze(-1))
    d_scores = weights * (grad_out @ v.mT - (grad_out * out).sum(-1, keepdim=True))
    return {"grad.q": (d_scores @ k * scale).float(), "grad.k": (d_scores.mT @ q * scale).float(),
            "grad.v": (weights.mT @ grad_out).float()}


@dataclass(frozen=True)
class SkipTimeCheck:
    """``object`` (``flash_forward``, or with ``backward`` ``flash_backward``, handed the output and
    the log-sum-exp of exact attention) called at ``case``'s size :data:`REPEATS` times with
    ``causal=True`` and as many without, each on fresh inputs that reach the run only when the
    server starts its clock. The values of the causal calls are judged, and their CPU time against
    the same answer's without the mask, as the course's code's compares on the same inputs."""

    object: str
    case: TileCase
    _: KW_ONLY
    backward: bool = False

    def prepare(self, generator: torch.Generator) -> Prepared:
        case, seed = self.case, int(torch.randint(2**62, (1,), generator=generator))
        windows = [{"causal": causal} for _ in range(REPEATS) for causal in (True, False)]

        def inputs(window: int) -> dict[str, torch.Tensor]:
            """Window ``window``'s tensors, by the call's flattened names: drawn again each time, a
            forward's (its random tensors cost little, and hold 8 MiB a window), or made once, a
            backward's (exact attention in float64, 0.1 s a window, wanted by each worker's
            sandbox and by the values; 2 MiB a window). No reader changes them in place."""
            drawn = case.tensors(torch.Generator().manual_seed(seed + window))
            found = {name: drawn[name] for name in FORWARD_NAMES}
            if self.backward:
                found.update(exact_attention(*found.values(), windows[window]["causal"]))
                found = {**dict(zip(BACKWARD_NAMES, found.values())), "grad_out": drawn["grad_output"]}
            return {f"inputs/{name}": tensor for name, tensor in found.items()}

        if self.backward:
            inputs = functools.cache(inputs)
        causal = [window for window, kwargs in enumerate(windows) if kwargs["causal"]]
        names = BACKWARD_NAMES if self.backward else FORWARD_NAMES
        call = ProbeCall.of(probes.probe_parts, {"fn": self.object}, {
            "inputs": {name: torch.empty(0) for name in names},   # each window's own come from the server
            "parts": ["grad.q", "grad.k", "grad.v"] if self.backward else ["output", "lse"],
            "call_kwargs": {"block_q": case.block_q, "block_k": case.block_k}})
        said = case.call(self.object)
        values = Computed(lambda: {window: self._values(lambda w=window: inputs(w), said) for window in causal})
        judge = SkipTimeJudge(said, causal, [window for window in range(len(windows)) if window not in causal], values,
                              tile_share(case))
        return Prepared(call, judge, clocked=Clocked(windows, inputs, list(range(len(windows))) * REFERENCE_REPEATS,
                                                     self.object))

    def _values(self, inputs, call: str) -> RecordJudge:
        """How one causal window is judged (``inputs()`` makes its tensors): against exact attention's
        values, naming the catalogued mistakes of the forward (or of the backward) by theirs on the
        same inputs, which are made only for a record that fails."""
        found = {name.removeprefix("inputs/"): t for name, t in inputs().items()}
        case = self.case

        def flawed() -> dict:
            again = {name.removeprefix("inputs/"): t for name, t in inputs().items()}
            q, k, v = again["q"], again["k"], again["v"]
            if self.backward:
                return {m: dict(zip(("grad.q", "grad.k", "grad.v"), mistakes.flawed_flash_gradients(
                    q, k, v, again["grad_out"], True, case.block_q, case.block_k, m.flaws)))
                    for m in catalog.tiling_mistakes("backward")}
            with torch.no_grad():
                return {m: dict(zip(("output", "lse"), mistakes.flawed_flash_forward(
                    q, k, v, True, case.block_q, case.block_k, m.flaws))) for m in catalog.tiling_mistakes("causal")}

        expected = exact_backward(*found.values(), causal=True) if self.backward else \
            exact_attention(found["q"], found["k"], found["v"], causal=True)
        return RecordJudge(expected, Computed(flawed), call=call)
