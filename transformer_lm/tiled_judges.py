"""Judges of attention computed tile by tile (assignment 05): its values, and what the computation
holds and does, judged from a trace of what ran.

Memory and work are judged from a :class:`transformer_lm.sandboxed.tensor_trace.TensorTrace` of the
student's own call, so the judgement rests on what ran and not on what the code says:

* no tensor of ``T_q * T_k`` numbers or more (:func:`full_matrix`), at sizes where every honest
  tensor (the inputs, the output, a tile per batch and head) is far smaller;
* no max, sum or softmax over more numbers than a tile's row or a feature vector holds
  (:func:`widest_allowed`): a reduction over a whole row of keys needs that row in memory;
* handed a row of scores as a stream of blocks (the online softmax's statistics), no tensor as
  large as the rows, no blocks kept alive together as large, and no reduction longer than a block
  or than the count of blocks (:class:`StreamJudge`);
* under the causal mask, no more exponentials and matrix products than the key blocks that are not
  wholly in the future need (:class:`WorkJudge`): fewer never cost;
* after the forward of the autograd Function, nothing kept alive but what q, k, v, the output
  and the log-sum-exp take (:func:`kept_problem`).

The judges are data: :mod:`transformer_lm.instructor.tiled_kinds` makes them with the reference, and
:mod:`transformer_lm.stored` keeps them for the visible checks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from transformer_lm import catalog
from transformer_lm.judging import RecordJudge, Verdict
from transformer_lm.verdict_texts import render

SPREAD = 60.0
"""What every other query row (or row of scores) is multiplied by in a ``spread`` case: its scores
reach hundreds while its neighbours' stay near 1, so one maximum shared by both rows underflows."""

WORK_TOLERANCE = 0.03
"""How far above the share of tiles it must visit the share of work a causal call does may be: one
key block too many per query block moves it up by 0.09 or more at the sizes the checks use. Below,
there is no bound: an answer that trims the diagonal tiles does less than the reference, rightly."""

TEXTS = {
    "call": "{name:call}(q of shape ({batch:number}, {heads:number}, T_q={seq_q:number}, {dim:number}), k and v of "
            "{seq_k:number} keys, causal=",
    "causal": "True",
    "not_causal": "False",
    "call_blocks": ", block_q={block_q:number}, block_k={block_k:number})",
    "whole_tensor": "{call:call} created a tensor of shape {largest:shape}: {count:number} numbers, as many as the "
                    "whole (T_q, T_k) = {matrix:shape} matrix of one batch and head ({full:number}) or more. A tile "
                    "of scores holds block_q x block_k = {tile:number} per batch and head.",
    "whole_held": "{call:call} reaches a tensor of {held:number} numbers outside its arguments (a buffer made before "
                  "the call, in a global, a closure or an attribute), as many as the whole (T_q, T_k) = "
                  "{matrix:shape} matrix of one batch and head or more: filled a tile at a time, it still holds "
                  "every score at once.",
    "whole_row": "{call:call} combined {widest:number} numbers into one at once (a max, a sum, a softmax or a matrix "
                 "product along them), more than a tile's row of block_k={block_k:number} keys: a whole row of keys "
                 "was in memory.",
    "softmax_row": "{call:call} took a max or a sum along {widest:number} scores at once: an online softmax reads "
                   "one block of at most {block:number} scores of a row at a time, and merges what it learns.",
    "stream_tensor": "{call:call} made a tensor of shape {largest:shape}: as many numbers as all the blocks of its rows "
                     "({count:number}) or more, so it held every block at once (torch.cat or torch.stack of the "
                     "blocks, say) instead of folding each into running statistics and letting it go.",
    "stream_held": "{call:call} held {peak:number} bytes of tensors at once, as much as all the blocks of its rows "
                   "({count:number} bytes in float32), so it held every block at once (in a list, say) instead of "
                   "folding each into running statistics and letting it go.",
    "stream_call": "{name:call}(blocks of {rows:number} rows of {length:number} scores, {width:number} at a time)",
    "stream_passed": "Correct: one block at a time.",
    "softmax_passed": "Correct: the softmax of every row.",
    "stream_stats_passed": "Correct: the maximum and the total of every row, from its blocks.",
    "stream_error": "{call:call} may hold {cap:number} MiB more than the notebook held before it ran, a cap the kernel "
                    "enforces, and its rows hold {size:number} MiB of scores, handed over {block:number} MiB at a "
                    "time: a pass that folds each block into running statistics and lets it go fits with room. The "
                    "call raised an error under the cap, as a call that keeps the blocks (in a list, through "
                    "torch.cat or torch.stack) does (the error says which line).",
    "memory_passed": "Correct: no tensor near the size of the {matrix:shape} score matrix and no reduction wider than "
                     "a tile (T={seq_q:number}, tiles of {block_q:number} x {block_k:number}).",
    "work_whole": "{call:call} builds a tensor of shape {largest:shape} under the causal mask, the whole score "
                  "matrix: it has no tiles to skip until it computes one tile at a time.",
    "work_uncounted": "{call:call} computed no exponentials (torch.exp) without the mask, so the work of its tiles "
                      "cannot be counted: compute each tile's weights with torch.exp.",
    "work_passed": "Correct: with causal=True it does {worst:number} of the work it does without the mask, at most "
                   "the {share:number} of the tiles not wholly in the future.",
    "work_more": "{call:call} does {worst:number} of its work with causal=True that it does without: {causal:number} "
                 "exponentials against {full:number}, {causal_products:number} products of matrix products against "
                 "{full_products:number}. Skipping every key block that starts at or after the end of its query "
                 "block leaves {share:number} of the tiles to compute.",
    "function_shape": "{call:call} returned shape {got:shape}; expected {expected:shape}.",
    "gradients_passed": "Correct: the gradients of q, k and v match exact attention's.",
    "backward_of": "the backward of {call:call}",
    "function_passed": "Correct: the forward keeps only q, k, v, the output and the log-sum-exp, and the backward "
                       "works tile by tile.",
    "kept": "{call:call}: after the forward, {kept:number} bytes of tensors it made were still alive, more than q, "
            "k, v, the output and the log-sum-exp take ({allowed:number}). It saved ",
    "saved": "{shape:shape}",
    "nothing": "nothing",
    "for_backward": " for the backward",
    "on_ctx": ", and left {count:number} tensor(s) on ctx, of shape ",
    "refuses_nan": "the call refuses non-finite inputs (a ValueError), which is right, so this check, which fills "
                   "a key block with NaN, cannot see which tiles it computes; the grader measures that by the CPU "
                   "time of its calls.",
    "prefix_nan": "{call:call}: rows 0 to {last:number} see only keys before {start:number}, yet came out NaN. The "
                  "call computed the tiles of those NaN keys for queries that the causal mask hides them from (a "
                  "weight of 0 times NaN is NaN), instead of skipping the key blocks wholly in a query block's "
                  "future.",
    "forward_passed": "Correct: the output and the log-sum-exp match exact attention.",
    "backward_of_apply": "the backward of {name:call}.apply",
    "capped_error": "At T={seq_q:number} (one head's score matrix: {scores:number} MiB in float32) {what:call} may "
                    "hold {cap:number} MiB more than the notebook held before it ran, a cap the kernel enforces; a "
                    "tiled pass needs a fraction of that. The call raised an error under the cap, as a call that "
                    "holds the whole score matrix, or a whole row of scores for a block of queries, does (the error "
                    "says which line).",
    "under_cap": "{call:call}, under the memory cap",
    "in_modes": " (called three times: without autograd, with it on, and without it on inputs that require grad; "
                "autograd records nothing in any of them)",
    "no_grad": "without autograd",
    "enable_grad": "with autograd on",
    "no_grad_leaves": "without autograd, on inputs that require grad",
    "capped_passed": "Correct: at T={seq_q:number} the call fits under the memory cap, with the right values.",
}
"""What the judges and checks of attention computed tile by tile say (:mod:`transformer_lm.verdict_texts`),
:mod:`transformer_lm.instructor.tiled_kinds`' included."""


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
        """The call of ``name`` on this case, as the checks' texts give it."""
        return (render(TEXTS["call"], name=name, batch=self.batch, heads=self.heads, seq_q=self.seq_q, dim=self.dim,
                       seq_k=self.seq_k) + TEXTS["causal" if self.causal else "not_causal"] +
                render(TEXTS["call_blocks"], block_q=self.block_q, block_k=self.block_k))


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
        return Verdict("failed", render(TEXTS["whole_tensor"], call=call, largest=largest, count=count,
                                        matrix=(case.seq_q, case.seq_k), full=full_matrix(case),
                                        tile=case.block_q * case.block_k), catalog.BY_NAME[whole])
    held = int(record.get(f"{prefix}.held", 0))
    if held >= full_matrix(case):
        return Verdict("failed", render(TEXTS["whole_held"], call=call, held=held, matrix=(case.seq_q, case.seq_k)),
                       catalog.BY_NAME[whole])
    widest = int(record.get(f"{prefix}.widest", torch.tensor(0)))
    if widest > widest_allowed(case):
        return Verdict("failed", render(TEXTS["whole_row"], call=call, widest=widest, block_k=case.block_k),
                       catalog.BY_NAME["full_row_reduction"])
    return None


@dataclass
class StreamJudge:
    """What ``softmax_stats`` (``call``) did while it read ``rows`` rows of ``length`` scores handed
    over ``width`` at a time, from its trace (the blocks it was handed count as made during the
    call): a tensor with as many numbers as the rows, tensors alive at once as large as the rows in
    float32, or a max or sum along more numbers than a block holds and than there are blocks (one
    maximum per block, stacked and reduced at once, is an honest merge) is a whole-row pass. Only
    explains: the memory cap judges (``autograder.reading.spec.Explains``)."""

    call: str
    rows: int
    length: int
    width: int

    def __call__(self, record, value, values: bool) -> Verdict:
        count, whole_row = self.rows * self.length, catalog.BY_NAME["full_row_reduction"]
        largest = tuple(record["trace.largest"].tolist())
        if largest and math.prod(largest) >= count:
            return Verdict("failed", render(TEXTS["stream_tensor"], call=self.call, largest=largest, count=count),
                           whole_row)
        if int(record["trace.peak"]) >= 4 * count:
            return Verdict("failed", render(TEXTS["stream_held"], call=self.call, peak=int(record["trace.peak"]),
                                            count=4 * count), whole_row)
        widest = int(record["trace.widest"])
        if widest > max(self.width, -(-self.length // self.width)):
            return Verdict("failed", render(TEXTS["softmax_row"], call=self.call, widest=widest, block=self.width),
                           whole_row)
        return Verdict("passed", TEXTS["stream_passed"])


@dataclass
class MemoryJudge:
    """A tiled forward (``call``) on ``case`` held no ``T_q * T_k`` tensor and reduced no whole row."""

    call: str
    case: TileCase

    def __call__(self, record, value, values: bool) -> Verdict:
        case = self.case
        return memory_problem(record, "trace", case, self.call, "full_score_matrix") or Verdict(
            "passed", render(TEXTS["memory_passed"], matrix=(case.seq_q, case.seq_k), seq_q=case.seq_q,
                             block_q=case.block_q, block_k=case.block_k))


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
            return Verdict("failed", render(TEXTS["work_whole"], call=self.call, largest=largest),
                           catalog.BY_NAME["full_score_matrix"])
        if full == 0:
            return Verdict("failed", render(TEXTS["work_uncounted"], call=self.call))
        got = causal / full
        worst = max(got, causal_products / full_products if full_products else 0.0)
        if worst <= self.share + WORK_TOLERANCE:
            return Verdict("passed", render(TEXTS["work_passed"], worst=f"{worst:.0%}", share=f"{self.share:.0%}"))
        mistake = min(self.candidates, key=lambda m: abs(self.candidates[m] - worst))
        named = mistake if abs(self.candidates[mistake] - worst) <= WORK_TOLERANCE else None
        return Verdict("failed", render(TEXTS["work_more"], call=self.call, worst=f"{worst:.0%}", causal=causal,
                                        full=full, causal_products=causal_products, full_products=full_products,
                                        share=f"{self.share:.0%}"), named)


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
            return Verdict("failed", render(TEXTS["function_shape"], call=self.call, got=got,
                                            expected=tuple(self.expected_shape)))
        if self.gradients:
            return RecordJudge(self.expected, self.candidates, call=self.call,
                               passed=TEXTS["gradients_passed"])(record, value, values)
        backward = render(TEXTS["backward_of"], call=self.call)
        return kept_problem(record, self.case, self.call, self.kept_allowed) or \
            memory_problem(record, "backward", self.case, backward, "backward_full_matrix") or \
            Verdict("passed", TEXTS["function_passed"])


def kept_problem(record: dict, case: TileCase, call: str, allowed: int) -> Verdict | None:
    """The failure of a forward that saved or kept alive more than q, k, v, the output and the
    log-sum-exp take (``allowed`` bytes); None when it did not. What it left on ctx is told by its
    shapes: the names of ctx's attributes are the run's to choose (a run could spell a hidden input
    in them)."""
    saved = [tuple(record[f"forward.saved.{i}"].tolist()) for i in range(len(record))
             if f"forward.saved.{i}" in record]
    on_ctx = [tuple(t.tolist()) for key, t in record.items() if key.startswith("ctx.")]
    kept = int(record["forward.live"])
    if kept <= allowed and all(math.prod(shape) < full_matrix(case) for shape in saved + on_ctx):
        return None
    where = render(TEXTS["on_ctx"], count=len(on_ctx)) + ", ".join(
        str(tuple(int(d) for d in shape)) for shape in on_ctx[:8]) if on_ctx else ""
    shapes = ", ".join(render(TEXTS["saved"], shape=s) for s in saved) or TEXTS["nothing"]
    return Verdict("failed", render(TEXTS["kept"], call=call, kept=kept, allowed=allowed) + shapes +
                   TEXTS["for_backward"] + where + ".", catalog.BY_NAME["saves_more_than_needed"])




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
            return Verdict("failed", render(TEXTS["prefix_nan"], call=self.call, last=self.start - 1, start=self.start),
                           future)
        return verdict


JUDGES = (StreamJudge, MemoryJudge, WorkJudge, FunctionJudge, PrefixJudge)
