"""Kinds of check for attention computed tile by tile (assignment 05): its values, and what the
computation holds and does, judged from a trace of what ran.

Values are compared with exact attention computed in float64, at the course's float32 tolerance.
Memory and work are judged from a :class:`transformer_lm.sandboxed.probes.TensorTrace` of the
student's own call, made inside the sandbox, so the judgement rests on what ran and not on what
the code says:

* no tensor of ``T_q * T_k`` numbers or more (:data:`full_matrix`), at sizes where every honest
  tensor (the inputs, the output, a tile per batch and head) is far smaller;
* no max, sum or softmax over more numbers than a tile's row or a feature vector holds
  (:func:`widest_allowed`): a reduction over a whole row of keys needs that row in memory;
* under the causal mask, as many exponentials as the key blocks that are not wholly in the future
  need (:class:`CausalWorkCheck`);
* after the forward of the autograd Function, nothing kept alive but what q, k, v, the output
  and the log-sum-exp take (:class:`FlashFunctionCheck`).

Each kind works as those of :mod:`transformer_lm.kinds` do: the visible checks prepare it from a
fixed seed, the grader from the course's secret.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from transformer_lm import catalog, mistakes
from transformer_lm import reference
from transformer_lm.judging import Verdict, judge
from transformer_lm.prepared import Prepared, ProbeCall
from transformer_lm.sandboxed import probes

SPREAD = 60.0
"""What every other query row (or row of scores) is multiplied by in a ``spread`` case: its scores
reach hundreds while its neighbours' stay near 1, so one maximum shared by both rows underflows."""

WORK_TOLERANCE = 0.03
"""How far the share of exponentials a causal call computes may stray from the share of tiles
it must visit: one key block too many, or too few, per query block moves it by 0.09 or more at the
sizes the checks use."""


@dataclass(frozen=True)
class TileCase:
    """Sizes of one call of a tiled attention: q ``(batch, heads, seq_q, dim)``, k ``(batch, heads,
    seq_k, dim)``, v ``(batch, heads, seq_k, dim_v)``, tiles of ``block_q`` queries and ``block_k``
    keys. Under ``causal`` the queries and keys are aligned at the start (``seq_q == seq_k``)."""

    batch: int
    heads: int
    seq_q: int
    seq_k: int
    dim: int
    dim_v: int
    block_q: int
    block_k: int
    causal: bool = False
    spread: bool = False

    def tensors(self, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """q, k, v and an upstream gradient for the output, drawn from ``generator``."""
        size = (self.batch, self.heads)
        q = torch.randn(*size, self.seq_q, self.dim, generator=generator)
        if self.spread:
            q[..., 1::2, :] *= SPREAD
        return {"q": q, "k": torch.randn(*size, self.seq_k, self.dim, generator=generator),
                "v": torch.randn(*size, self.seq_k, self.dim_v, generator=generator),
                "grad_output": torch.randn(*size, self.seq_q, self.dim_v, generator=generator)}

    @property
    def options(self) -> dict:
        return {"causal": self.causal, "block_q": self.block_q, "block_k": self.block_k}

    def call(self, name: str) -> str:
        shape = f"({self.batch}, {self.heads}, T_q={self.seq_q}, {self.dim})"
        return (f"{name}(q of shape {shape}, k and v of {self.seq_k} keys, causal={self.causal}, "
                f"block_q={self.block_q}, block_k={self.block_k})")


def exact_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> dict[str, torch.Tensor]:
    """The output and each query's log-sum-exp of plain attention, computed in float64 and
    returned in q's dtype: what every tiled version must give."""
    mask = reference.causal_mask(q.shape[-2], k.shape[-2]) if causal else None
    scores = reference.apply_mask(reference.attention_scores(q.double(), k.double()), mask)
    return {"output": (reference.masked_softmax(scores) @ v.double()).to(q.dtype),
            "lse": torch.logsumexp(scores, dim=-1).to(q.dtype)}


def full_matrix(case: TileCase) -> int:
    """The size of the whole score matrix of one batch and head: a tensor this large (or larger)
    means the attention was not computed tile by tile."""
    return case.seq_q * case.seq_k


def widest_allowed(case: TileCase) -> int:
    """The most numbers one reduction of a tiled attention combines: a tile's row or column, or a
    feature vector."""
    return max(case.block_q, case.block_k, case.dim, case.dim_v)


def memory_problem(record: dict, prefix: str, case: TileCase, call: str, whole: str) -> Verdict | None:
    """The failure of a traced call that held ``T_q * T_k`` numbers in one tensor (naming
    ``whole``, the mistake of building it) or reduced a whole row at once; None when neither."""
    largest = tuple(record[f"{prefix}.largest"].tolist()) if f"{prefix}.largest" in record else ()
    count = probes._numel(largest) if largest else 0
    if count >= full_matrix(case):
        return Verdict("failed", f"{call} created a tensor of shape {largest}: {count} numbers, as many as the whole "
                                 f"(T_q, T_k) = ({case.seq_q}, {case.seq_k}) matrix of one batch and head "
                                 f"({full_matrix(case)}) or more. A tile of scores holds block_q x block_k = "
                                 f"{case.block_q * case.block_k} per batch and head.", catalog.BY_NAME[whole])
    widest = int(record.get(f"{prefix}.widest", torch.tensor(0)))
    if widest > widest_allowed(case):
        return Verdict("failed", f"{call} took a max, a sum or a softmax along {widest} numbers at once, more than a "
                                 f"tile's row of block_k={case.block_k} keys: a whole row of keys was in memory.",
                       catalog.BY_NAME["full_row_reduction"])
    return None


def _judged(call: str, record: dict, expected: dict, candidates: dict, values: bool) -> Verdict:
    verdict = judge(record, expected, candidates, values=values)
    if not verdict.passed:
        verdict.message = f"{call}: {verdict.message}"
    return verdict


@dataclass(frozen=True)
class MergeStatsCheck:
    """``object(max_a, sum_a, max_b, sum_b) -> (maximum, total)`` merges the softmax statistics
    of two parts of each row (the first part empty in row 0: maximum -inf, sum 0) as
    :func:`reference.merge_softmax_stats` does."""

    object: str
    rows: int = 6

    def prepare(self, generator: torch.Generator) -> Prepared:
        a = reference.SoftmaxStats(torch.randn(self.rows, generator=generator) * 3,
                                   torch.rand(self.rows, generator=generator) * 4 + 1)
        b = reference.SoftmaxStats(torch.randn(self.rows, generator=generator) * 3,
                                   torch.rand(self.rows, generator=generator) * 4 + 1)
        a.maximum[0], a.total[0] = float("-inf"), 0.0   # nothing seen yet
        inputs = {"max_a": a.maximum, "sum_a": a.total, "max_b": b.maximum, "sum_b": b.total}
        expected = dict(zip(("maximum", "total"), reference.merge_softmax_stats(a, b)))
        candidates = {m: dict(zip(("maximum", "total"), mistakes.flawed_merge_stats(a, b, m.flaws)))
                      for m in catalog.tiling_mistakes("merge")}
        call = f"{self.object}(max_a, sum_a, max_b, sum_b) on {self.rows} rows"
        return Prepared(ProbeCall.of(probes.probe_traced, {"fn": self.object},
                                     {"inputs": inputs, "parts": ["maximum", "total"]}),
                        lambda record, value, values: _judged(call, record, expected, candidates, values))


@dataclass(frozen=True)
class OnlineSoftmaxCheck:
    """``object(scores, block)`` is the softmax of each row of ``scores`` ``(rows, n)``, and no
    reduction in it combines more than ``block`` scores."""

    object: str
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

        def judge_softmax(record, value, values) -> Verdict:
            verdict = _judged(call, record, expected, candidates, values)
            if not verdict.passed:
                return verdict
            widest = int(record["trace.widest"])
            if widest > self.block:
                return Verdict("failed", f"{call} has the right values but took a max or a sum along {widest} "
                                         f"scores at once: an online softmax reads at most block={self.block} scores of a "
                                         "row at a time, and merges what it learns.",
                               catalog.BY_NAME["full_row_reduction"])
            return Verdict("passed", f"Correct: the softmax of every row, {self.block} scores at a time.")

        return Prepared(ProbeCall.of(probes.probe_traced, {"fn": self.object},
                                     {"inputs": {"scores": scores}, "parts": ["output"],
                                      "call_kwargs": {"block": self.block}}), judge_softmax)


@dataclass(frozen=True)
class FlashForwardCheck:
    """``object(q, k, v, causal=..., block_q=..., block_k=...) -> (output, lse)`` for ``case``.
    ``judges="values"`` compares both with exact attention, naming the catalogued mistakes;
    ``judges="memory"`` judges only what the call held (:func:`memory_problem`)."""

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

        def judge_forward(record, value, values) -> Verdict:
            if self.judges == "memory":
                return memory_problem(record, "trace", case, call, "full_score_matrix") or Verdict(
                    "passed", f"Correct: no tensor near the size of the ({case.seq_q}, {case.seq_k}) score matrix and "
                              f"no reduction wider than a tile (T={case.seq_q}, tiles of {case.block_q} x "
                              f"{case.block_k}).")
            verdict = _judged(call, record, expected, candidates, values)
            if verdict.passed:
                verdict.message = "Correct: the output and the log-sum-exp match exact attention."
            return verdict

        arguments = {"inputs": {"q": q, "k": k, "v": v}, "parts": ["output", "lse"], "call_kwargs": case.options}
        return Prepared(ProbeCall.of(probes.probe_traced, {"fn": self.object}, arguments), judge_forward)


def tile_share(case: TileCase, flaws: catalog.TilingFlaws = catalog.TilingFlaws()) -> float:
    """The share of the score tiles' numbers that a causal call computes when it visits the key
    blocks that :func:`transformer_lm.mistakes.flawed_key_blocks` gives (the reference's without
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
    in a query block's future, and no others: it exponentiates that share of the numbers it
    exponentiates without the mask (:func:`tile_share`, within :data:`WORK_TOLERANCE`). With
    ``backward``, ``object`` is the autograd Function and its backward pass is counted: it
    recomputes the weights of the same tiles. A call that builds the whole score matrix is named for that, the mistake the memory check charges: with
    its answer charged there, one mistake costs points once."""

    object: str
    case: TileCase
    backward: bool = False

    def prepare(self, generator: torch.Generator) -> Prepared:
        case, tensors = self.case, self.case.tensors(generator)
        share = tile_share(case)
        candidates = {mistake: tile_share(case, mistake.flaws) for mistake in catalog.tiling_mistakes("work")}
        options = {"block_q": case.block_q, "block_k": case.block_k}
        call = f"{self.object}(q, k, v of T={case.seq_q}, block_q={case.block_q}, block_k={case.block_k})"
        if self.backward:
            call = f"the backward of {self.object}.apply(q, k, v, causal, {case.block_q}, {case.block_k}), T={case.seq_q},"

        def judge_work(record, value, values) -> Verdict:
            full, causal = int(record["full.exponentials"]), int(record["causal.exponentials"])
            largest = tuple(record["causal.largest"].tolist())
            if largest and probes._numel(largest) >= full_matrix(case):   # no tiles to skip: one mistake, not two
                return Verdict("failed", f"{call} builds a tensor of shape {largest} under the causal mask, the whole "
                                         "score matrix: it has no tiles to skip until it computes one tile at a time.",
                               catalog.BY_NAME["full_score_matrix"])
            if full == 0:
                return Verdict("failed", f"{call} computed no exponentials (torch.exp) without the mask, so the work "
                                         "of its tiles cannot be counted: compute each tile's weights with torch.exp.")
            got = causal / full
            if abs(got - share) <= WORK_TOLERANCE:
                return Verdict("passed", f"Correct: with causal=True it computes {got:.0%} of the scores it computes "
                                         f"without the mask: the key blocks wholly in the future are skipped.")
            mistake = min(candidates, key=lambda m: abs(candidates[m] - got))
            named = mistake if abs(candidates[mistake] - got) <= WORK_TOLERANCE else None
            return Verdict("failed", f"{call} exponentiates {causal} numbers with causal=True and {full} without: "
                                     f"{got:.0%}. Skipping every key block that starts at or after the end of its query "
                                     f"block leaves {share:.0%} of the tiles to compute.", named)

        return Prepared(ProbeCall.of(probes.probe_causal_work, {"fn": self.object},
                                     {"q": tensors["q"], "k": tensors["k"], "v": tensors["v"],
                                      "call_kwargs": options, "backward": self.backward}), judge_work)


def exact_gradients(tensors: dict[str, torch.Tensor], causal: bool) -> dict[str, torch.Tensor]:
    """The gradients of q, k and v of exact attention (float64) for the upstream gradient."""
    leaves = {name: tensors[name].double().requires_grad_(True) for name in "qkv"}
    mask = reference.causal_mask(leaves["q"].shape[-2], leaves["k"].shape[-2]) if causal else None
    scores = reference.apply_mask(reference.attention_scores(leaves["q"], leaves["k"]), mask)
    (reference.masked_softmax(scores) @ leaves["v"]).backward(tensors["grad_output"].double())
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

        def judge_function(record, value, values) -> Verdict:
            got = tuple(record["output"].shape)
            if got != expected_shape:
                return Verdict("failed", f"{call} returned shape {got}; expected {expected_shape}.")
            if self.judges == "gradients":
                verdict = _judged(call, record, expected, candidates, values)
                if verdict.passed:
                    verdict.message = "Correct: the gradients of q, k and v match exact attention's."
                return verdict
            return kept_problem(record, case, call, kept_allowed) or \
                memory_problem(record, "backward", case, f"the backward of {call}", "backward_full_matrix") or \
                Verdict("passed", "Correct: the forward keeps only q, k, v, the output and the log-sum-exp, and the "
                                  "backward works tile by tile.")

        arguments = {"q": tensors["q"], "k": tensors["k"], "v": tensors["v"],
                     "arguments": [case.causal, case.block_q, case.block_k], "grad_output": tensors["grad_output"]}
        return Prepared(ProbeCall.of(probes.probe_autograd_function, {"cls": self.object}, arguments), judge_function)


def kept_problem(record: dict, case: TileCase, call: str, allowed: int) -> Verdict | None:
    """The failure of a forward that saved or kept alive more than q, k, v, the output and the
    log-sum-exp take (``allowed`` bytes); None when it did not."""
    saved = [tuple(record[f"forward.saved.{i}"].tolist()) for i in range(len(record))
             if f"forward.saved.{i}" in record]
    on_ctx = [tuple(t.tolist()) for key, t in record.items() if key.startswith("ctx.")]
    kept = int(record["forward.live"])
    if kept <= allowed and all(probes._numel(shape) < full_matrix(case) for shape in saved + on_ctx):
        return None
    names = sorted({key.split(".")[1] for key in record if key.startswith("ctx.")})
    where = f", and left {len(on_ctx)} tensor(s) on ctx ({', '.join('ctx.' + n for n in names)})" if names else ""
    shapes = ", ".join(str(s) for s in saved) or "nothing"
    return Verdict("failed", f"{call}: after the forward, {kept} bytes of tensors it made were still alive, more than q, "
                             f"k, v, the output and the log-sum-exp take ({allowed}). It saved {shapes} for the "
                             f"backward{where}.", catalog.BY_NAME["saves_more_than_needed"])
