"""Correct answers to assignment 05, written anew in the styles of public code: the answer cell of
``flash_backward`` with the ``FlashAttention`` Function.
Each source starts with a ``# style:`` line. Every one is tiled (no T x T scores, no whole row of
scores for a block of queries), skips the key blocks wholly in a query block's future, keeps only
q, k, v, out and lse for the backward, and calls no library softmax or attention.
``tests/outside_truth_class.py`` puts them together.
"""

BACKWARD = {
    "nanogpt": '''# style: nanoGPT names (att, dy), delta = rowsum(dy * y) once, then tile by tile
def flash_backward(q, k, v, out, lse, grad_out, causal=False, block_q=16, block_k=16):
    B, nh, T, hs = q.size()
    S = k.size(2)
    scale = 1.0 / math.sqrt(hs)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    delta = (grad_out * out).sum(-1, keepdim=True)
    for t0 in range(0, T, block_q):
        t1 = min(t0 + block_q, T)
        qb, dy = q[:, :, t0:t1], grad_out[:, :, t0:t1]
        for s0 in range(0, min(S, t1) if causal else S, block_k):
            s1 = min(s0 + block_k, S)
            att = (qb @ k[:, :, s0:s1].transpose(-2, -1)) * scale
            if causal:
                att = att.masked_fill(torch.ones(t1 - t0, s1 - s0).tril(diagonal=t0 - s0) == 0, float('-inf'))
            p = torch.exp(att - lse[:, :, t0:t1, None])
            dv[:, :, s0:s1] += p.transpose(-2, -1) @ dy
            ds = p * (dy @ v[:, :, s0:s1].transpose(-2, -1) - delta[:, :, t0:t1]) * scale
            dq[:, :, t0:t1] += ds @ k[:, :, s0:s1]
            dk[:, :, s0:s1] += ds.transpose(-2, -1) @ qb
    return dq, dk, dv
''',
    "fairseq": '''# style: old fairseq (.new().zero_() gradient buffers, torch.Tensor(sizes) masks, .float() and .type_as)
def flash_backward(q, k, v, out, lse, grad_out, causal=False, block_q=16, block_k=16):
    bsz, num_heads, tgt_len, head_dim = q.size()
    src_len, scaling = k.size(2), head_dim ** -0.5
    grad_q, grad_k, grad_v = q.new(q.size()).zero_(), k.new(k.size()).zero_(), v.new(v.size()).zero_()
    delta = (grad_out.float() * out.float()).sum(dim=3)
    for i in range(0, tgt_len, block_q):
        q_i, do_i = q[:, :, i:i + block_q].float(), grad_out[:, :, i:i + block_q].float()
        n = q_i.size(2)
        for j in range(0, min(src_len, i + n) if causal else src_len, block_k):
            k_j, v_j = k[:, :, j:j + block_k].float(), v[:, :, j:j + block_k].float()
            attn_weights = torch.matmul(q_i, k_j.transpose(2, 3)) * scaling
            if causal:
                future = torch.Tensor(n, k_j.size(2)).fill_(1).triu_(i - j + 1).bool()
                attn_weights = attn_weights.masked_fill(future, float("-inf"))
            attn_probs = torch.exp(attn_weights - lse[:, :, i:i + n].unsqueeze(3))
            grad_v[:, :, j:j + block_k] += torch.matmul(attn_probs.transpose(2, 3), do_i).type_as(grad_v)
            grad_scores = attn_probs * (torch.matmul(do_i, v_j.transpose(2, 3)) - delta[:, :, i:i + n].unsqueeze(3))
            grad_q[:, :, i:i + n] += (torch.matmul(grad_scores, k_j) * scaling).type_as(grad_q)
            grad_k[:, :, j:j + block_k] += (torch.matmul(grad_scores.transpose(2, 3), q_i) * scaling).type_as(grad_k)
    return grad_q, grad_k, grad_v
''',
    "einsum": '''# style: lucidrains (einsum strings; key chunks outside, dk and dv summed per chunk, -finfo.max mask)
def flash_backward(q, k, v, out, lse, grad_out, causal=False, block_q=16, block_k=16):
    scale = q.shape[-1] ** -0.5
    D = torch.einsum("b h i d, b h i d -> b h i", grad_out, out)
    dq, dks, dvs = torch.zeros_like(q), [], []
    for k_start, k_chunk, v_chunk in zip(range(0, k.shape[-2], block_k), k.split(block_k, dim=-2),
                                         v.split(block_k, dim=-2)):
        dk_chunk, dv_chunk = torch.zeros_like(k_chunk), torch.zeros_like(v_chunk)
        for q_start in range(0, q.shape[-2], block_q):
            q_chunk, do_chunk = q[..., q_start:q_start + block_q, :], grad_out[..., q_start:q_start + block_q, :]
            i = q_chunk.shape[-2]
            if causal and k_start >= q_start + i:
                continue
            sim = torch.einsum("b h i d, b h j d -> b h i j", q_chunk, k_chunk) * scale
            if causal:
                future = torch.arange(k_start, k_start + k_chunk.shape[-2])[None, :] > torch.arange(q_start, q_start + i)[:, None]
                sim = sim.masked_fill(future, -torch.finfo(sim.dtype).max)
            attn = torch.exp(sim - lse[..., q_start:q_start + i, None])
            dv_chunk = dv_chunk + torch.einsum("b h i j, b h i d -> b h j d", attn, do_chunk)
            ds = attn * (torch.einsum("b h i d, b h j d -> b h i j", do_chunk, v_chunk) - D[..., q_start:q_start + i, None])
            dq[..., q_start:q_start + i, :] += torch.einsum("b h i j, b h j d -> b h i d", ds, k_chunk) * scale
            dk_chunk = dk_chunk + torch.einsum("b h i j, b h i d -> b h j d", ds, q_chunk) * scale
        dks.append(dk_chunk)
        dvs.append(dv_chunk)
    return dq, torch.cat(dks, dim=-2), torch.cat(dvs, dim=-2)
''',
    "two_kernels": '''# style: CS336 / the Triton tutorial (two kernels: dK and dV with key tiles outside, then dQ with query tiles outside)
def flash_backward(q, k, v, out, lse, grad_out, causal=False, block_q=16, block_k=16):
    N_QUERIES, D = q.shape[-2:]
    N_KEYS, scale = k.shape[-2], D ** -0.5
    Delta = (out * grad_out).sum(-1)

    def P_and_dS(lo, k_lo):                                   # one tile's P_ij, recomputed, and dS_ij
        Q_i, dO_i = q[..., lo:lo + block_q, :], grad_out[..., lo:lo + block_q, :]
        K_j, V_j = k[..., k_lo:k_lo + block_k, :], v[..., k_lo:k_lo + block_k, :]
        S_ij = Q_i @ K_j.transpose(-1, -2) * scale
        if causal:
            keep = lo + torch.arange(Q_i.shape[-2])[:, None] >= k_lo + torch.arange(K_j.shape[-2])[None, :]
            S_ij = torch.where(keep, S_ij, S_ij.new_tensor(-1e6))
        P_ij = torch.exp(S_ij - lse[..., lo:lo + block_q, None])
        return P_ij, P_ij * (dO_i @ V_j.transpose(-1, -2) - Delta[..., lo:lo + block_q, None])

    dK, dV, dQ = torch.zeros_like(k), torch.zeros_like(v), torch.zeros_like(q)
    for k_lo in range(0, N_KEYS, block_k):                     # kernel 1: a program per key tile
        for lo in range(0, N_QUERIES, block_q):
            if causal and k_lo >= min(lo + block_q, N_QUERIES):
                continue
            P_ij, dS_ij = P_and_dS(lo, k_lo)
            dV[..., k_lo:k_lo + block_k, :] += P_ij.transpose(-1, -2) @ grad_out[..., lo:lo + block_q, :]
            dK[..., k_lo:k_lo + block_k, :] += dS_ij.transpose(-1, -2) @ q[..., lo:lo + block_q, :] * scale
    for lo in range(0, N_QUERIES, block_q):                    # kernel 2: a program per query tile
        for k_lo in range(0, min(N_KEYS, lo + block_q) if causal else N_KEYS, block_k):
            dQ[..., lo:lo + block_q, :] += P_and_dS(lo, k_lo)[1] @ k[..., k_lo:k_lo + block_k, :] * scale
    return dQ, dK, dV
''',
    "autograd": '''# style: per-tile autograd (each tile's forward recomputed under enable_grad, torch.autograd.grad for its share)
def flash_backward(q, k, v, out, lse, grad_out, causal=False, block_q=16, block_k=16):
    T_q, T_k, scale = q.shape[-2], k.shape[-2], q.shape[-1] ** -0.5
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    delta = (grad_out * out).sum(-1, keepdim=True)
    for qs in range(0, T_q, block_q):
        qe = min(qs + block_q, T_q)
        for ks in range(0, min(T_k, qe) if causal else T_k, block_k):
            ke = min(ks + block_k, T_k)
            with torch.enable_grad():
                q_t, k_t, v_t = (t.detach().requires_grad_() for t in (q[..., qs:qe, :], k[..., ks:ke, :], v[..., ks:ke, :]))
                s = q_t @ k_t.transpose(-2, -1) * scale
                if causal:
                    s = s.masked_fill(torch.arange(ks, ke) > torch.arange(qs, qe)[:, None], float("-inf"))
                p = torch.exp(s - lse[..., qs:qe, None])
                # the tile's share of <out, dO>, with the softmax's -delta term given as p's own gradient
                g_q, g_k, g_v = torch.autograd.grad((p @ v_t, p), (q_t, k_t, v_t),
                                                    (grad_out[..., qs:qe, :], -delta[..., qs:qe, :].expand_as(p)))
            dq[..., qs:qe, :] += g_q
            dk[..., ks:ke, :] += g_k
            dv[..., ks:ke, :] += g_v
    return dq, dk, dv
''',
    "float64": '''# style: float64 accumulators (tiles and dq, dk, dv in double, cast back at the end)
def flash_backward(q, k, v, out, lse, grad_out, causal=False, block_q=16, block_k=16):
    T_q, T_k, scale = q.shape[-2], k.shape[-2], 1.0 / math.sqrt(q.shape[-1])
    q64, k64, v64, do64, lse64 = q.double(), k.double(), v.double(), grad_out.double(), lse.double()
    dq, dk, dv = torch.zeros_like(q64), torch.zeros_like(k64), torch.zeros_like(v64)
    D = (do64 * out.double()).sum(-1)
    for qs in range(0, T_q, block_q):
        qe = min(qs + block_q, T_q)
        for ks in range(0, min(T_k, qe) if causal else T_k, block_k):
            ke = min(ks + block_k, T_k)
            s = q64[..., qs:qe, :] @ k64[..., ks:ke, :].transpose(-2, -1) * scale
            if causal and ke - 1 > qs:
                s = s.masked_fill(torch.ones(qe - qs, ke - ks, dtype=torch.bool).triu(qs - ks + 1), -math.inf)
            p = torch.exp(s - lse64[..., qs:qe, None])
            dv[..., ks:ke, :] += p.transpose(-2, -1) @ do64[..., qs:qe, :]
            ds = p * (do64[..., qs:qe, :] @ v64[..., ks:ke, :].transpose(-2, -1) - D[..., qs:qe, None]) * scale
            dq[..., qs:qe, :] += ds @ k64[..., ks:ke, :]
            dk[..., ks:ke, :] += ds.transpose(-2, -1) @ q64[..., qs:qe, :]
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)
''',
    "vmap": '''# style: torch.vmap over batch and heads (one head's backward, functional updates of lists of blocks)
def flash_backward(q, k, v, out, lse, grad_out, causal=False, block_q=16, block_k=16):
    *lead, T_q, d = q.shape
    T_k, d_v, scale = k.shape[-2], v.shape[-1], d ** -0.5

    def head(qh, kh, vh, oh, lh, gh):
        dq_blocks = [torch.zeros_like(qh[qs:qs + block_q]) for qs in range(0, T_q, block_q)]
        dk_blocks, dv_blocks = [], []
        for ks in range(0, T_k, block_k):
            kt, vt = kh[ks:ks + block_k], vh[ks:ks + block_k]
            dk_t, dv_t = torch.zeros_like(kt), torch.zeros_like(vt)
            for b, qs in enumerate(range(0, T_q, block_q)):
                qt, gt = qh[qs:qs + block_q], gh[qs:qs + block_q]
                if causal and ks >= qs + qt.shape[0]:
                    continue
                s = qt @ kt.T * scale
                if causal:
                    s = s.masked_fill(torch.arange(ks, ks + kt.shape[0]) > torch.arange(qs, qs + qt.shape[0])[:, None], float("-inf"))
                p = torch.exp(s - lh[qs:qs + block_q, None])
                ds = p * (gt @ vt.T - (gt * oh[qs:qs + block_q]).sum(-1, keepdim=True)) * scale
                dv_t, dk_t = dv_t + p.T @ gt, dk_t + ds.T @ qt
                dq_blocks[b] = dq_blocks[b] + ds @ kt
            dk_blocks.append(dk_t)
            dv_blocks.append(dv_t)
        return torch.cat(dq_blocks), torch.cat(dk_blocks), torch.cat(dv_blocks)

    flat = [t.reshape(-1, *t.shape[-2:]) for t in (q, k, v, out)] + [lse.reshape(-1, T_q), grad_out.reshape(-1, T_q, d_v)]
    dq, dk, dv = torch.vmap(head)(*flat)
    return dq.reshape(q.shape), dk.reshape(k.shape), dv.reshape(v.shape)
''',
    "tile_delta": '''# style: one vector of positions per call; D = rowsum(dO * O) recomputed for each query tile
def flash_backward(q, k, v, out, lse, grad_out, causal=False, block_q=16, block_k=16):
    T_q, T_k = q.shape[-2], k.shape[-2]
    pos, scale = torch.arange(max(T_q, T_k)), q.shape[-1] ** -0.5
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for qs in range(0, T_q, block_q):
        qe = min(qs + block_q, T_q)
        q_t, do_t = q[..., qs:qe, :], grad_out[..., qs:qe, :]
        D_t = (do_t * out[..., qs:qe, :]).sum(-1, keepdim=True)
        for ks in range(0, min(qe, T_k) if causal else T_k, block_k):
            ke = min(ks + block_k, T_k)
            s = q_t @ k[..., ks:ke, :].mT * scale
            if causal:
                s = s.masked_fill(pos[None, ks:ke] > pos[qs:qe, None], float("-inf"))
            p = torch.exp(s - lse[..., qs:qe, None])
            dv[..., ks:ke, :] += p.mT @ do_t
            ds = p * (do_t @ v[..., ks:ke, :].mT - D_t)
            dq[..., qs:qe, :] += ds @ k[..., ks:ke, :] * scale
            dk[..., ks:ke, :] += ds.mT @ q_t * scale
    return dq, dk, dv
''',
}
BACKWARD["hf"] = BACKWARD["nanogpt"].replace(
    "# style: nanoGPT names (att, dy), delta = rowsum(dy * y) once, then tile by tile\n"
    "def flash_backward(q, k, v, out, lse, grad_out, causal=False, block_q=16, block_k=16):",
    "# style: Hugging Face (type hints on the eager backward)\nfrom typing import Optional, Tuple\n\n\n"
    "def flash_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,\n"
    "                   grad_out: torch.Tensor, causal: bool = False, block_q: int = 16,\n"
    "                   block_k: int = 16) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:")
