"""A class of assignment 05 whose truth is known from outside the grader: honest tiled attention
written in the styles of public code (``tests/honest_softmax.py``, ``honest_forward.py`` and
``honest_backward.py``), which must get every point with no flag, and submissions that cheat on
memory, work or the forbidden library, each with the items it must lose (those that compute the
tiles the causal mask hides, made safe against NaN, come from ``tests/skipping_evasions.py``, and
those that hold a whole matrix in one mode of the call only from ``tests/memory_evasions.py``).
``tests/test_outside_truth.py`` grades both lists as one class.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from autograder.reading.cells import grade_id
from hostile_class import add_cell, replace
from honest_backward import BACKWARD
from honest_forward import FORWARD
from honest_softmax import SOFTMAX
import memory_evasions
import skipping_evasions

A = "05_efficient_attention"
SOURCE = Path(__file__).resolve().parents[1] / "source" / A / "efficient_attention.ipynb"
ITEMS = ["online_softmax", "flash_forward", "flash_memory", "causal_skipping", "flash_backward", "backward_memory"]
FORWARD_ITEMS = {"flash_forward", "flash_memory", "causal_skipping"}


@dataclass
class Submission:
    """One student's notebook and the items it must not pass (none for an honest one)."""

    student: str
    notebook: dict
    lost: set[str] = field(default_factory=set)


FUNCTION = {
    "plain": '''

# style: PyTorch's custom autograd.Function tutorial
class FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal=False, block_q=16, block_k=16):
        out, lse = flash_forward(q, k, v, causal, block_q, block_k)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.block_q, ctx.block_k = causal, block_q, block_k
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        return (*flash_backward(q, k, v, out, lse, grad_out, ctx.causal, ctx.block_q, ctx.block_k), None, None, None)
''',
    "options": '''

# style: old fairseq (the options kept in one dict on ctx)
class FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal=False, block_q=16, block_k=16):
        out, lse = flash_forward(q, k, v, causal=causal, block_q=block_q, block_k=block_k)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.options = dict(causal=causal, block_q=block_q, block_k=block_k)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        grad_q, grad_k, grad_v = flash_backward(*ctx.saved_tensors, grad_out, **ctx.options)
        return grad_q, grad_k, grad_v, None, None, None
''',
    "once": '''

from torch.autograd.function import once_differentiable


# style: xformers / apex (once_differentiable backward, contiguous gradients)
class FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal=False, block_q=16, block_k=16):
        out, lse = flash_forward(q, k, v, causal, block_q, block_k)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.blocks = causal, (block_q, block_k)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        grads = flash_backward(q, k, v, out, lse, grad_out.contiguous(), ctx.causal, *ctx.blocks)
        return grads + (None, None, None)
''',
    "hf": '''

# style: Hugging Face (type hints on the autograd Function)
class FlashAttention(torch.autograd.Function):
    """Tiled attention; like torch.nn.MultiheadAttention's core, but saves only q, k, v, out and lse."""

    @staticmethod
    def forward(ctx, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, block_q: int = 16,
                block_k: int = 16) -> torch.Tensor:
        attn_output, lse = flash_forward(q, k, v, causal, block_q, block_k)
        ctx.save_for_backward(q, k, v, attn_output, lse)
        ctx.causal, ctx.block_q, ctx.block_k = causal, block_q, block_k
        return attn_output

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
        q, k, v, attn_output, lse = ctx.saved_tensors
        dq, dk, dv = flash_backward(q, k, v, attn_output, lse, grad_out, ctx.causal, ctx.block_q, ctx.block_k)
        return dq, dk, dv, None, None, None
''',
}

# student: (online_softmax cell, flash_forward cell, flash_backward, FlashAttention)
HONEST = {
    "h01_fairseq": ("fairseq", "fairseq", "fairseq", "options"),
    "h02_mingpt": ("plain", "mingpt", "nanogpt", "plain"),
    "h03_nanogpt": ("plain", "nanogpt", "nanogpt", "options"),
    "h04_lucidrains": ("nan_to_num", "lucidrains", "einsum", "plain"),
    "h05_hf_annotation": ("hf", "hf_annotation", "hf", "hf"),
    "h06_hf_assert": ("hf", "hf_assert", "hf", "hf"),
    "h07_hf_docs": ("hf", "hf_docs", "hf", "hf"),
    "h08_cs336": ("plain", "cs336", "two_kernels", "once"),
    "h09_vmap": ("tree", "vmap", "vmap", "plain"),
    "h10_per_tile_autograd": ("plain", "positions", "autograd", "plain"),
    "h11_split_k": ("log_domain", "split_k", "nanogpt", "plain"),
    "h12_float64": ("float64", "float64", "float64", "options"),
    "h13_bf16_mask_f64_acc": ("float64", "mixed", "float64", "plain"),
    "h14_positions": ("stacked", "positions", "tile_delta", "plain"),
    "h15_keys_outer": ("nan_to_num", "keys_outer", "einsum", "plain"),
    "h17_trimmed_diagonal": ("plain", "trimmed", "nanogpt", "once"),
    "h18_in_place": ("fairseq", "in_place", "fairseq", "options"),
    "h19_log_domain": ("log_domain", "log_domain", "two_kernels", "plain"),
    "h20_split_k_autograd": ("nan_to_num", "split_k", "autograd", "plain"),
    "h21_vmap_float64": ("float64", "vmap", "float64", "plain"),
    "h22_lucidrains_autograd": ("nan_to_num", "lucidrains", "autograd", "options"),
    "h23_mingpt_two_kernels": ("fairseq", "mingpt", "two_kernels", "plain"),
    "h24_cs336_einsum": ("log_domain", "cs336", "einsum", "options"),
    "h25_fairseq_vmap": ("fairseq", "fairseq", "vmap", "once"),
    "h26_keys_outer_float64": ("float64", "keys_outer", "float64", "plain"),
    "h27_bf16_mask_tile_delta": ("log_domain", "mixed", "tile_delta", "options"),
    "h28_in_place_autograd": ("stacked", "in_place", "autograd", "plain"),
    "h29_trimmed_einsum": ("nan_to_num", "trimmed", "einsum", "plain"),
    "h31_log_domain_vmap": ("plain", "log_domain", "vmap", "options"),
    "h32_nanogpt_fairseq": ("fairseq", "nanogpt", "fairseq", "plain"),
    "h33_validating_tiles": ("plain", "validating_tiles", "nanogpt", "plain"),
    "h34_validating": ("plain", "validating", "nanogpt", "plain"),
}


def answers(softmax: str, forward: str, backward: str, function: str) -> dict[str, str]:
    """The three answer cells, by grade_id, of one honest combination."""
    return {"online_softmax": SOFTMAX[softmax], "flash_forward": FORWARD[forward],
            "flash_backward": BACKWARD[backward] + FUNCTION[function]}


def solution() -> dict:
    return json.loads(SOURCE.read_text())


def with_answers(notebook: dict, cells: dict[str, str]) -> dict:
    for gid, source in cells.items():
        notebook = replace(notebook, gid, source)
    return notebook


def honest(good: dict) -> list[Submission]:
    return [Submission(student, with_answers(good, answers(*parts))) for student, parts in HONEST.items()]


# The attacks: a tiled forward whose hooks keep, hide or inflate, or the library reached another way.
TILED = '''def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
    T_q, T_k, scale = q.shape[-2], k.shape[-2], q.shape[-1] ** -0.5
    out, lse = q.new_empty(*q.shape[:-1], v.shape[-1]), q.new_empty(q.shape[:-1])
    {setup}
    for qs in range(0, T_q, block_q):
        qe = min(qs + block_q, T_q)
        m = q.new_full(q.shape[:-2] + (qe - qs,), float("-inf"))
        l, acc = torch.zeros_like(m), q.new_zeros(*m.shape, v.shape[-1])
        for ks in range(0, min(qe, T_k) if causal else T_k, block_k):
            ke = min(ks + block_k, T_k)
            s = {scores}
            {keep}
            if causal:
                s = s.masked_fill(torch.arange(ks, ke) > torch.arange(qs, qe)[:, None], float("-inf"))
            m_new = torch.maximum(m, s.amax(-1))
            p, alpha = torch.exp(s - m_new[..., None]), torch.exp(m - m_new)
            l, acc, m = l * alpha + p.sum(-1), acc * alpha[..., None] + p @ v[..., ks:ke, :], m_new
        out[..., qs:qe, :], lse[..., qs:qe] = acc / l[..., None], m + l.log()
    return out, lse
'''
TILE = "q[..., qs:qe, :] @ k[..., ks:ke, :].mT * scale"


def tiled(setup="pass", keep="pass", scores=TILE, before=""):
    return before + TILED.format(setup=setup, keep=keep, scores=scores)


# Each tile's scores copied into one buffer, where every score stays until the call returns.
STASH = "n = s.numel()\n            {into}[used:used + n].view_as(s).copy_(s)\n            used += n"
MATRIX = "B_H = q.numel() // (T_q * q.shape[-1])\n    "
MEMORY = {
    "a01_tiles_in_a_dict": tiled("kept = {}", "kept[qs, ks] = s"),
    "a02_buffer_made_with_the_cell": tiled('buf, used = globals()["_scr" + "atch"], 0', STASH.format(into="buf"),
                                           before="_scratch = torch.empty(2 ** 25)   # made when the cell ran\n\n\n"),
    "a03_untyped_storage": tiled(MATRIX + "store, used = torch.UntypedStorage(4 * B_H * T_q * T_k), 0",
                                 "torch.empty(0).set_(store, used, s.shape, s.stride()).copy_(s)\n"
                                 "            used += s.numel()"),
    "a04_complex_viewed_as_float": tiled(MATRIX + "buf = torch.empty(B_H * T_q * T_k // 4 + 1, dtype=torch.complex128)"
                                         ".view(torch.float32)\n    used = 0", STASH.format(into="buf")),
    # the whole row of scores of a block of queries, its maximum through max_pool1d (products by key tiles)
    "a05_row_through_pooling": '''def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
    T_q, T_k, scale = q.shape[-2], k.shape[-2], q.shape[-1] ** -0.5
    outs, lses = [], []
    for qs in range(0, T_q, block_q):
        row = q[..., qs:qs + block_q, :] @ k.mT * scale
        if causal:
            row = row.masked_fill(torch.arange(T_k) > torch.arange(qs, qs + row.shape[-2])[:, None], float("-inf"))
        top = F.max_pool1d(row.reshape(-1, 1, T_k), T_k).reshape(row.shape[:-1])
        p = torch.exp(row - top[..., None])
        total = F.avg_pool1d(p.reshape(-1, 1, T_k), T_k).reshape(row.shape[:-1]) * T_k
        acc = sum(p[..., ks:ks + block_k] @ v[..., ks:ks + block_k, :] for ks in range(0, T_k, block_k))
        outs.append(acc / total[..., None])
        lses.append(top + total.log())
    return torch.cat(outs, -2), torch.cat(lses, -1)
''',
    "a06_broadcast_multiply": tiled("everything = (q[..., :, None, :] * k[..., None, :, :]).sum(-1) * scale",
                                    scores="everything[..., qs:qe, ks:ke]"),
    "a07_cdist": tiled("q64, k64 = q.double(), k.double()\n    everything = ((q64 * q64).sum(-1)[..., None] + (k64 * k64)"
                       ".sum(-1)[..., None, :] - torch.cdist(q64, k64) ** 2).float() / 2 * scale",
                       scores="everything[..., qs:qe, ks:ke]"),
    # a block of queries against every key at once, by conv1d with the queries as filters
    "a08_conv1d_row": tiled("B_H, d = q.numel() // (T_q * q.shape[-1]), q.shape[-1]\n    keys = k.mT.reshape(1, B_H * d, T_k)",
                            "pass", scores="F.conv1d(keys, q[..., qs:qe, :].reshape(-1, d, 1), groups=B_H)"
                            ".reshape(*q.shape[:-2], qe - qs, T_k)[..., ks:ke] * scale"),
}
EXACT_LSE = '''
    scores = q @ k.mT / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.masked_fill(torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return out, torch.logsumexp(scores, dim=-1)
'''
PADDED = '''def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
    *lead, T_q, d = q.shape
    T_k, d_v = k.shape[-2], v.shape[-1]
    E = max(d, d_v)
    q_, k_, v_ = (F.pad(t, (0, E - t.shape[-1])).reshape(-1, t.shape[-2], E) for t in (q, k, v))
    {call}
    out = out[..., :d_v].reshape(*lead, T_q, d_v)''' + EXACT_LSE
MODULE = '''mha = getattr({where}, "Multihead" + "Attention")(E, 1, bias=False, batch_first=True)
    with torch.no_grad():
        for weight in mha.parameters():
            weight.copy_(torch.eye(E).repeat(weight.shape[0] // E, 1))
    mask = torch.ones(T_q, T_k, dtype=torch.bool).triu(1) if causal else None
    out = mha(q_ * math.sqrt(E / d), k_, v_, attn_mask=mask, need_weights=False)[0]'''
FORBIDDEN = {
    "a10_decomposed_softmax": ('''def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
    scores = q @ k.mT / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.masked_fill(torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    normalise = torch._decomp.decomposition_table[getattr(torch.ops.aten, "_soft" + "max").default]
    return normalise(scores, -1, False) @ v, torch.logsumexp(scores, dim=-1)
''', "flash_forward"),
    "a11_decomposed_sdpa": (PADDED.format(call='''out = getattr(torch._decomp.decompositions, "scaled_dot_product_" + "flash_attention_for_cpu")(
        q_.unsqueeze(1), k_.unsqueeze(1), v_.unsqueeze(1), 0.0, causal, scale=d ** -0.5)[0].squeeze(1)'''),
                            "flash_forward"),
    "a12_refs_softmax": ('''def merge_stats(max_a, sum_a, max_b, sum_b):
    maximum = torch.maximum(max_a, max_b)
    return maximum, torch.nan_to_num(sum_a * torch.exp(max_a - maximum)) + torch.nan_to_num(sum_b * torch.exp(max_b - maximum))


def online_softmax(scores, block):
    return getattr(torch._refs, "soft" + "max")(scores, -1)
''', "online_softmax"),
    "a13_multihead_attention": (PADDED.format(call=MODULE.format(where="torch.nn")), "flash_forward"),
    "a14_quantizable_multihead": (PADDED.format(call=MODULE.format(where="torch.ao.nn.quantizable")), "flash_forward"),
}

# A cell that takes the run over: it runs the plan's later cells and probes itself, outside the
# trace of forbidden calls, sends the frames the harness would send for them, and exits at once.
FORGER = '''# FORGER: the rest of the run, as this cell reports it
import fcntl, json, os
from safetensors.torch import load_file
from harness.run import as_safetensors, plain_value
from transformer_lm.sandboxed import wire

here = os.path.join(os.sep, "gra" + "der", "in")
plan = json.load(open(os.path.join(here, "plan.json")))
held = os.path.join(here, "inputs.safetensors")
inputs = load_file(held) if os.path.getsize(held) else {}
pipe = None
for fd in range(3, 64):
    try:
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY:
            pipe = fd
            break
    except OSError:
        pass


def send(event, kind=b"E", payload=None, **fields):
    data = payload if payload is not None else json.dumps({"event": event, **fields}).encode()
    os.write(pipe, kind + len(data).to_bytes(4, "big") + data)


mine = next(i for i, cell in enumerate(plan["cells"]) if "# FORGER:" in cell["source"])
count = get_ipython().execution_count
send("cell_end", index=plan["cells"][mine]["index"], error=None)
for cell in plan["cells"][mine + 1:]:
    if cell["index"] not in plan["skip_cells"]:
        count += 1
        send("cell_start", index=cell["index"], count=count)
        try:
            exec(compile(cell["source"], f"<ipython-input-{count}-forged>", "exec"), globals())
        except Exception:
            pass
        send("cell_end", index=cell["index"], error=None)
    for pid in cell["probes"]:
        if pid in plan["skip_probes"]:
            continue
        call = plan["calls"][pid]
        send("probe_start", probe=pid)
        own = {name: inputs[wire.tensor_key(call.get("tensors_of", pid), name)] for name in call["tensor_keys"]}
        try:
            value = wire.call_probe(call, globals(), own)
        except Exception as error:
            send("probe_end", probe=pid, kind="error", error=type(error).__name__, where=None)
            continue
        record = wire.as_record(value)
        if record is None:
            send("probe_end", probe=pid, value=plain_value(value))
            continue
        name = f"{pid}.safetensors".encode()
        send(None, b"F", len(name).to_bytes(2, "big") + name + as_safetensors(record))
        send("probe_end", probe=pid, saved=True)
send("done")
os._exit(0)
'''

SAVE = "ctx.save_for_backward(q, k, v, out, lse)"
ON_CTX = {
    "a15_scores_on_ctx": "ctx.scores = q @ k.transpose(-2, -1)",
    "a16_tiles_on_ctx": "ctx.tiles = {(s, t): q[..., s:s + block_q, :] @ k[..., t:t + block_k, :].mT\n"
                        "                     for s in range(0, q.shape[-2], block_q) for t in range(0, k.shape[-2], block_k)}",
}


def attacks(good: dict) -> list[Submission]:
    from attack_class import library_flash

    found = [Submission(name, replace(good, "flash_forward", source), {"flash_memory"})
             for name, source in MEMORY.items()]
    for name, (source, answer) in FORBIDDEN.items():
        found.append(Submission(name, replace(good, answer, source), FORWARD_ITEMS if answer == "flash_forward"
                                else {"online_softmax"}))
    for name, kept in ON_CTX.items():
        notebook = with_answers(good, {"flash_backward": _answer(good, "flash_backward").replace(SAVE, SAVE + "\n        " + kept)})
        found.append(Submission(name, notebook, {"backward_memory"}))
    forged = add_cell(replace(good, "flash_forward", library_flash()), FORGER, "online_softmax")
    found.append(Submission("a17_forged_run", forged, set(FORWARD_ITEMS)))
    found += [Submission(f"a18_{name}", replace(good, "flash_forward", source), {"causal_skipping"})
              for name, source in skipping_evasions.forward_evasions().items()]
    found += [Submission(f"a19_{name}", replace(good, "flash_backward", source), {"backward_memory"})
              for name, source in skipping_evasions.backward_evasions().items()]
    found += [Submission(f"a20_{name}", replace(good, "flash_forward", source), {"flash_memory"})
              for name, source in memory_evasions.forward_evasions().items()]
    found += [Submission(f"a21_{name}", replace(good, "flash_backward", source), {"backward_memory"})
              for name, source in memory_evasions.backward_evasions().items()]
    return found


MEASURED = ("a18_", "a19_", "a20_", "a21_")
"""The attacks judged by what the kernel measures (CPU time, memory under the cap): each loses the item it
cheats on and no other (``tests/skipping_evasions.py``, ``tests/memory_evasions.py``)."""


def _answer(notebook: dict, gid: str) -> str:
    return "".join(next(c for c in notebook["cells"] if grade_id(c) == gid)["source"])


SLOW_ONCE = '''

# Honest, but slow in the first run's timed windows only: once a call of the capped checks' length
# (flash_memory's, made before causal_skipping's in the same run) was seen, each timed causal call
# first makes a pass without the mask and throws it away.
_honest_forward, _long_seen = flash_forward, False


def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
    global _long_seen
    _long_seen = _long_seen or q.shape[-2] >= 3584
    if causal and _long_seen and q.shape[-2] == 1024:
        _honest_forward(q, k, v, False, block_q, block_k)
    return _honest_forward(q, k, v, causal, block_q, block_k)
'''


def timed_badly_once(good: dict) -> Submission:
    """An honest forward whose first timing fails as a moment of load could make it fail, and whose
    second, in the grading's second run (which makes causal_skipping's probes alone), passes."""
    return Submission("t01_slow_in_the_first_run", replace(good, "flash_forward", _answer(good, "flash_forward") + SLOW_ONCE))
