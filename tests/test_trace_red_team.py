"""Assignment 05's trace against answers written to slip past it, and correct answers written
another way: each evasion is refused by the visible test cell of what it cheats on (the same
trace, measures and judges the grader uses in its sandbox, inside ``forbidding`` as the notebook
runs it), for what it did; each correct variant passes every check.

The evasions keep the whole score matrix in a buffer that no operator of the call created (a
global, a closure's, one grown with ``resize_``), written with ``out=`` and worked on in place;
keep it outside torch's tensors (a NumPy array, Python bytes, a memory map: the test cell's call
under the grader's memory cap refuses them), in another process (which the capped call may not
start), in a tensor made only at a large T, or while the dispatcher's Python modes are off; put the
online softmax's stream of blocks back together into whole rows and reduce them with an operator
that is not called a reduction (a matrix product with ones, ``kthvalue``, ``topk``, ``aminmax``,
``nanmean``: the memory cap refuses them, and the trace names them); do the work of the tiles a causal mask lets
them skip through operators that were not counted (``sigmoid``, in-place ``exp_``, matrix products
whose exponentials are skipped); or call a private kernel of the forbidden softmax or attention by
a name built at run time. The correct variants exponentiate in place, work in float64, multiply
tiles with ``einsum``, trim the diagonal tiles (less work than the reference), accumulate in place,
run the loops the other way round, or use smaller tiles than asked.
"""

from __future__ import annotations

import mmap
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from live_checks import visible
from transformer_lm.instructor import reference
from transformer_lm.forbidding import LIBRARY_ATTENTION, SOFTMAX, forbidding
from transformer_lm.judging import CheckFailed

TILED_CHECKS = (("flash_forward", "values"), ("flash_memory", "memory"), ("causal_skipping", "work"))


def tiled(exp=torch.exp, product=torch.matmul, dtype=None, trim=False, future=None, in_place=False, legacy=False):
    """A student's tiled forward: ``exp`` and ``product`` as given, computed in ``dtype``; ``trim``
    leaves out the keys of a diagonal tile that every query of the tile has in its future;
    ``future(s, vb)``, when given, is what it does with each tile a causal mask lets it skip (an
    evasion that does the work and throws it away); ``in_place`` accumulates with ``mul_``/``add_``;
    ``legacy`` makes its outputs with the legacy constructor ``torch.Tensor(*sizes)`` (float32, the
    way fairseq-style code does), which PyTorch runs past the dispatch mode."""
    def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
        q_, k_, v_ = ((t.to(dtype) if dtype else t) for t in (q, k, v))
        t_q, t_k, scale = q.shape[-2], k.shape[-2], q.shape[-1] ** -0.5
        out = torch.Tensor(*q.shape[:-1], v.shape[-1]) if legacy else q_.new_empty(*q.shape[:-1], v.shape[-1])
        lse = torch.Tensor(*q.shape[:-1]) if legacy else q_.new_empty(q.shape[:-1])
        for qs in range(0, t_q, block_q):
            qb = q_[..., qs:qs + block_q, :]
            m = q_.new_full(qb.shape[:-1], float("-inf"))
            total = q_.new_zeros(qb.shape[:-1])
            acc = q_.new_zeros(*qb.shape[:-1], v.shape[-1])
            stop = min(t_k, qs + qb.shape[-2]) if causal else t_k
            for ks in range(0, t_k, block_k):
                if ks >= stop:
                    if future is not None:
                        future(product(qb, k_[..., ks:ks + block_k, :].transpose(-2, -1)), v_[..., ks:ks + block_k, :])
                    continue
                end = min(ks + block_k, qs + qb.shape[-2]) if causal and trim else ks + block_k
                kb, vb = k_[..., ks:end, :], v_[..., ks:end, :]
                s = product(qb, kb.transpose(-2, -1)) * scale                       # (..., bq, bk)
                if causal:
                    rows = torch.arange(qs, qs + qb.shape[-2]).unsqueeze(-1)
                    s = s.masked_fill(torch.arange(ks, ks + kb.shape[-2]) > rows, float("-inf"))
                m_new = torch.maximum(m, s.amax(-1))
                safe = torch.where(torch.isneginf(m_new), 0.0, m_new)
                p, alpha = exp(s - safe.unsqueeze(-1)), exp(m - safe)
                if in_place:
                    total.mul_(alpha).add_(p.sum(-1))
                    acc.mul_(alpha.unsqueeze(-1)).add_(product(p, vb))
                else:
                    total = total * alpha + p.sum(-1)
                    acc = acc * alpha.unsqueeze(-1) + product(p, vb)
                m = m_new
            out[..., qs:qs + block_q, :] = acc / total.unsqueeze(-1)
            lse[..., qs:qs + block_q] = m + torch.log(total)
        return out.to(q.dtype), lse.to(q.dtype)
    return flash_forward


def exp_in_place(t):
    return t.exp_()


def exp_by_sigmoid(t):
    """exp(x) = sigmoid(x) / (1 - sigmoid(x)): an exponential under another name."""
    s = torch.sigmoid(t)
    return s / (1 - s)


def einsum_product(a, b):
    return torch.einsum("...ij,...jk->...ik", a, b)


def softmax_with(row_max, row_sum):
    """A ``softmax_stats`` that puts its blocks back together into whole rows, whose maximum and sum
    are ``row_max(x)`` and ``row_sum(e)``."""
    def softmax_stats(blocks):
        x = torch.cat(list(blocks), dim=-1)
        m = row_max(x)
        return m, row_sum(torch.exp(x - m.unsqueeze(-1)))
    return softmax_stats


def max_by_blocks(scores, block=4):
    """A row's maximum from one maximum per block (the honest part of the evasions below)."""
    m = scores[..., :block].amax(-1)
    for start in range(block, scores.shape[-1], block):
        m = torch.maximum(m, scores[..., start:start + block].amax(-1))
    return m


def sum_by_blocks(e, block=4):
    return sum(e[..., start:start + block].sum(-1) for start in range(0, e.shape[-1], block))


def row_at_a_time(q, k, v, causal=False, block_q=16, block_k=16):
    """A block of queries against every key at once, its sums made by matrix products: no tensor of
    T_q x T_k numbers and no operator called a reduction over a row."""
    out, lse = [], []
    for qs in range(0, q.shape[-2], block_q):
        s = q[..., qs:qs + block_q, :] @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        if causal:
            rows = torch.arange(qs, qs + s.shape[-2]).unsqueeze(-1)
            s = s.masked_fill(torch.arange(k.shape[-2]) > rows, float("-inf"))
        m = max_by_blocks(s, block_k)
        e = torch.exp(s - m.unsqueeze(-1))
        total = e @ torch.ones(k.shape[-2])
        out.append((e @ v) / total.unsqueeze(-1))
        lse.append(m + torch.log(total))
    return torch.cat(out, -2), torch.cat(lse, -1)


def in_a_buffer(buffer_of):
    """A forward that keeps every score of a (batch, head) in a buffer it did not create in the call
    (``buffer_of(t_q, t_k)`` gives it), written at once with ``out=`` and then worked on in place
    and a tile at a time, so that no operator creates a tensor as large as the score matrix."""
    def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
        t_q, t_k = q.shape[-2], k.shape[-2]
        out, lse = q.new_empty(*q.shape[:-1], v.shape[-1]), q.new_empty(q.shape[:-1])
        for b in range(q.shape[0]):
            for h in range(q.shape[1]):
                s = buffer_of(t_q, t_k)
                torch.matmul(q[b, h], k[b, h].transpose(0, 1), out=s)
                s.mul_(q.shape[-1] ** -0.5)
                if causal:
                    for qs in range(0, t_q, block_q):
                        rows = torch.arange(qs, min(qs + block_q, t_q)).unsqueeze(-1)
                        s[qs:qs + block_q].masked_fill_(torch.arange(t_k) > rows, float("-inf"))
                m = max_by_blocks(s, block_k)
                s.sub_(m.unsqueeze(-1)).exp_()
                total = sum_by_blocks(s, block_k)
                acc = q.new_zeros(t_q, v.shape[-1])
                for ks in range(0, t_k, block_k):
                    acc.add_(s[:, ks:ks + block_k] @ v[b, h, ks:ks + block_k])
                out[b, h], lse[b, h] = acc / total.unsqueeze(-1), m + torch.log(total)
        return out, lse
    return flash_forward


GLOBAL_BUFFER = torch.empty(1024 * 1024)


def in_a_closure():
    kept = torch.empty(1024 * 1024)
    return in_a_buffer(lambda t_q, t_k: kept[:t_q * t_k].view(t_q, t_k))


def grown_with_resize(t_q, t_k):
    return torch.empty(0).resize_(t_q, t_k)


def as_the_test_cell(group: str, answer) -> None:
    """The notebook's visible test cell of ``group`` on ``answer``: the stored check, inside
    ``forbidding`` with what the exercise forbids, as the cell runs it."""
    function = {"online_softmax": "online_softmax", "softmax_stats": "softmax_stats",
                "backward_memory": "FlashAttention"}.get(group, "flash_forward")
    with forbidding(answer, SOFTMAX if group in ("online_softmax", "softmax_stats") else SOFTMAX + LIBRARY_ATTENTION):
        visible(group, function)(answer)


HONEST = tiled()


def keeping(keep):
    """The honest tiled forward, which first keeps what ``keep(q, k, block_q)`` returns (every score
    of the call, somewhere the trace of torch's operators does not look) until it returns."""
    def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
        kept = keep(q, k, block_q)
        result = HONEST(q, k, v, causal=causal, block_q=block_q, block_k=block_k)
        del kept
        return result
    return flash_forward


def score_rows(q, k, block_q):
    """The scores of each block of queries against every key: never a (T, T) tensor at once."""
    return [q[..., s:s + block_q, :] @ k.transpose(-2, -1) for s in range(0, q.shape[-2], block_q)]


def in_numpy(q, k, block_q):
    kept = np.empty((*q.shape[:-1], k.shape[-2]), dtype=np.float32)
    for s, rows in zip(range(0, q.shape[-2], block_q), score_rows(q, k, block_q)):
        kept[..., s:s + block_q, :] = rows.numpy()
    return kept


def in_a_memory_map(q, k, block_q):
    kept = mmap.mmap(-1, 4 * q.shape[:-1].numel() * k.shape[-2])
    for s, rows in zip(range(0, q.shape[-2], block_q), score_rows(q, k, block_q)):
        start = 4 * rows[..., 0, 0].numel() * s * k.shape[-2]
        kept[start:start + 4 * rows.numel()] = rows.numpy().tobytes()
    return kept


def only_at_a_large_t(q, k, block_q):
    """The whole matrix, but only where no check with a trace was thought to look."""
    return q @ k.transpose(-2, -1) if q.shape[-2] > 1024 else None


def in_a_child_process(q, k, block_q):
    """Every score computed and held by another program, whose memory is not the call's."""
    code = "import sys, numpy as n; a = n.frombuffer(sys.stdin.buffer.read(), 'f4'); print((a @ a).shape)"
    return subprocess.run([sys.executable, "-c", code], input=q.numpy().tobytes(), capture_output=True, check=True)


def forked(q, k, block_q):
    pid = os.fork()
    if pid == 0:
        os._exit(0)   # a child that would hold the matrix
    os.waitpid(pid, 0)


def dispatch_turned_off(q, k, block_q):
    """The whole matrix made while the dispatcher's Python modes are off (a name built at run time)."""
    with getattr(getattr(torch, "_" + "C"), "_Disable" + "TorchDispatch")():
        return q @ k.transpose(-2, -1)


class BackwardInNumpy(reference.FlashAttention):
    """The course's tiled Function, whose backward first builds every score in NumPy."""

    @staticmethod
    def backward(ctx, grad_out):
        q, k = (t.detach().numpy() for t in ctx.saved_tensors[:2])
        kept = np.matmul(q, k.swapaxes(-1, -2))   # (B, H, T_q, T_k)
        del kept
        return reference.FlashAttention.backward(ctx, grad_out)


def library_softmax(kernel: str):
    """An online softmax that hands each row to a private kernel of PyTorch's softmax, by a name
    built at run time."""
    def online_softmax(scores, block):
        return getattr(torch.ops.aten, kernel)(scores, -1, False) if kernel == "_softmax" else \
            getattr(torch.ops.aten, kernel)(scores, -1)
    return online_softmax


def library_attention(kernel: str):
    """A forward that hands the call to one of PyTorch's private attention kernels."""
    def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
        widened = torch.nn.functional.pad(v, (0, q.shape[-1] - v.shape[-1]))   # the kernel wants one head size
        out = getattr(torch.ops.aten, kernel)(q, k, widened, is_causal=causal)[0][..., :v.shape[-1]]
        return out, HONEST(q, k, v, causal=causal, block_q=block_q, block_k=block_k)[1]
    return flash_forward


TENSOR, HELD, COMBINED, WORK = "created a tensor of shape", "held every block at once", "combined", "work with causal=True"
OUTSIDE, PROCESS, PIPE, UNTRACED, FORBIDDEN = "a cap the kernel enforces", "starts no process", "makes no pipe", \
    "dispatcher hidden", "while it was checked"
"""What the message of the check an evasion meets says: it was refused for what it did."""

EVASIONS = {
    # the whole score matrix kept, but never created by an operator during the call
    "scores_in_a_global_buffer": ("flash_memory", TENSOR,
                                  in_a_buffer(lambda t_q, t_k: GLOBAL_BUFFER[:t_q * t_k].view(t_q, t_k))),
    "scores_in_a_closures_buffer": ("flash_memory", TENSOR, in_a_closure()),
    "scores_in_a_buffer_grown_with_resize": ("flash_memory", TENSOR, in_a_buffer(grown_with_resize)),
    # a stream of blocks put back together into whole rows, reduced by operators not called reductions
    "softmax_sum_by_matmul": ("softmax_stats", HELD, softmax_with(max_by_blocks, lambda e: e @ torch.ones(e.shape[-1]))),
    "softmax_max_by_kthvalue": ("softmax_stats", HELD,
                                softmax_with(lambda s: s.kthvalue(s.shape[-1], -1).values, sum_by_blocks)),
    "softmax_max_by_topk": ("softmax_stats", HELD, softmax_with(lambda s: s.topk(1, -1).values[..., 0], sum_by_blocks)),
    "softmax_max_by_aminmax": ("softmax_stats", HELD, softmax_with(lambda s: torch.aminmax(s, dim=-1).max,
                                                                   sum_by_blocks)),
    "softmax_sum_by_nanmean": ("softmax_stats", HELD,
                               softmax_with(max_by_blocks, lambda e: torch.nanmean(e, -1) * e.shape[-1])),
    "softmax_max_by_median_of_sorted": ("softmax_stats", HELD,
                                        softmax_with(lambda s: s.sort(-1).values[..., -1], sum_by_blocks)),
    "forward_row_at_a_time": ("flash_memory", COMBINED, row_at_a_time),
    # the work of the future tiles done anyway, out of sight of the count of exponentials
    "future_tiles_through_sigmoid": ("causal_skipping", WORK,
                                     tiled(future=lambda s, vb: exp_by_sigmoid(s - s.amax(-1, keepdim=True)) @ vb)),
    "future_tiles_exp_in_place": ("causal_skipping", WORK, tiled(future=lambda s, vb: exp_in_place(s - 1) @ vb)),
    "future_tiles_products_only": ("causal_skipping", WORK, tiled(future=lambda s, vb: (s * 0) @ vb)),
    # the whole score matrix kept outside torch's operators, or out of their sight
    "scores_in_a_numpy_array": ("flash_memory", OUTSIDE, keeping(in_numpy)),
    "scores_in_a_memory_map": ("flash_memory", OUTSIDE, keeping(in_a_memory_map)),
    "backward_scores_in_numpy": ("backward_memory", OUTSIDE, BackwardInNumpy),
    "scores_as_python_bytes": ("flash_memory", OUTSIDE,
                               keeping(lambda q, k, b: [r.numpy().tobytes() for r in score_rows(q, k, b)])),
    "scores_only_at_a_large_t": ("flash_memory", TENSOR, keeping(only_at_a_large_t)),
    # subprocess makes the child's pipes before it starts the child: the pipes are refused first
    "scores_in_a_child_process": ("flash_memory", PIPE, keeping(in_a_child_process)),
    "a_forked_child": ("flash_memory", PROCESS, keeping(forked)),
    "scores_with_the_dispatch_mode_off": ("flash_memory", UNTRACED, keeping(dispatch_turned_off)),
    # a forbidden kernel reached by a name no list of names holds
    "softmax_by_its_safe_kernel": ("online_softmax", FORBIDDEN, library_softmax("_safe_softmax")),
    "softmax_by_its_private_kernel": ("online_softmax", FORBIDDEN, library_softmax("_softmax")),
    "attention_by_the_cpu_flash_kernel": ("flash_forward", FORBIDDEN,
                                          library_attention("_scaled_dot_product_flash_attention_for_cpu")),
    "attention_by_the_math_fallback": ("flash_forward", FORBIDDEN,
                                       library_attention("_scaled_dot_product_attention_math")),
}


@pytest.mark.parametrize("name", sorted(EVASIONS))
def test_every_evasion_is_refused_by_the_check_it_cheats_on(name):
    group, reason, answer = EVASIONS[name]
    with pytest.raises(CheckFailed, match=re.escape(reason)):
        as_the_test_cell(group, answer)


def test_the_red_team_is_large_enough_in_every_class_of_hole():
    classes = {"memory": {TENSOR, OUTSIDE, PROCESS, PIPE, UNTRACED}, "reductions": {HELD, COMBINED}, "work": {WORK},
               "forbidden routes": {FORBIDDEN}}
    counts = {name: sum(reason in reasons for _, reason, _ in EVASIONS.values()) for name, reasons in classes.items()}
    assert sum(counts.values()) == len(EVASIONS) >= 20 and min(counts.values()) >= 3, counts
    assert len(CORRECT) + 3 >= 10   # with the three online softmax variants


def key_blocks_outer(q, k, v, causal=False, block_q=16, block_k=16):
    """The loops the other way round: each key block visits every query block, whose running
    maximum, sum and output (as large as the output) wait between visits."""
    t_q, t_k, scale = q.shape[-2], k.shape[-2], q.shape[-1] ** -0.5
    m = q.new_full(q.shape[:-1], float("-inf"))
    total = q.new_zeros(q.shape[:-1])
    acc = q.new_zeros(*q.shape[:-1], v.shape[-1])
    for ks in range(0, t_k, block_k):
        kb, vb = k[..., ks:ks + block_k, :], v[..., ks:ks + block_k, :]
        for qs in range(0, t_q, block_q):
            if causal and ks >= qs + block_q:
                continue   # every key of the block is in these queries' future
            s = q[..., qs:qs + block_q, :] @ kb.transpose(-2, -1) * scale
            if causal:
                rows = torch.arange(qs, qs + s.shape[-2]).unsqueeze(-1)
                s = s.masked_fill(torch.arange(ks, ks + kb.shape[-2]) > rows, float("-inf"))
            rows = slice(qs, qs + block_q)
            m_new = torch.maximum(m[..., rows], s.amax(-1))
            p, alpha = torch.exp(s - m_new.unsqueeze(-1)), torch.exp(m[..., rows] - m_new)
            total[..., rows] = total[..., rows] * alpha + p.sum(-1)
            acc[..., rows, :] = acc[..., rows, :] * alpha.unsqueeze(-1) + p @ vb
            m[..., rows] = m_new
    return acc / total.unsqueeze(-1), m + torch.log(total)


def half_tiles(q, k, v, causal=False, block_q=16, block_k=16):
    """Tiles of its own shape: half as many keys as asked, so it combines fewer numbers at once."""
    return HONEST(q, k, v, causal=causal, block_q=block_q, block_k=max(1, block_k // 2))


CORRECT = {
    "key_blocks_outer": key_blocks_outer,
    "half_tiles": half_tiles,
    "exp_in_place": tiled(exp=exp_in_place),
    "float64_inside": tiled(dtype=torch.float64),
    "einsum_tiles": tiled(product=einsum_product),
    "trimmed_diagonal": tiled(trim=True),
    "accumulates_in_place": tiled(in_place=True),
    "legacy_constructors": tiled(legacy=True),
    "everything_at_once": tiled(exp=exp_in_place, product=einsum_product, dtype=torch.float64, trim=True,
                                in_place=True),
}


@pytest.mark.parametrize("name", sorted(CORRECT))
def test_every_correct_variant_passes_every_check(name):
    for group, _ in TILED_CHECKS:
        as_the_test_cell(group, CORRECT[name])


@pytest.mark.parametrize("name", ["exp_in_place", "float64", "blocks_of_three"])
def test_correct_online_softmax_variants_pass(name):
    def online_softmax(scores, block):
        x = scores.double() if name == "float64" else scores
        step = 3 if name == "blocks_of_three" and block >= 3 else block
        m = max_by_blocks(x, step)
        e = (x - m.unsqueeze(-1)).exp_() if name == "exp_in_place" else torch.exp(x - m.unsqueeze(-1))
        return (e / sum_by_blocks(e, step).unsqueeze(-1)).to(scores.dtype)
    visible("online_softmax", "online_softmax")(online_softmax)
