"""Judges of attention computed tile by tile (assignment 05): its values, and what the computation
holds and does, judged from a trace of what ran.

Memory and work are judged from a :class:`transformer_lm.sandboxed.tensor_trace.TensorTrace` of the
student's own call, so the judgement rests on what ran and not on what the code says:

* no tensor of ``T_q * T_k`` numbers or more (:func:`full_matrix`), at sizes where every honest
  tensor (the inputs, the output, a tile per batch and head) is far smaller;
* no max, sum or softmax over more numbers than a tile's row or a feature vector holds
  (:func:`widest_allowed`): a reduction over a whole row of keys needs that row in memory;
* under the causal mask, no more exponentials and matrix products than the key blocks that are not
  wholly in the future need (:class:`WorkJudge`): fewer never cost;
* after the forward of the autograd Function, nothing kept alive but what q, k, v, the output
  and the log-sum-exp take (:func:`kept_problem`).

The judges are data: :mod:`transformer_lm.tiled_kinds` makes them with the reference, and
:mod:`transformer_lm.stored` keeps them for the visible checks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from transformer_lm import catalog
from transformer_lm.judging import RecordJudge, Verdict

SPREAD = 60.0
"""What every other query row (or row of scores) is multiplied by in a ``spread`` case: its scores
reach hundreds while its neighbours' stay near 1, so one maximum shared by both rows underflows."""

WORK_TOLERANCE = 0.03
"""How far above the share of tiles it must visit the share of work a causal call does may be: one
key block too many per query block moves it up by 0.09 or more at the sizes the checks use. Below,
there is no bound: an answer that trims the diagonal tiles does less than the reference, rightly."""


@dataclass(frozen=True, kw_only=True)
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
    count = math.prod(largest) if largest else 0
    if count >= full_matrix(case):
        return Verdict("failed", f"{call} created a tensor of shape {largest}: {count} numbers, as many as the whole "
                                 f"(T_q, T_k) = ({case.seq_q}, {case.seq_k}) matrix of one batch and head "
                                 f"({full_matrix(case)}) or more. A tile of scores holds block_q x block_k = "
                                 f"{case.block_q * case.block_k} per batch and head.", catalog.BY_NAME[whole])
    held = int(record.get(f"{prefix}.held", 0))
    if held >= full_matrix(case):
        return Verdict("failed", f"{call} reaches a tensor of {held} numbers outside its arguments (a buffer made "
                                 f"before the call, in a global, a closure or an attribute), as many as the whole "
                                 f"(T_q, T_k) = ({case.seq_q}, {case.seq_k}) matrix of one batch and head or more: "
                                 f"filled a tile at a time, it still holds every score at once.",
                       catalog.BY_NAME[whole])
    widest = int(record.get(f"{prefix}.widest", torch.tensor(0)))
    if widest > widest_allowed(case):
        return Verdict("failed", f"{call} combined {widest} numbers into one at once (a max, a sum, a softmax or a "
                                 f"matrix product along them), more than a tile's row of block_k={case.block_k} keys: "
                                 f"a whole row of keys was in memory.",
                       catalog.BY_NAME["full_row_reduction"])
    return None


@dataclass
class SoftmaxJudge:
    """An online softmax (``call``) gives the ``expected`` softmax of each row, naming the
    ``candidates`` it matches, and reduces at most ``block`` scores at once."""

    call: str
    block: int
    expected: dict[str, torch.Tensor]
    candidates: dict[catalog.Mistake, dict[str, torch.Tensor]]

    def __call__(self, record, value, values: bool) -> Verdict:
        verdict = RecordJudge(self.expected, self.candidates, call=self.call)(record, value, values)
        if not verdict.passed:
            return verdict
        widest = int(record["trace.widest"])
        if widest > self.block:
            return Verdict("failed", f"{self.call} has the right values but took a max or a sum along {widest} "
                                     f"scores at once: an online softmax reads at most block={self.block} scores of "
                                     "a row at a time, and merges what it learns.",
                           catalog.BY_NAME["full_row_reduction"])
        return Verdict("passed", f"Correct: the softmax of every row, {self.block} scores at a time.")


@dataclass
class MemoryJudge:
    """A tiled forward (``call``) on ``case`` held no ``T_q * T_k`` tensor and reduced no whole row."""

    call: str
    case: TileCase

    def __call__(self, record, value, values: bool) -> Verdict:
        case = self.case
        return memory_problem(record, "trace", case, self.call, "full_score_matrix") or Verdict(
            "passed", f"Correct: no tensor near the size of the ({case.seq_q}, {case.seq_k}) score matrix and no "
                      f"reduction wider than a tile (T={case.seq_q}, tiles of {case.block_q} x {case.block_k}).")


@dataclass
class WorkJudge:
    """Under the causal mask, a call (``call``) does at most the ``share`` of the work it does without
    the mask (within :data:`WORK_TOLERANCE`), the share of the tiles it must visit: counted as the
    numbers it exponentiates and as the products its matrix products sum, in-place or not, so that
    a call cannot hide the work of the tiles it should skip in one of them. A share that is one of
    the ``candidates`` (each mistake's) is named."""

    call: str
    case: TileCase
    share: float
    candidates: dict[catalog.Mistake, float]

    def __call__(self, record, value, values: bool) -> Verdict:
        full, causal = int(record["full.exponentials"]), int(record["causal.exponentials"])
        full_products, causal_products = (int(record.get(f"{name}.multiplies", 0)) for name in ("full", "causal"))
        largest = tuple(record["causal.largest"].tolist())
        if largest and math.prod(largest) >= full_matrix(self.case):   # no tiles to skip: one mistake, not two
            return Verdict("failed", f"{self.call} builds a tensor of shape {largest} under the causal mask, the whole "
                                     "score matrix: it has no tiles to skip until it computes one tile at a time.",
                           catalog.BY_NAME["full_score_matrix"])
        if full == 0:
            return Verdict("failed", f"{self.call} computed no exponentials (torch.exp) without the mask, so the work "
                                     "of its tiles cannot be counted: compute each tile's weights with torch.exp.")
        got = causal / full
        worst = max(got, causal_products / full_products if full_products else 0.0)
        if worst <= self.share + WORK_TOLERANCE:
            return Verdict("passed", f"Correct: with causal=True it does {worst:.0%} of the work it does without the "
                                     f"mask, at most the {self.share:.0%} of the tiles not wholly in the future.")
        mistake = min(self.candidates, key=lambda m: abs(self.candidates[m] - worst))
        named = mistake if abs(self.candidates[mistake] - worst) <= WORK_TOLERANCE else None
        return Verdict("failed", f"{self.call} does {worst:.0%} of its work with causal=True that it does without: "
                                 f"{causal} exponentials against {full}, {causal_products} products of matrix products "
                                 f"against {full_products}. Skipping every key block that starts at or after the end "
                                 f"of its query block leaves {self.share:.0%} of the tiles to compute.", named)


@dataclass
class FunctionJudge:
    """A tiled autograd Function (``call``) returns an output of ``expected_shape``. Then, with
    ``gradients``, it gives the ``expected`` gradients (naming the ``candidates`` it matches);
    without, its forward keeps alive at most ``kept_allowed`` bytes and its backward works tile by
    tile on ``case``."""

    call: str
    case: TileCase
    expected_shape: tuple[int, ...]
    gradients: bool
    expected: dict[str, torch.Tensor]
    candidates: dict[catalog.Mistake, dict[str, torch.Tensor]]
    kept_allowed: int

    def __call__(self, record, value, values: bool) -> Verdict:
        got = tuple(record["output"].shape)
        if got != tuple(self.expected_shape):
            return Verdict("failed", f"{self.call} returned shape {got}; expected {tuple(self.expected_shape)}.")
        if self.gradients:
            return RecordJudge(self.expected, self.candidates, call=self.call,
                               passed="Correct: the gradients of q, k and v match exact attention's.")(
                record, value, values)
        return kept_problem(record, self.case, self.call, self.kept_allowed) or \
            memory_problem(record, "backward", self.case, f"the backward of {self.call}", "backward_full_matrix") or \
            Verdict("passed", "Correct: the forward keeps only q, k, v, the output and the log-sum-exp, and the "
                              "backward works tile by tile.")


def kept_problem(record: dict, case: TileCase, call: str, allowed: int) -> Verdict | None:
    """The failure of a forward that saved or kept alive more than q, k, v, the output and the
    log-sum-exp take (``allowed`` bytes); None when it did not."""
    saved = [tuple(record[f"forward.saved.{i}"].tolist()) for i in range(len(record))
             if f"forward.saved.{i}" in record]
    on_ctx = [tuple(t.tolist()) for key, t in record.items() if key.startswith("ctx.")]
    kept = int(record["forward.live"])
    if kept <= allowed and all(math.prod(shape) < full_matrix(case) for shape in saved + on_ctx):
        return None
    names = sorted({key.split(".")[1] for key in record if key.startswith("ctx.")})
    where = f", and left {len(on_ctx)} tensor(s) on ctx ({', '.join('ctx.' + n for n in names)})" if names else ""
    shapes = ", ".join(str(s) for s in saved) or "nothing"
    return Verdict("failed", f"{call}: after the forward, {kept} bytes of tensors it made were still alive, more than q, "
                             f"k, v, the output and the log-sum-exp take ({allowed}). It saved {shapes} for the "
                             f"backward{where}.", catalog.BY_NAME["saves_more_than_needed"])




@dataclass
class PrefixJudge:
    """Judges the rows before ``start`` of a record made with the keys from ``start`` on (one
    block of them) poisoned with NaN: those rows must hold no NaN (a call that computed the
    poisoned block for them, and masked it, has NaN there) and match ``expected``, exact attention
    on the keys before ``start``, naming any of the ``candidates``' mistakes they match."""

    call: str
    start: int
    expected: dict[str, torch.Tensor]
    candidates: dict[catalog.Mistake, dict[str, torch.Tensor]] | None = None

    def rows(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        return tensor[..., :self.start] if name == "lse" else tensor[..., :self.start, :]

    def __call__(self, record: dict[str, torch.Tensor], value, values: bool) -> Verdict:
        judged = {name: self.rows(name, record[name]) for name in self.expected
                  if name in record and record[name].dim() >= (1 if name == "lse" else 2)}
        verdict = RecordJudge(self.expected, self.candidates, call=self.call)({**record, **judged}, value, values)
        if verdict.passed or verdict.mistake is not None:
            return verdict
        if any(bool(torch.isnan(tensor).any()) for tensor in judged.values()):
            future = next(m for m in catalog.tiling_mistakes("work") if m.name == "future_blocks_computed")
            return Verdict("failed", f"{self.call}: rows 0 to {self.start - 1} see only keys before {self.start}, "
                                     "yet came out NaN. The call computed the tiles of those NaN keys for queries "
                                     "that the causal mask hides them from (a weight of 0 times NaN is NaN), "
                                     "instead of skipping the key blocks wholly in a query block's future.", future)
        return verdict


JUDGES = (SoftmaxJudge, MemoryJudge, WorkJudge, FunctionJudge, PrefixJudge)
