"""Kinds of check for attention computed tile by tile (assignment 05): its values, and what the
computation holds and does, judged from a trace of what ran (:mod:`transformer_lm.tiled_judges`
says how). Values are compared with exact attention computed in float64, at the course's float32
tolerance.

Each kind works as those of :mod:`transformer_lm.instructor.kinds` do: the visible checks prepare it from a
fixed seed, the grader from the course's secret.
"""

from __future__ import annotations

import math
from dataclasses import KW_ONLY, dataclass, replace

import torch

from transformer_lm import catalog
from transformer_lm.instructor import mistakes
from transformer_lm.instructor.kinds import backward_of
from transformer_lm.instructor import reference
from transformer_lm.flaws import TilingFlaws
from transformer_lm.judging import Computed, RecordJudge, overflowing
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


def exact_by_query_blocks(tensors: dict[str, torch.Tensor], causal: bool, gradients: bool,
                          rows: int = 512) -> dict[str, torch.Tensor]:
    """:func:`exact_attention` (or with ``gradients`` the output and :func:`exact_gradients`) at a
    capped check's size, where the whole score matrix would not fit in the grader's memory either:
    the same float64 sums, ``rows`` queries at a time against every key, in float32. It shares no
    code with the tiled reference, so a mistake of the tiling could not hide in both.

    It is made once per class, in the grader's own time, over 67 million scores, so it walks them
    as few times as it can (``tests/test_tiled_checks.py`` holds it to the plain versions):

    * under the causal mask, a block's queries are held against the keys up to its last query's
      (the keys after them are masked for every query of the block, so they add nothing);
    * no row is empty (each query sees at least its own key), so the softmax needs no guard for one;
    * without gradients, the softmax is written out in place, and the log-sum-exp comes from its
      own maximum and sum."""
    leaves = {name: tensors[name].double().requires_grad_(gradients) for name in "qkv"}
    q, k, v = leaves.values()
    seq_q, seq_k = q.shape[-2], k.shape[-2]
    if causal and seq_q > seq_k:
        raise ValueError(f"{seq_q} queries against {seq_k} keys under the causal mask leave rows empty")
    mask = reference.causal_mask(seq_q, seq_k) if causal else None
    outputs, lses = [], []
    for start in range(0, seq_q, rows):
        block = slice(start, start + rows)
        keys = slice(0, min(seq_k, start + rows + seq_k - seq_q) if causal else seq_k)
        with torch.set_grad_enabled(gradients):
            scores = reference.apply_mask(reference.attention_scores(q[..., block, :], k[..., keys, :]),
                                          None if mask is None else mask[block, keys])
        if gradients:
            out = torch.softmax(scores, dim=-1) @ v[..., keys, :]
            backward_of(out, tensors["grad_output"][..., block, :].double())
        else:
            top = scores.amax(dim=-1, keepdim=True)
            exponentials = scores.sub_(top).exp_()            # (..., rows, keys), the scores no longer needed
            total = exponentials.sum(dim=-1, keepdim=True)
            out = (exponentials @ v[..., keys, :]) / total
            lses.append((top + total.log()).squeeze(-1))
        outputs.append(out.detach())
    found = {"output": torch.cat(outputs, dim=-2).float()}
    if gradients:
        return {**found, **{f"grad.{name}": leaf.grad.float() for name, leaf in leaves.items()}}
    return {**found, "lse": torch.cat(lses, dim=-1).float()}


def untraced_call(name: str, tensors: dict[str, torch.Tensor], case: TileCase, backward: bool,
                  modes: tuple[str, ...] = ()) -> ProbeCall:
    """The call of ``name`` on ``tensors`` at ``case``, untraced: the forward's output and
    log-sum-exp (in each grad mode of ``modes``, or once without gradients), or with ``backward``
    (``name`` an autograd Function) the output and the gradients of q, k and v for the upstream
    gradient."""
    if backward:
        return ProbeCall.of(probes.probe_gradients, {"cls": name},
                            {"q": tensors["q"], "k": tensors["k"], "v": tensors["v"],
                             "arguments": [case.causal, case.block_q, case.block_k],
                             "grad_output": tensors["grad_output"]})
    return ProbeCall.of(probes.probe_parts, {"fn": name}, {"inputs": {n: tensors[n] for n in "qkv"},
                                                           "parts": ["output", "lse"], "call_kwargs": case.options,
                                                           **({"modes": list(modes)} if modes else {})})


def capped_candidates(tensors: dict[str, torch.Tensor], case: TileCase, backward: bool) -> dict:
    """What each catalogued mistake of the values (the forward's, or the backward's gradients)
    gives at a capped check's size, in float32: a capped call that fails by one of them names it,
    and keeps its points where the values' own item was charged with it (one mistake costs once).
    Seconds of work, made only when a record fails (:class:`~transformer_lm.judging.Computed`)."""
    q, k, v = (tensors[name] for name in "qkv")
    if backward:
        return {m: {f"grad.{name}": g for name, g in zip("qkv", mistakes.flawed_flash_gradients(
            q, k, v, tensors["grad_output"], case.causal, case.block_q, case.block_k, m.flaws))}
            for m in catalog.tiling_mistakes("backward")}
    with torch.no_grad():
        return {m: dict(zip(("output", "lse"), mistakes.flawed_flash_forward(q, k, v, case.causal, case.block_q,
                                                                           case.block_k, m.flaws)))
                for m in catalog.tiling_mistakes("causal" if case.causal else "forward")}


CAPPED_CAUSAL = TileCase(batch=1, heads=1, seq_q=8192, seq_k=8192, dim=2, dim_v=2, block_q=2048, block_k=64,
                         causal=True)
"""The capped checks' shape, at the longest T they draw: T*T = 67 million (256 MiB in float32, 64 MiB as booleans),
a row of a query block 64 MiB, a tile of 2048 x 64 512 KiB (a tiled pass needs under 12 MiB, the cap leaves room for
the notebook's cells). Two features per head: the scores' cost does not depend on them; the values stored halve."""
CAPPED_FULL = replace(CAPPED_CAUSAL, causal=False)
"""Each capped check is made with the mask and without: keeping the scores in only one gains nothing."""
SHORT = (3584, 4096)
"""The shorter capped length, drawn from the secret: a float32 matrix of every score (49 to 64 MiB) never
fits, from the shortest length where it cannot; below it the whole matrix (nearly) fits, as no cap can judge."""
LONG = (7168, 8192)
"""The longer capped length, drawn from the secret: a byte per score (a boolean T x T mask) is 49
to 64 MiB, and so is a row of scores of a 2048-query block, 56 to 64 MiB: neither fits."""
CAPPED_MODES = ("no_grad", "enable_grad", "no_grad_leaves")
"""The grad modes of a capped forward at the shorter length (``student_objects.GRAD_MODES``)."""
MEMORY_CAP = 48 * 2**20
"""What a capped call may hold beyond what its process held before."""


def in_modes(record: dict, modes: tuple[str, ...]) -> dict:
    """``record`` once for each mode of ``modes``, keyed ``<mode>.<name>`` as the probe keys it."""
    return {f"{mode}.{name}": value for mode in modes for name, value in record.items()} if modes else record


@dataclass(frozen=True)
class CappedCheck:
    """``object`` (``flash_forward``, or with ``backward`` the autograd Function, whose backward
    runs too) called at ``case``'s shape and a length drawn from ``lengths``, in a run whose memory
    the kernel caps at ``memory_cap`` bytes more than it held before its first cell
    (:mod:`autograder.running.harness.memory_cap`), and judged by its values; the forward once in
    each grad mode of ``modes``. The call is not traced: only the kernel and the values judge it.
    The length is the secret's, so an answer cannot tell a capped call by its size."""

    object: str
    case: TileCase
    _: KW_ONLY
    memory_cap: int
    lengths: tuple[int, int]
    backward: bool = False
    modes: tuple[str, ...] = ()
    names_mistakes: bool = True
    """Whether a failing record is compared with the catalogued mistakes' (the grader's, so that
    one mistake costs once); a visible check leaves them out, since its value checks name them."""

    def prepare(self, generator: torch.Generator) -> Prepared:
        length = int(torch.randint(self.lengths[0], self.lengths[1] + 1, (1,), generator=generator))
        case = replace(self.case, seq_q=length, seq_k=length)
        tensors = case.tensors(generator)
        expected = in_modes(exact_by_query_blocks(tensors, case.causal, self.backward), self.modes)
        candidates = Computed(lambda: {mistake: in_modes(record, self.modes) for mistake, record in capped_candidates(
            tensors, case, self.backward).items()}) if self.names_mistakes else None
        scores = case.seq_q * case.seq_k * 4 / 2**20
        what = render(TEXTS["backward_of_apply"], name=self.object) if self.backward else self.object
        in_modes_said = TEXTS["in_modes"] if self.modes else ""
        failure = render(TEXTS["capped_error"], seq_q=case.seq_q, scores=f"{scores:,.0f}", what=what + in_modes_said,
                         cap=f"{self.memory_cap / 2**20:g}")
        labels = {f"{mode}.{name}": f"{name} {TEXTS[mode]}" for mode in self.modes for name in ("output", "lse")}
        call = untraced_call(self.object, tensors, case, self.backward, self.modes)
        under_cap = render(TEXTS["under_cap"], call=case.call(what) + in_modes_said)
        judge_values = RecordJudge(expected, candidates, call=under_cap,
                                   passed=render(TEXTS["capped_passed"], seq_q=case.seq_q), labels=labels or None)
        return Prepared(call, judge_values, memory_cap=self.memory_cap, on_error=failure)


def capped_checks(name: str, *, backward: bool = False, names_mistakes: bool = True) -> tuple[CappedCheck, ...]:
    """The capped checks of ``name``, the grader's and the visible, each call one that carries a claim: at the
    shorter length (a float32 matrix of every score) with the mask and without, the forward in every grad mode;
    at the longer (a byte per score, a row of a query block) the forward without autograd, the backward masked."""
    cases = [(case, SHORT, () if backward else CAPPED_MODES) for case in (CAPPED_FULL, CAPPED_CAUSAL)]
    cases += [(case, LONG, ()) for case in ((CAPPED_CAUSAL,) if backward else (CAPPED_FULL, CAPPED_CAUSAL))]
    return tuple(CappedCheck(name, case, memory_cap=MEMORY_CAP, lengths=lengths, backward=backward, modes=modes,
                             names_mistakes=names_mistakes) for case, lengths, modes in cases)


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
