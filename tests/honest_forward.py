"""Correct answers to assignment 05, written anew in the styles of public code: the answer cell of
``flash_forward``.
Each source starts with a ``# style:`` line. Every one is tiled (no T x T scores, no whole row of
scores for a block of queries), skips the key blocks wholly in a query block's future, keeps only
q, k, v, out and lse for the backward, and calls no library softmax or attention.
``tests/outside_truth_class.py`` puts them together.
"""

import re

FORWARD = {
    "fairseq": '''# style: old fairseq (torch.Tensor(sizes) legacy constructors, .new(), .float() on float32, .type_as)
def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
    bsz, num_heads, tgt_len, head_dim = q.size()
    src_len, v_dim = k.size(2), v.size(3)
    scaling = head_dim ** -0.5
    attn = q.new(bsz, num_heads, tgt_len, v_dim)
    attn_lse = torch.Tensor(bsz, num_heads, tgt_len).type_as(q)
    for i in range(0, tgt_len, block_q):
        q_i = q[:, :, i:i + block_q].float() * scaling
        n = q_i.size(2)
        m_i = q_i.new(bsz, num_heads, n).fill_(float("-inf"))
        l_i = q_i.new(bsz, num_heads, n).zero_()
        o_i = q_i.new(bsz, num_heads, n, v_dim).zero_()
        for j in range(0, min(src_len, i + n) if causal else src_len, block_k):
            attn_weights = torch.matmul(q_i, k[:, :, j:j + block_k].float().transpose(2, 3))
            if causal:
                future = torch.Tensor(n, attn_weights.size(3)).fill_(1).triu_(i - j + 1).bool()
                attn_weights = attn_weights.masked_fill(future, float("-inf"))
            m_new = torch.max(m_i, attn_weights.max(dim=3)[0])
            attn_probs = torch.exp(attn_weights - m_new.unsqueeze(3))
            rescale = torch.exp(m_i - m_new)
            l_i = l_i * rescale + attn_probs.sum(dim=3)
            o_i = o_i * rescale.unsqueeze(3) + torch.matmul(attn_probs, v[:, :, j:j + block_k].float())
            m_i = m_new
        attn[:, :, i:i + n] = (o_i / l_i.unsqueeze(3)).type_as(attn)
        attn_lse[:, :, i:i + n] = (m_i + l_i.log()).type_as(attn_lse)
    return attn, attn_lse
''',
    "mingpt": '''# style: minGPT (bmm on (B*nh, T, hs) views, att and y, masked_fill where the tril bias is 0)
def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
    B, nh, T, hs = q.size()
    S, vs = k.size(2), v.size(3)
    qf, kf, vf = q.reshape(B * nh, T, hs), k.reshape(B * nh, S, hs), v.reshape(B * nh, S, vs)
    y = torch.zeros(B * nh, T, vs, dtype=q.dtype)
    lse = torch.zeros(B * nh, T, dtype=q.dtype)
    for t0 in range(0, T, block_q):
        t1 = min(t0 + block_q, T)
        m = torch.full((B * nh, t1 - t0), -float('inf'))
        l = torch.zeros(B * nh, t1 - t0)
        acc = torch.zeros(B * nh, t1 - t0, vs)
        for s0 in range(0, t1 if causal else S, block_k):
            s1 = min(s0 + block_k, S)
            att = torch.bmm(qf[:, t0:t1], kf[:, s0:s1].transpose(1, 2)) * (1.0 / math.sqrt(hs))
            if causal:
                bias = torch.tril(torch.ones(t1 - t0, s1 - s0), diagonal=t0 - s0)
                att = att.masked_fill(bias == 0, float('-inf'))
            m_new = torch.maximum(m, att.amax(dim=-1))
            att = torch.exp(att - m_new.unsqueeze(-1))
            corr = torch.exp(m - m_new)
            l = corr * l + att.sum(dim=-1)
            acc = corr.unsqueeze(-1) * acc + torch.bmm(att, vf[:, s0:s1])
            m = m_new
        y[:, t0:t1] = acc / l.unsqueeze(-1)
        lse[:, t0:t1] = m + torch.log(l)
    return y.view(B, nh, T, vs), lse.view(B, nh, T)
''',
    "nanogpt": '''# style: nanoGPT (B, nh, T, hs = q.size(); the manual attention branch, one tile at a time)
def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
    B, nh, T, hs = q.size()
    Tk = k.size(-2)
    y = q.new_zeros(B, nh, T, v.size(-1))
    lse = q.new_zeros(B, nh, T)
    for t in range(0, T, block_q):
        qb = q[:, :, t:t + block_q]
        tq = qb.size(-2)
        m = qb.new_full((B, nh, tq, 1), float('-inf'))
        l = qb.new_zeros(B, nh, tq, 1)
        yb = qb.new_zeros(B, nh, tq, v.size(-1))
        for s in range(0, Tk, block_k):
            if causal and s >= t + tq:
                break  # this key block and every later one is in the future of all tq queries
            kb, vb = k[:, :, s:s + block_k], v[:, :, s:s + block_k]
            att = (qb @ kb.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            if causal:
                bias = torch.ones(tq, kb.size(-2)).tril(diagonal=t - s).view(1, 1, tq, kb.size(-2))
                att = att.masked_fill(bias == 0, float('-inf'))
            m_new = torch.maximum(m, att.max(dim=-1, keepdim=True).values)
            att = torch.exp(att - m_new)
            c = torch.exp(m - m_new)
            l = c * l + att.sum(dim=-1, keepdim=True)
            yb = c * yb + att @ vb
            m = m_new
        y[:, :, t:t + tq] = yb / l
        lse[:, :, t:t + tq] = (m + l.log()).squeeze(-1)
    return y, lse
''',
    "lucidrains": '''# style: lucidrains memory-efficient-attention (einsum strings, sim / attn, -finfo.max as the mask value)
def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
    scale = q.shape[-1] ** -0.5
    mask_value = -torch.finfo(q.dtype).max
    out_chunks, lse_chunks = [], []
    for q_start, q_chunk in zip(range(0, q.shape[-2], block_q), (q * scale).split(block_q, dim=-2)):
        i = q_chunk.shape[-2]
        row_max = q_chunk.new_full(q_chunk.shape[:-1], mask_value)
        exp_sum = q_chunk.new_zeros(q_chunk.shape[:-1])
        weighted = q_chunk.new_zeros(*q_chunk.shape[:-1], v.shape[-1])
        for k_start, k_chunk, v_chunk in zip(range(0, k.shape[-2], block_k), k.split(block_k, dim=-2),
                                             v.split(block_k, dim=-2)):
            if causal and k_start >= q_start + i:
                break
            sim = torch.einsum("b h i d, b h j d -> b h i j", q_chunk, k_chunk)
            if causal:
                q_pos = torch.arange(q_start, q_start + i)[:, None]
                k_pos = torch.arange(k_start, k_start + k_chunk.shape[-2])[None, :]
                sim = sim.masked_fill(k_pos > q_pos, mask_value)
            new_max = torch.maximum(row_max, sim.amax(dim=-1))
            exp_weights = torch.exp(sim - new_max[..., None])
            decay = torch.exp(row_max - new_max)
            exp_sum = exp_sum * decay + exp_weights.sum(dim=-1)
            weighted = weighted * decay[..., None] + torch.einsum("b h i j, b h j d -> b h i d", exp_weights, v_chunk)
            row_max = new_max
        out_chunks.append(weighted / exp_sum[..., None])
        lse_chunks.append(row_max + exp_sum.log())
    return torch.cat(out_chunks, dim=-2), torch.cat(lse_chunks, dim=-1)
''',
    "cs336": '''# style: CS336 assignment 2 (a Triton kernel's program ids and tiles, Q_i K_j^T, written as PyTorch loops)
def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
    def cdiv(a, b):
        return (a + b - 1) // b

    *batch, N_QUERIES, D = q.shape
    N_KEYS = k.shape[-2]
    scale = D ** -0.5
    O = torch.empty(*batch, N_QUERIES, v.shape[-1], dtype=q.dtype)
    L = torch.empty(*batch, N_QUERIES, dtype=q.dtype)
    for query_tile_index in range(cdiv(N_QUERIES, block_q)):          # tl.program_id(0)
        lo = query_tile_index * block_q
        Q_i = q[..., lo:lo + block_q, :]
        Bq = Q_i.shape[-2]
        m_i = torch.full((*batch, Bq), float("-inf"))
        l_i = torch.zeros(*batch, Bq)
        O_i = torch.zeros(*batch, Bq, v.shape[-1])
        n_key_tiles = cdiv(min(N_KEYS, lo + Bq), block_k) if causal else cdiv(N_KEYS, block_k)
        for key_tile_index in range(n_key_tiles):
            k_lo = key_tile_index * block_k
            K_j, V_j = k[..., k_lo:k_lo + block_k, :], v[..., k_lo:k_lo + block_k, :]
            S_ij = Q_i @ K_j.transpose(-1, -2) * scale                     # tl.dot
            if causal:
                q_idx = lo + torch.arange(Bq)[:, None]
                k_idx = k_lo + torch.arange(K_j.shape[-2])[None, :]
                S_ij = torch.where(q_idx >= k_idx, S_ij, S_ij.new_tensor(-1e6))
            m_ij = torch.maximum(m_i, S_ij.amax(dim=-1))
            P_ij = torch.exp(S_ij - m_ij[..., None])
            l_i = torch.exp(m_i - m_ij) * l_i + P_ij.sum(dim=-1)
            O_i = torch.exp(m_i - m_ij)[..., None] * O_i + P_ij @ V_j
            m_i = m_ij
        O[..., lo:lo + Bq, :] = O_i / l_i[..., None]
        L[..., lo:lo + Bq] = m_i + torch.log(l_i)
    return O, L
''',
    "vmap": '''# style: torch.vmap over batch and heads (one head's tiled kernel, vectorised by functorch)
def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
    *lead, T_q, d = q.shape
    T_k, d_v = k.shape[-2], v.shape[-1]
    scale = 1.0 / math.sqrt(d)

    def head(qh, kh, vh):                                   # (T_q, d), (T_k, d), (T_k, d_v): one head
        outs, lses = [], []
        for qs in range(0, T_q, block_q):
            qt = qh[qs:qs + block_q]
            n = qt.shape[0]
            m, l, acc = torch.full((n,), float("-inf")), torch.zeros(n), torch.zeros(n, d_v)
            for ks in range(0, min(T_k, qs + n) if causal else T_k, block_k):
                s = qt @ kh[ks:ks + block_k].T * scale
                if causal:
                    s = s.masked_fill(torch.arange(ks, ks + s.shape[-1]) > torch.arange(qs, qs + n)[:, None], float("-inf"))
                m_new = torch.maximum(m, s.amax(-1))
                p, a = torch.exp(s - m_new[:, None]), torch.exp(m - m_new)
                l, acc, m = a * l + p.sum(-1), a[:, None] * acc + p @ vh[ks:ks + block_k], m_new
            outs.append(acc / l[:, None])
            lses.append(m + torch.log(l))
        return torch.cat(outs), torch.cat(lses)

    out, lse = torch.vmap(head)(q.reshape(-1, T_q, d), k.reshape(-1, T_k, d), v.reshape(-1, T_k, d_v))
    return out.reshape(*lead, T_q, d_v), lse.reshape(*lead, T_q)
''',
    "split_k": '''# style: split-K (flash-decoding): each key range reduced on its own, the partial results merged with merge_stats
def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
    T_q, T_k, scale = q.shape[-2], k.shape[-2], q.shape[-1] ** -0.5
    out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    lse = torch.empty(q.shape[:-1], dtype=q.dtype)
    for qs in range(0, T_q, block_q):
        qt = q[..., qs:qs + block_q, :]
        n = qt.shape[-2]
        m, l = qt.new_full(qt.shape[:-1], float("-inf")), qt.new_zeros(qt.shape[:-1])
        acc = qt.new_zeros(*qt.shape[:-1], v.shape[-1])
        for ks in range(0, min(T_k, qs + n) if causal else T_k, block_k):
            s = qt @ k[..., ks:ks + block_k, :].transpose(-2, -1) * scale
            if causal:
                s = s.masked_fill(torch.arange(ks, ks + s.shape[-1]) > torch.arange(qs, qs + n).unsqueeze(-1), float("-inf"))
            part_max = s.amax(dim=-1)                              # this key range's own statistics
            p = torch.exp(s - torch.where(torch.isneginf(part_max), 0.0, part_max).unsqueeze(-1))
            part_out = p @ v[..., ks:ks + block_k, :]
            new_m, l = merge_stats(m, l, part_max, p.sum(dim=-1))
            acc = acc * torch.exp(m - new_m).unsqueeze(-1) + part_out * torch.exp(part_max - new_m).unsqueeze(-1)
            m = new_m
        out[..., qs:qs + n, :] = acc / l.unsqueeze(-1)
        lse[..., qs:qs + n] = m + torch.log(l)
    return out, lse
''',
    "float64": '''# style: float64 accumulators (tiles cast to double, the result cast back to float32)
def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
    T_q, T_k = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    lse = torch.empty(q.shape[:-1], dtype=q.dtype)
    for qs in range(0, T_q, block_q):
        qe = min(qs + block_q, T_q)
        qt = q[..., qs:qe, :].double()
        m = torch.full(qt.shape[:-1], -math.inf, dtype=torch.float64)
        l = torch.zeros(qt.shape[:-1], dtype=torch.float64)
        acc = torch.zeros(*qt.shape[:-1], v.shape[-1], dtype=torch.float64)
        for ks in range(0, min(T_k, qe) if causal else T_k, block_k):
            ke = min(ks + block_k, T_k)
            s = torch.matmul(qt, k[..., ks:ke, :].double().transpose(-2, -1)) * scale
            if causal and ke - 1 > qs:
                s = s.masked_fill(torch.ones(qe - qs, ke - ks, dtype=torch.bool).triu(qs - ks + 1), -math.inf)
            m_new = torch.maximum(m, s.amax(-1))
            p = torch.exp(s - m_new.unsqueeze(-1))
            alpha = torch.exp(m - m_new)
            l = alpha * l + p.sum(-1)
            acc = alpha.unsqueeze(-1) * acc + torch.matmul(p, v[..., ks:ke, :].double())
            m = m_new
        out[..., qs:qe, :] = (acc / l.unsqueeze(-1)).float()
        lse[..., qs:qe] = (m + l.log()).float()
    return out, lse
''',
    "mixed": '''# style: mixed precision (a bfloat16 0/1 mask per tile, exact; float64 running statistics)
def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
    T_q, T_k, scale = q.shape[-2], k.shape[-2], q.shape[-1] ** -0.5
    outs, lses = [], []
    for qs in range(0, T_q, block_q):
        qt = q[..., qs:qs + block_q, :]
        n = qt.shape[-2]
        m = torch.full(qt.shape[:-1], float("-inf"), dtype=torch.float64)
        l = torch.zeros_like(m)
        acc = torch.zeros(*qt.shape[:-1], v.shape[-1], dtype=torch.float64)
        for ks in range(0, min(T_k, qs + n) if causal else T_k, block_k):
            s = (qt @ k[..., ks:ks + block_k, :].transpose(-2, -1) * scale).double()
            if causal:
                visible = (torch.arange(ks, ks + s.shape[-1]) <= torch.arange(qs, qs + n)[:, None]).to(torch.bfloat16)
                s = s.masked_fill(visible == 0, float("-inf"))
            m_new = torch.maximum(m, s.amax(-1))
            p = torch.exp(s - m_new[..., None])
            alpha = torch.exp(m - m_new)
            l = alpha * l + p.sum(-1)
            acc = alpha[..., None] * acc + p @ v[..., ks:ks + block_k, :].double()
            m = m_new
        outs.append((acc / l[..., None]).to(q.dtype))
        lses.append((m + l.log()).to(q.dtype))
    return torch.cat(outs, -2), torch.cat(lses, -1)
''',
    "positions": '''# style: one vector of positions per call (torch.arange(T) made once, sliced for every tile)
def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
    T_q, T_k = q.shape[-2], k.shape[-2]
    pos = torch.arange(max(T_q, T_k))
    scale = q.shape[-1] ** -0.5
    out, lse = q.new_empty(*q.shape[:-1], v.shape[-1]), q.new_empty(q.shape[:-1])
    for qs in range(0, T_q, block_q):
        qe = min(qs + block_q, T_q)
        m = q.new_full(q.shape[:-2] + (qe - qs,), float("-inf"))
        l, acc = torch.zeros_like(m), q.new_zeros(*m.shape, v.shape[-1])
        for ks in range(0, min(qe, T_k) if causal else T_k, block_k):
            ke = min(ks + block_k, T_k)
            s = q[..., qs:qe, :] @ k[..., ks:ke, :].mT * scale
            if causal:
                s = s.masked_fill(pos[None, ks:ke] > pos[qs:qe, None], float("-inf"))
            m_new = torch.maximum(m, s.amax(-1))
            p = torch.exp(s - m_new[..., None])
            alpha = torch.exp(m - m_new)
            l, acc, m = l * alpha + p.sum(-1), acc * alpha[..., None] + p @ v[..., ks:ke, :], m_new
        out[..., qs:qe, :], lse[..., qs:qe] = acc / l[..., None], m + l.log()
    return out, lse
''',
    "keys_outer": '''# style: the loops the other way round (key blocks outside, every query block's m, l, acc waiting between visits)
def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
    T_q, T_k, scale = q.shape[-2], k.shape[-2], q.shape[-1] ** -0.5
    m = q.new_full(q.shape[:-1], float("-inf"))
    l = q.new_zeros(q.shape[:-1])
    acc = q.new_zeros(*q.shape[:-1], v.shape[-1])
    for ks in range(0, T_k, block_k):
        kt, vt = k[..., ks:ks + block_k, :], v[..., ks:ks + block_k, :]
        for qs in range(0, T_q, block_q):
            qe = min(qs + block_q, T_q)
            if causal and ks >= qe:
                continue                       # every key of this block is in these queries' future
            s = q[..., qs:qe, :] @ kt.transpose(-2, -1) * scale
            if causal:
                s = s.masked_fill(torch.arange(ks, ks + kt.shape[-2]) > torch.arange(qs, qe)[:, None], float("-inf"))
            m_new = torch.maximum(m[..., qs:qe], s.amax(-1))
            p, alpha = torch.exp(s - m_new[..., None]), torch.exp(m[..., qs:qe] - m_new)
            l[..., qs:qe] = l[..., qs:qe] * alpha + p.sum(-1)
            acc[..., qs:qe, :] = acc[..., qs:qe, :] * alpha[..., None] + p @ vt
            m[..., qs:qe] = m_new
    return acc / l[..., None], m + torch.log(l)
''',
    "log_domain": '''# style: FlashAttention-1 paper (the output kept normalised; logsumexp per tile and logaddexp to merge)
def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
    T_q, T_k, scale = q.shape[-2], k.shape[-2], 1 / math.sqrt(q.shape[-1])
    outs, lses = [], []
    for qs in range(0, T_q, block_q):
        qt = q[..., qs:qs + block_q, :]
        n = qt.shape[-2]
        lse = qt.new_full(qt.shape[:-1], float("-inf"))
        o = qt.new_zeros(*qt.shape[:-1], v.shape[-1])
        for ks in range(0, min(T_k, qs + n) if causal else T_k, block_k):
            s = qt @ k[..., ks:ks + block_k, :].transpose(-2, -1) * scale
            if causal:
                s = s.masked_fill(torch.arange(ks, ks + s.shape[-1]) > torch.arange(qs, qs + n)[:, None], float("-inf"))
            new_lse = torch.logaddexp(lse, torch.logsumexp(s, dim=-1))
            o = o * torch.exp(lse - new_lse)[..., None] + torch.exp(s - new_lse[..., None]) @ v[..., ks:ks + block_k, :]
            lse = new_lse
        outs.append(o)
        lses.append(lse)
    return torch.cat(outs, dim=-2), torch.cat(lses, dim=-1)
''',
}
# Derived forwards: one change each to a forward above.
FORWARD["trimmed"] = FORWARD["positions"].replace(
    "# style: one vector of positions per call (torch.arange(T) made once, sliced for every tile)",
    "# style: trimmed diagonal tiles (the keys after a tile's last query are never multiplied)").replace(
    "ke = min(ks + block_k, T_k)", "ke = min(ks + block_k, qe if causal else T_k)")
FORWARD["in_place"] = FORWARD["nanogpt"].replace(
    "# style: nanoGPT (B, nh, T, hs = q.size(); the manual attention branch, one tile at a time)",
    "# style: nanoGPT with in-place accumulators (exp_, mul_, add_ and baddbmm-like updates)").replace(
    "att = torch.exp(att - m_new)", "att = att.sub_(m_new).exp_()").replace(
    "l = c * l + att.sum(dim=-1, keepdim=True)", "l.mul_(c).add_(att.sum(dim=-1, keepdim=True))").replace(
    "yb = c * yb + att @ vb", "yb.mul_(c).add_(att @ vb)")
HF_SIGNATURE = ("def flash_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, block_q: int = 16,"
                " block_k: int = 16) -> Tuple[torch.Tensor, torch.Tensor]:\n")


def hf_forward(extra: str, header: str) -> str:
    """The cs336 forward with a Hugging Face signature (type hints) and ``extra`` lines first in its body."""
    source = re.sub(r"# style: .*\n", "# style: Hugging Face " + header + "\nfrom typing import Optional, Tuple\n\n\n",
                    FORWARD["cs336"], count=1)
    return source.replace("def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):\n", HF_SIGNATURE + extra)


FORWARD["hf_annotation"] = hf_forward(
    "    attention_module: Optional[torch.nn.MultiheadAttention] = None   # the calling module, as HF's attention_interface takes it\n",
    "(type hints; a local annotated with the library class torch.nn.MultiheadAttention)")
FORWARD["hf_assert"] = hf_forward(
    '    assert q.dim() == 4 and q.shape[-1] == k.shape[-1], "query and key must be (batch, heads, seq, head_dim), as '
    'F.scaled_dot_product_attention takes them"\n',
    "(type hints; assert messages that name F.scaled_dot_product_attention)")
FORWARD["hf_docs"] = hf_forward(
    '    """Eager tiled attention: the math of F.scaled_dot_product_attention and torch.softmax, one tile at a time.\n'
    '    Plain PyTorch ops only, so it also runs under torch.compile."""\n'
    "    # torch.compile(flash_forward) would fuse these loops; scaled_dot_product_attention is what we match\n",
    "(docstrings and comments that mention torch.compile, softmax, scaled_dot_product_attention)")
FORWARD["validating"] = FORWARD["nanogpt"].replace(
    "# style: nanoGPT (B, nh, T, hs = q.size(); the manual attention branch, one tile at a time)",
    "# style: inputs checked first, as library code does (a ValueError for NaN or inf in q, k or v)").replace(
    "    B, nh, T, hs = q.size()\n",
    "    for name, t in ((\"q\", q), (\"k\", k), (\"v\", v)):\n"
    "        if not torch.isfinite(t).all():\n"
    "            raise ValueError(f\"{name} holds NaN or inf\")\n"
    "    B, nh, T, hs = q.size()\n", 1)
FORWARD["validating_tiles"] = FORWARD["nanogpt"].replace(
    "# style: nanoGPT (B, nh, T, hs = q.size(); the manual attention branch, one tile at a time)",
    "# style: each tile of q, k and v checked as it is loaded, as a kernel would (a ValueError for NaN or inf)").replace(
    "        tq = qb.size(-2)\n",
    "        tq = qb.size(-2)\n"
    "        if not torch.isfinite(qb).all():\n"
    "            raise ValueError(\"q holds NaN or inf\")\n", 1).replace(
    "            kb, vb = k[:, :, s:s + block_k], v[:, :, s:s + block_k]\n",
    "            kb, vb = k[:, :, s:s + block_k], v[:, :, s:s + block_k]\n"
    "            if not (torch.isfinite(kb).all() and torch.isfinite(vb).all()):\n"
    "                raise ValueError(\"k or v holds NaN or inf\")\n", 1)
