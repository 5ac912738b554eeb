"""Kinds of check for attention computed tile by tile under the kernel's memory cap (assignment 05):
the answer called at lengths where the whole matrix of scores, or a whole row of a query block,
does not fit in the cap, in every mode the rule claims, and judged by its values alone (no trace
slows the call; the kernel and the values judge it).

Why apart from :mod:`transformer_lm.instructor.tiled_kinds`: these checks share nothing with the
traced ones but the exact values, and they have sizes and modes of their own.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, replace

import torch

from transformer_lm import catalog
from transformer_lm.instructor import mistakes, reference
from transformer_lm.instructor.kinds import backward_of
from transformer_lm.judging import Computed, RecordJudge
from transformer_lm.prepared import Prepared, ProbeCall
from transformer_lm.sandboxed import probes
from transformer_lm.tiled_judges import TEXTS, TileCase
from transformer_lm.verdict_texts import render

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
