"""Kinds of check for attention computed tile by tile (assignment 05): its values, and what the
computation holds and does, judged from a trace of what ran (:mod:`transformer_lm.tiled_judges`
says how). Values are compared with exact attention computed in float64, at the course's float32
tolerance.

Each kind works as those of :mod:`transformer_lm.instructor.kinds` do: the visible checks prepare it from a
fixed seed, the grader from the course's secret.
"""

from __future__ import annotations

import math
from dataclasses import KW_ONLY, dataclass

import torch

from transformer_lm import catalog
from transformer_lm.instructor import mistakes
from transformer_lm.instructor.capped_kinds import untraced_call
from transformer_lm.instructor.kinds import backward_of
from transformer_lm.instructor import reference
from transformer_lm.flaws import TilingFlaws
from transformer_lm.judging import RecordJudge, overflowing
from transformer_lm.prepared import Prepared, ProbeCall
from transformer_lm.sandboxed import probes
from transformer_lm.tiled_judges import (SPREAD, TEXTS, WORK_TOLERANCE, FunctionJudge, MemoryJudge, PrefixJudge,
                                         TileCase, WorkJudge)
from transformer_lm.verdict_texts import render


def exact_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> dict[str, torch.Tensor]:
    """The output and each query's log-sum-exp of plain attention, computed in float64 and
    returned in q's dtype: what every tiled version must give."""
    mask = reference.causal_mask(q.shape[-2], k.shape[-2]) if causal else None
    scores = reference.apply_mask(reference.attention_scores(q.double(), k.double()), mask)
    return {"output": (reference.masked_softmax(scores) @ v.double()).to(q.dtype),
            "lse": torch.logsumexp(scores, dim=-1).to(q.dtype)}


@dataclass(frozen=True)
class MergeStatsCheck:
    """``object(max_a, sum_a, max_b, sum_b) -> (maximum, total)`` merges the softmax statistics
    of two parts of each row (the first part empty in row 0: maximum -inf, sum 0; both parts empty
    in row 1, which must stay empty, -inf and 0, not NaN) as :func:`reference.merge_softmax_stats`
    does."""

    object: str
    _: KW_ONLY
    rows: int = 6

    def prepare(self, generator: torch.Generator) -> Prepared:
        a = reference.SoftmaxStats(torch.randn(self.rows, generator=generator) * 3,
                                   torch.rand(self.rows, generator=generator) * 4 + 1)
        b = reference.SoftmaxStats(torch.randn(self.rows, generator=generator) * 3,
                                   torch.rand(self.rows, generator=generator) * 4 + 1)
        a.maximum[0], a.total[0] = float("-inf"), 0.0   # nothing seen yet
        a.maximum[1], a.total[1] = b.maximum[1], b.total[1] = float("-inf"), 0.0   # nothing seen on either side
        inputs = {"max_a": a.maximum, "sum_a": a.total, "max_b": b.maximum, "sum_b": b.total}
        expected = dict(zip(("maximum", "total"), reference.merge_softmax_stats(a, b)))
        candidates = {m: dict(zip(("maximum", "total"), mistakes.flawed_merge_stats(a, b, m.flaws)))
                      for m in catalog.tiling_mistakes("merge")}
        call = f"{self.object}(max_a, sum_a, max_b, sum_b) on {self.rows} rows"
        return Prepared(ProbeCall.of(probes.probe_traced, {"fn": self.object},
                                     {"inputs": inputs, "parts": ["maximum", "total"]}),
                        RecordJudge(expected, candidates, call=call))


@dataclass(frozen=True)
class OnlineSoftmaxCheck:
    """``object(scores, block)`` is the softmax of each row of ``scores`` ``(rows, n)``. How it
    holds a row is not judged here (its input is the whole row): ``softmax_stats``, which it folds
    the blocks with, is judged under the memory cap (:mod:`transformer_lm.instructor.stream_kinds`)."""

    object: str
    _: KW_ONLY
    rows: int
    n: int
    block: int
    spread: bool = False

    def prepare(self, generator: torch.Generator) -> Prepared:
        scores = torch.randn(self.rows, self.n, generator=generator) * 3
        if self.spread:
            scores[1::2] *= SPREAD
        expected = {"output": torch.softmax(scores.double(), dim=-1).float()}
        candidates = {m: {"output": mistakes.flawed_online_softmax(scores, self.block, m.flaws)}
                      for m in catalog.tiling_mistakes("online")}
        call = f"{self.object}(scores of shape {tuple(scores.shape)}, block={self.block})"

        return Prepared(ProbeCall.of(probes.probe_parts, {"fn": self.object},
                                     {"inputs": {"scores": scores}, "parts": ["output"],
                                      "call_kwargs": {"block": self.block}}),
                        RecordJudge(expected, candidates, call=call, passed=TEXTS["softmax_passed"],
                                    inputs=overflowing({"scores": scores})))


@dataclass(frozen=True)
class FlashForwardCheck:
    """``object(q, k, v, causal=..., block_q=..., block_k=...) -> (output, lse)`` for ``case``.
    ``judges="values"`` compares both with exact attention, naming the catalogued mistakes;
    ``judges="memory"`` judges only what the call's operators held (:func:`transformer_lm.tiled_judges.memory_problem`)."""

    object: str
    case: TileCase
    judges: str = "values"

    def prepare(self, generator: torch.Generator) -> Prepared:
        case, tensors = self.case, self.case.tensors(generator)
        q, k, v = tensors["q"], tensors["k"], tensors["v"]
        call = case.call(self.object)
        expected = exact_attention(q, k, v, case.causal)
        candidates = {}
        if self.judges == "values":
            with torch.no_grad():
                for mistake in catalog.tiling_mistakes("causal" if case.causal else "forward"):
                    flawed = mistakes.flawed_flash_forward(q, k, v, case.causal, case.block_q, case.block_k,
                                                          mistake.flaws)
                    candidates[mistake] = dict(zip(("output", "lse"), flawed))

        judge_forward = MemoryJudge(call, case) if self.judges == "memory" else RecordJudge(
            expected, candidates, call=call, passed=TEXTS["forward_passed"])
        arguments = {"inputs": {"q": q, "k": k, "v": v}, "parts": ["output", "lse"], "call_kwargs": case.options}
        return Prepared(ProbeCall.of(probes.probe_traced, {"fn": self.object}, arguments), judge_forward)


def tile_share(case: TileCase, flaws: TilingFlaws = TilingFlaws()) -> float:
    """The share of the score tiles' numbers that a causal call computes when it visits the key
    blocks that :func:`transformer_lm.instructor.mistakes.flawed_key_blocks` gives (the reference's without
    flaws), against a call without the mask."""
    def numbers(causal: bool) -> int:
        total = 0
        for qs in range(0, case.seq_q, case.block_q):
            rows = min(case.block_q, case.seq_q - qs)
            for ks in mistakes.flawed_key_blocks(qs, qs + rows, case.seq_k, case.block_k, causal, flaws):
                total += rows * min(case.block_k, case.seq_k - ks)
        return total
    return numbers(True) / numbers(False)


@dataclass(frozen=True)
class CausalWorkCheck:
    """Under the causal mask, ``object`` computes the scores of the key blocks that are not wholly
    in a query block's future, and no others: it does at most that share of the work it does
    without the mask (:func:`tile_share`, within :data:`transformer_lm.tiled_judges.WORK_TOLERANCE`).
    The mistakes it names are those that do more; one that does less (a block too few) gives wrong
    values, which the forward's own check names. With
    ``backward``, ``object`` is the autograd Function and its backward pass is counted: it
    recomputes the weights of the same tiles. A call that builds the whole score matrix is named for that, the mistake the memory check charges: with
    its answer charged there, one mistake costs points once."""

    object: str
    case: TileCase
    _: KW_ONLY
    backward: bool = False

    def prepare(self, generator: torch.Generator) -> Prepared:
        case, tensors = self.case, self.case.tensors(generator)
        share = tile_share(case)
        candidates = {mistake: tile_share(case, mistake.flaws) for mistake in catalog.tiling_mistakes("work")
                      if tile_share(case, mistake.flaws) > share + WORK_TOLERANCE}
        options = {"block_q": case.block_q, "block_k": case.block_k}
        call = f"{self.object}(q, k, v of T={case.seq_q}, block_q={case.block_q}, block_k={case.block_k})"
        if self.backward:
            call = f"the backward of {self.object}.apply(q, k, v, causal, {case.block_q}, {case.block_k}), T={case.seq_q},"

        return Prepared(ProbeCall.of(probes.probe_causal_work, {"fn": self.object},
                                     {"q": tensors["q"], "k": tensors["k"], "v": tensors["v"],
                                      "call_kwargs": options, "backward": self.backward}),
                        WorkJudge(call, case, share, candidates))


def exact_gradients(tensors: dict[str, torch.Tensor], causal: bool) -> dict[str, torch.Tensor]:
    """The gradients of q, k and v of exact attention (float64) for the upstream gradient."""
    leaves = {name: tensors[name].double().requires_grad_(True) for name in "qkv"}
    mask = reference.causal_mask(leaves["q"].shape[-2], leaves["k"].shape[-2]) if causal else None
    scores = reference.apply_mask(reference.attention_scores(leaves["q"], leaves["k"]), mask)
    backward_of(reference.masked_softmax(scores) @ leaves["v"], tensors["grad_output"].double())
    return {f"grad.{name}": leaf.grad.float() for name, leaf in leaves.items()}


@dataclass(frozen=True)
class FlashFunctionCheck:
    """``object.apply(q, k, v, causal, block_q, block_k)`` for a ``torch.autograd.Function``:
    ``judges="gradients"`` compares the gradients of q, k and v with exact attention's;
    ``judges="memory"`` requires the forward to keep alive no more than q, k, v, the output and
    the log-sum-exp take, and the backward to hold no ``T_q * T_k`` tensor nor a whole row."""

    object: str
    case: TileCase
    judges: str = "gradients"

    def prepare(self, generator: torch.Generator) -> Prepared:
        case, tensors = self.case, self.case.tensors(generator)
        call = (f"{self.object}.apply(q, k, v, {case.causal}, {case.block_q}, {case.block_k}) with q of shape "
                f"({case.batch}, {case.heads}, {case.seq_q}, {case.dim}) and {case.seq_k} keys")
        expected_shape = (case.batch, case.heads, case.seq_q, case.dim_v)
        expected, candidates = {}, {}
        if self.judges == "gradients":
            expected = exact_gradients(tensors, case.causal)
            for mistake in catalog.tiling_mistakes("backward"):
                flawed = mistakes.flawed_flash_gradients(tensors["q"], tensors["k"], tensors["v"],
                                                        tensors["grad_output"], case.causal, case.block_q,
                                                        case.block_k, mistake.flaws)
                candidates[mistake] = {f"grad.{name}": g for name, g in zip("qkv", flawed)}
        kept_allowed = 4 * sum(t.numel() for t in (tensors["q"], tensors["k"], tensors["v"])) \
            + 4 * (case.batch * case.heads * case.seq_q * (case.dim_v + 1))

        arguments = {"q": tensors["q"], "k": tensors["k"], "v": tensors["v"],
                     "arguments": [case.causal, case.block_q, case.block_k], "grad_output": tensors["grad_output"]}
        judge_function = FunctionJudge(call, case, expected_shape, self.judges == "gradients", expected, candidates,
                                       kept_allowed)
        return Prepared(ProbeCall.of(probes.probe_autograd_function, {"cls": self.object}, arguments), judge_function)


@dataclass(frozen=True)
class SkippedTilesCheck:
    """A visible check: under the causal mask, ``object`` leaves alone the key blocks wholly in a
    query block's future, seen in its values: one key block (never the first) is filled with NaN in
    k and v. The query blocks before it never see those keys, so their rows must come out equal to
    exact attention on the keys before it; a call that computes that block for them and masks it
    makes them NaN, since a zero weight times NaN is NaN. A call that refuses NaN is told so and not
    judged, and one made safe against NaN passes it: the grader judges the work by CPU time
    (:mod:`transformer_lm.instructor.timed_kinds`). With ``backward``, ``object`` is the autograd
    Function and the rows of q's gradient are judged so."""

    object: str
    case: TileCase
    _: KW_ONLY
    backward: bool = False

    def prepare(self, generator: torch.Generator) -> Prepared:
        case, tensors = self.case, self.case.tensors(generator)
        step = math.lcm(case.block_q, case.block_k)   # a poisoned block that starts where a query block does
        start = step * int(torch.randint(1, case.seq_k // step, (1,), generator=generator))
        clean = {name: tensors[name][..., :start, :] for name in ("q", "k", "v", "grad_output")}
        for name in "kv":
            tensors[name][..., start:start + case.block_k, :] = float("nan")
        what = render(TEXTS["backward_of_apply"], name=self.object) if self.backward else self.object
        if self.backward:
            expected = {"grad.q": exact_gradients(clean, causal=True)["grad.q"]}
            candidates = {m: {"grad.q": mistakes.flawed_flash_gradients(
                clean["q"], clean["k"], clean["v"], clean["grad_output"], True, case.block_q, case.block_k, m.flaws)[0]}
                for m in catalog.tiling_mistakes("backward")}
        else:
            expected = exact_attention(clean["q"], clean["k"], clean["v"], causal=True)
            with torch.no_grad():
                candidates = {m: dict(zip(("output", "lse"), mistakes.flawed_flash_forward(
                    clean["q"], clean["k"], clean["v"], True, case.block_q, case.block_k, m.flaws)))
                    for m in catalog.tiling_mistakes("causal")}
        judge = PrefixJudge(f"{case.call(what)}, with keys {start} to {start + case.block_k - 1} made NaN", start,
                            expected, candidates)
        return Prepared(untraced_call(self.object, tensors, case, self.backward), judge, refused=TEXTS["refuses_nan"])
