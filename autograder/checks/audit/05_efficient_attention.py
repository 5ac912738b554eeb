"""Audit bank of assignment 05 (attention that fits in memory): each item's catalogued mistakes,
and correct answers written another way (see autograder/commands/audit.py).

Three answer cells carry six items: ``online_softmax`` (``merge_stats``, ``softmax_stats`` and ``online_softmax``);
``flash_forward`` (its values, ``flash_memory`` and ``causal_skipping``); ``flash_backward`` (the
gradients, and ``backward_memory``). The mistakes of memory and work keep the right values: the
memory cap and the CPU time catch them, and the trace of what ran names them.
"""

SS = "online_softmax"
FF = "flash_forward"
FB = "flash_backward"

# Lines of the solution (each occurs once in its answer cell).
MERGE_TOTAL = "total = sum_a * factor_a + sum_b * factor_b"
PART_MAX = "part_max = part.amax(dim=-1)"
STATS_LOOP = "    for part in blocks:"
STATS_RETURN = "    return maximum, total\n    ### END SOLUTION\n\n\ndef online_softmax"
# softmax_stats on every block at once: the blocks concatenated into whole rows, then one max and one sum
WHOLE_ROWS = """    row = torch.cat(list(blocks), dim=-1)
    maximum = row.amax(dim=-1)
    return maximum, torch.exp(row - maximum.unsqueeze(-1)).sum(dim=-1)
    for part in blocks:"""

# Correct softmax_stats written otherwise: the softmax of online_softmax then rests on them.
LOG_DOMAIN = '''def softmax_stats(blocks):
    lse = torch.tensor(float("-inf"))
    maximum = torch.tensor(float("-inf"))
    for part in blocks:
        lse = torch.logaddexp(lse, torch.logsumexp(part, dim=-1))
        maximum = torch.maximum(maximum, part.amax(dim=-1))
    return maximum, torch.exp(lse - maximum)


def online_softmax(scores, block):
    maximum, total = softmax_stats(torch.split(scores, block, dim=-1))
    return torch.exp(scores - (maximum + torch.log(total)).unsqueeze(-1))
'''
# A tree of pairwise merges: each block's statistics pushed on a stack, and the top two merged while they
# cover as many blocks (a binary counter); what is left merged at the end. At most log2(n) pairs are held.
PAIRWISE = '''def softmax_stats(blocks):
    stack = []
    for part in blocks:
        top = part.amax(dim=-1)
        stats, size = (top, torch.exp(part - top[..., None]).sum(dim=-1)), 1
        while stack and stack[-1][1] == size:
            (m, l), _ = stack.pop()
            stats, size = merge_stats(m, l, *stats), size * 2
        stack.append((stats, size))
    maximum, total = torch.tensor(float("-inf")), torch.tensor(0.0)
    for (m, l), _ in reversed(stack):
        maximum, total = merge_stats(maximum, total, m, l)
    return maximum, total


'''
# Every block's maximum and sum kept (two numbers per row and block), then merged in one step: the
# largest maximum of all of them, each sum rescaled to it.
STACKED = '''def softmax_stats(blocks):
    maxima, sums = [], []
    for part in blocks:
        top = part.amax(dim=-1)
        maxima.append(top)
        sums.append(torch.exp(part - top.unsqueeze(-1)).sum(dim=-1))
    maxima, sums = torch.stack(maxima), torch.stack(sums)          # (blocks, ...)
    maximum = maxima.amax(dim=0)
    return maximum, (sums * torch.exp(maxima - maximum)).sum(dim=0)


'''
KEY_LOOP = "for k_start in range(0, min(T_k, q_stop) if causal else T_k, block_k):"
SCORES = "scores = q_tile @ k[..., k_start:k_stop, :].transpose(-2, -1) * scale"
NEW_MAX = "new_max = torch.maximum(row_max, scores.amax(dim=-1))"
ROW_SUM = "row_sum = alpha * row_sum + weights.sum(dim=-1)"
ACC = "acc = alpha.unsqueeze(-1) * acc + weights @ v[..., k_start:k_stop, :]"
LSE = "lse[..., q_start:q_stop] = row_max + torch.log(row_sum)"
MASK_IF = "if causal and k_stop - 1 > q_start:"
MASK_FILL = 'scores = scores.masked_fill(cols > rows, float("-inf"))               # (B, H, bq, bk)\n' \
            "            new_max"
BACKWARD_SCORES = "scores = q_tile @ k_tile.transpose(-2, -1) * scale"
BACKWARD_MASK = 'scores = scores.masked_fill(cols > rows, float("-inf"))               # (B, H, bq, bk)\n' \
                "            weights"
D_SCORES = "d_scores = weights * (d_weights - D_tile)"
DK = "dk[..., k_start:k_stop, :] += d_scores.transpose(-2, -1) @ q_tile * scale"
SAVE = "ctx.save_for_backward(q, k, v, out, lse)"
SHAPES = "    *batch, T_q, d = q.shape\n"
FULL_ROW_MAX = """row = q_tile @ k.transpose(-2, -1) * scale                          # (B, H, bq, T_k)
            if causal:
                row = row.masked_fill(torch.arange(T_k) > torch.arange(q_start, q_stop).unsqueeze(-1), float("-inf"))
            new_max = torch.maximum(row_max, row.amax(dim=-1))"""

# The solution's forward that, when {when} holds, also keeps every tile of scores in one (B, H, T_q, T_k)
# tensor for the whole call: the whole matrix in one mode of the call only.
KEPT_WHEN = (SHAPES, SHAPES + "    kept = q.new_zeros(*q.shape[:-1], k.shape[-2]) if {when} else None\n"), \
    (NEW_MAX, "if kept is not None:\n                kept[..., q_start:q_stop, k_start:k_stop] = scores\n"
              "            " + NEW_MAX)
MASK_PER_CALL = (SHAPES, SHAPES + "    future = torch.ones(T_q, k.shape[-2], dtype=torch.bool).triu(1) if causal "
                                  "else None\n"), \
    (MASK_FILL, MASK_FILL.replace("cols > rows", "future[q_start:q_stop, k_start:k_stop]"))
WEIGHTS_WITHOUT_MASK = (SAVE, SAVE + "\n        if not causal:\n            ctx.weights = torch.exp("
                              "q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) - lse.unsqueeze(-1))")


def kept_when(answer, when: str) -> str:
    """The forward of :data:`KEPT_WHEN`, holding every score when ``when`` holds."""
    return answer(FF, *((old, new.replace("{when}", when)) for old, new in KEPT_WHEN))


# The forward of the example: every key block concatenated, one softmax (written by hand)
# over the whole row. Right values, (T_q, T_k) memory.
CONCATENATED = '''def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
    scale = 1.0 / math.sqrt(q.shape[-1])
    blocks = [q @ k[..., s:s + block_k, :].transpose(-2, -1) * scale for s in range(0, k.shape[-2], block_k)]
    scores = torch.cat(blocks, dim=-1)                                  # (B, H, T_q, T_k)
    if causal:
        future = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    top = scores.amax(dim=-1, keepdim=True)
    weights = torch.exp(scores - top)
    total = weights.sum(dim=-1, keepdim=True)
    return (weights / total) @ v, (top + torch.log(total)).squeeze(-1)
'''

# A forward in two passes over the key blocks: the row maxima first, then the sums and outputs
# against those (no rescaling needed). Right, and tiled.
TWO_PASS = '''def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
    scale = q.shape[-1] ** -0.5
    T_q, T_k = q.shape[-2], k.shape[-2]
    outs, lses = [], []
    for qs in range(0, T_q, block_q):
        qt = q[..., qs:qs + block_q, :]
        rows = torch.arange(qs, qs + qt.shape[-2]).unsqueeze(-1)
        starts = range(0, min(T_k, qs + qt.shape[-2]) if causal else T_k, block_k)

        def tile(ks):
            s = torch.einsum("bhqd,bhkd->bhqk", qt, k[..., ks:ks + block_k, :]) * scale
            if causal:
                s = torch.where(torch.arange(ks, ks + s.shape[-1]) > rows, float("-inf"), s)
            return s

        top = torch.stack([tile(ks).amax(dim=-1) for ks in starts]).amax(dim=0)   # first pass
        total = torch.zeros_like(top)
        acc = torch.zeros(*qt.shape[:-1], v.shape[-1], dtype=q.dtype)
        for ks in starts:                                                          # second pass
            w = torch.exp(tile(ks) - top.unsqueeze(-1))
            total = total + w.sum(dim=-1)
            acc = acc + torch.einsum("bhqk,bhkd->bhqd", w, v[..., ks:ks + block_k, :])
        outs.append(acc / total.unsqueeze(-1))
        lses.append(top + total.log())
    return torch.cat(outs, dim=-2), torch.cat(lses, dim=-1)
'''

# A forward built on merge_stats, in float64 inside, with a triangular mask per tile.
WITH_MERGE = '''def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
    q64, k64, v64 = q.double(), k.double(), v.double()
    scale = 1.0 / math.sqrt(q.shape[-1])
    out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=torch.float64)
    lse = torch.empty(q.shape[:-1], dtype=torch.float64)
    T_q, T_k = q.shape[-2], k.shape[-2]
    q_start = 0
    while q_start < T_q:
        q_stop = min(q_start + block_q, T_q)
        m = torch.full(q.shape[:-2] + (q_stop - q_start,), float("-inf"), dtype=torch.float64)
        l = torch.zeros_like(m)
        acc = torch.zeros(*m.shape, v.shape[-1], dtype=torch.float64)
        last = min(T_k, q_stop) if causal else T_k
        for k_start in range(0, last, block_k):
            k_stop = min(k_start + block_k, T_k)
            s = torch.matmul(q64[..., q_start:q_stop, :], k64[..., k_start:k_stop, :].mT) * scale
            if causal:
                keep = torch.ones(q_stop - q_start, k_stop - k_start, dtype=torch.bool).tril(q_start - k_start)
                s = s.masked_fill(~keep, -math.inf)
            tile_max = s.max(dim=-1).values
            new_m, _ = merge_stats(m, l, tile_max, torch.zeros_like(l))
            p = torch.exp(s - new_m[..., None])
            _, l = merge_stats(m, l, new_m, p.sum(dim=-1))
            acc = acc * torch.exp(m - new_m)[..., None] + torch.matmul(p, v64[..., k_start:k_stop, :])
            m = new_m
        out[..., q_start:q_stop, :] = acc / l[..., None]
        lse[..., q_start:q_stop] = m + l.log()
        q_start = q_stop
    return out.to(q.dtype), lse.to(q.dtype)
'''

# The backward with the key blocks outside and the query blocks inside (FlashAttention's first
# order): dk and dv of a key block are summed in registers, dq accumulated across key blocks.
KEYS_OUTSIDE = '''def flash_backward(q, k, v, out, lse, grad_out, causal=False, block_q=16, block_k=16):
    T_q, d = q.shape[-2:]
    T_k = k.shape[-2]
    scale = d ** -0.5
    dq = torch.zeros_like(q)
    dk_parts, dv_parts = [], []
    D = (grad_out * out).sum(dim=-1, keepdim=True)
    for k_start in range(0, T_k, block_k):
        kt, vt = k[..., k_start:k_start + block_k, :], v[..., k_start:k_start + block_k, :]
        dk_t, dv_t = torch.zeros_like(kt), torch.zeros_like(vt)
        first = (k_start // block_q) * block_q if causal else 0
        for q_start in range(first, T_q, block_q):
            qt = q[..., q_start:q_start + block_q, :]
            s = qt @ kt.transpose(-2, -1) * scale
            if causal:
                rows = torch.arange(q_start, q_start + qt.shape[-2]).unsqueeze(-1)
                s = s.masked_fill(torch.arange(k_start, k_start + kt.shape[-2]) > rows, float("-inf"))
            p = torch.exp(s - lse[..., q_start:q_start + block_q].unsqueeze(-1))
            do = grad_out[..., q_start:q_start + block_q, :]
            dv_t = dv_t + p.transpose(-2, -1) @ do
            ds = p * (do @ vt.transpose(-2, -1) - D[..., q_start:q_start + block_q, :]) * scale
            dq[..., q_start:q_start + block_q, :] += ds @ kt
            dk_t = dk_t + ds.transpose(-2, -1) @ qt
        dk_parts.append(dk_t)
        dv_parts.append(dv_t)
    return dq, torch.cat(dk_parts, dim=-2), torch.cat(dv_parts, dim=-2)


'''


def mask_and_scale(answer, grade_id, scores, mask):
    """The causal mask inside the tiles off by one either way, and the scores unscaled, in the
    forward's cell or the backward's (which recomputes the same tiles). The mask that hides the
    diagonal is applied to every tile, as the notebook's picture builds it: under the solution's
    test, which skips the tiles whose keys all lie at or before the first query, it would still
    show a query its own key where a tile ends on it."""
    return {
        "tile_mask_hides_diagonal": answer(grade_id, (MASK_IF, "if causal:"),
                                           (mask, mask.replace("cols > rows", "cols >= rows"))),
        "tile_mask_leaks_next_token": answer(grade_id, (mask, mask.replace("cols > rows", "cols > rows + 1"))),
        "tile_no_scaling": answer(grade_id, (scores, scores.replace(" * scale", ""))),
    }


def mutants(answer):
    return {
        "online_softmax": {
            "total_not_rescaled": answer(SS, (MERGE_TOTAL, "total = sum_a + sum_b * factor_b")),
            "empty_merge_nan": answer(SS, (MERGE_TOTAL, "total = sum_a * torch.exp(max_a - maximum) "
                                                        "+ sum_b * torch.exp(max_b - maximum)")),
            "global_maximum": answer(SS, (PART_MAX, "part_max = part.amax().expand(part.shape[:-1])")),
            "full_row_reduction": answer(SS, (STATS_LOOP, WHOLE_ROWS)),
        },
        "flash_forward": {
            "output_not_rescaled": answer(FF, (ACC, "acc = acc + weights @ v[..., k_start:k_stop, :]")),
            "total_not_rescaled": answer(FF, (ROW_SUM, "row_sum = row_sum + weights.sum(dim=-1)")),
            "global_maximum": answer(FF, (NEW_MAX, "new_max = torch.maximum(row_max, scores.amax())")),
            "lse_without_max": answer(FF, (LSE, "lse[..., q_start:q_stop] = torch.log(row_sum)")),
            "causal_skip_misses_diagonal": answer(FF, (KEY_LOOP, KEY_LOOP.replace("q_stop", "q_start"))),
            **mask_and_scale(answer, FF, SCORES, MASK_FILL),
        },
        "flash_memory": {
            "full_score_matrix": answer(FF, (SCORES, "scores = (q @ k.transpose(-2, -1) * scale)"
                                                     "[..., q_start:q_stop, k_start:k_stop]")),
            # each query's maximum over its whole row of (visible) keys, recomputed for every tile
            "full_row_reduction": answer(FF, (NEW_MAX, FULL_ROW_MAX)),
            # the whole matrix in one mode of the call: each is capped in every mode, at two lengths
            "full_score_matrix: when causal": kept_when(answer, "causal"),
            "full_score_matrix: with autograd off": kept_when(answer, "not torch.is_grad_enabled()"),
            "full_score_matrix: below 8192 queries": kept_when(answer, "q.shape[-2] < 8192"),
            # a forward mistake: it costs flash_memory alone (backward_memory is graded on the course's forward)
            "full_score_matrix: a T x T causal mask per call": answer(FF, *MASK_PER_CALL),
        },
        "causal_skipping": {
            "future_blocks_computed": answer(FF, (KEY_LOOP, "for k_start in range(0, T_k, block_k):")),
        },
        "flash_backward": {
            "delta_from_tile": answer(FB, (D_SCORES, "d_scores = weights * (d_weights - (weights * d_weights)"
                                                     ".sum(dim=-1, keepdim=True))")),
            "delta_left_out": answer(FB, (D_SCORES, "d_scores = weights * d_weights")),
            "dk_unscaled": answer(FB, (DK, "dk[..., k_start:k_stop, :] += d_scores.transpose(-2, -1) @ q_tile")),
            **mask_and_scale(answer, FB, BACKWARD_SCORES, BACKWARD_MASK),
        },
        "backward_memory": {
            "backward_full_matrix": answer(FB, (BACKWARD_SCORES, "scores = (q @ k.transpose(-2, -1) * scale)"
                                                                 "[..., q_start:q_stop, k_start:k_stop]")),
            "saves_more_than_needed": answer(FB, (SAVE, SAVE + "\n        ctx.scores = q @ k.transpose(-2, -1)")),
            "saves_more_than_needed: without the mask": answer(FB, WEIGHTS_WITHOUT_MASK),
            "future_blocks_computed": answer(FB, (KEY_LOOP, "for k_start in range(0, T_k, block_k):")),
        },
    }


def alternatives(answer):
    forward = {
        "einsum": answer(FF, (SCORES, 'scores = torch.einsum("bhqd,bhkd->bhqk", q_tile, k[..., k_start:k_stop, :]) '
                                      "* scale"),
                         (ACC, 'acc = alpha.unsqueeze(-1) * acc + torch.einsum("bhqk,bhkd->bhqd", weights, '
                               "v[..., k_start:k_stop, :])")),
        "two passes": answer(FF, (answer(FF), TWO_PASS)),
        "merge_stats, float64, tril mask, while loop": answer(FF, (answer(FF), WITH_MERGE)),
        "mask with where, on every tile": answer(FF, (MASK_IF, "if causal:"),
                                                 (MASK_FILL, 'scores = torch.where(cols > rows, float("-inf"), scores)'
                                                             "\n            new_max")),
        "refuses non-finite inputs": answer(FF, (SHAPES, "    if not all(bool(torch.isfinite(t).all()) for t in (q, k, v)):\n"
                                                 '        raise ValueError("q, k and v must be finite")\n' + SHAPES)),
    }
    by_item = {
        "online_softmax": {
            "split and log-sum-exp": answer(SS, ("def softmax_stats" + answer(SS).split("def softmax_stats")[1],
                                                 LOG_DOMAIN)),
            "a tree of pairwise merges": answer(SS, (answer(SS).split("def softmax_stats")[1].split(
                "def online_softmax")[0], PAIRWISE.removeprefix("def softmax_stats"))),
            "every block's statistics merged in one step": answer(SS, (answer(SS).split("def softmax_stats")[1].split(
                "def online_softmax")[0], STACKED.removeprefix("def softmax_stats"))),
            "float64 running statistics": answer(SS, ("maximum, total = torch.tensor(float(\"-inf\")), torch.tensor(0.0)",
                                                      "maximum, total = torch.tensor(float(\"-inf\"), dtype=torch.float64), "
                                                      "torch.tensor(0.0, dtype=torch.float64)"),
                                                 ("for part in blocks:", "for part in (b.double() for b in blocks):"),
                                                 (STATS_RETURN, STATS_RETURN.replace("return maximum, total",
                                                                                     "return maximum.float(), total.float()"))),
            "float64 inside": answer(SS, ("return torch.exp(scores - maximum.unsqueeze(-1)) / total.unsqueeze(-1)",
                                          "return (torch.exp(scores.double() - maximum.double().unsqueeze(-1)) / "
                                          "total.double().unsqueeze(-1)).to(scores.dtype)")),
            "nan_to_num in merge": answer(SS, ("factor_a = torch.where(torch.isneginf(max_a), 0.0, torch.exp(max_a - "
                                               "maximum))", "factor_a = torch.exp(max_a - maximum).nan_to_num(0.0)"),
                                          ("factor_b = torch.where(torch.isneginf(max_b), 0.0, torch.exp(max_b - "
                                           "maximum))", "factor_b = torch.exp(max_b - maximum).nan_to_num(0.0)")),
        },
        "flash_forward": forward,
        "flash_memory": {label: forward[label] for label in ("einsum", "two passes", "merge_stats, float64, tril mask, "
                                                                                      "while loop")},
        "causal_skipping": {label: forward[label] for label in ("two passes", "mask with where, on every tile",
                                                                "merge_stats, float64, tril mask, while loop",
                                                                "refuses non-finite inputs")},
        "flash_backward": {
            "einsum": answer(FB, (BACKWARD_SCORES, 'scores = torch.einsum("bhqd,bhkd->bhqk", q_tile, k_tile) * scale')),
            "D from the output per tile": answer(FB, ("D = (grad_out * out).sum(dim=-1)", "D = None"),
                                                 ("D_tile = D[..., q_start:q_stop].unsqueeze(-1)",
                                                  "D_tile = (do_tile * out[..., q_start:q_stop, :]).sum(-1, keepdim=True)")),
            "key blocks outside": answer(FB, (answer(FB).split("class FlashAttention")[0], KEYS_OUTSIDE)),
        },
        "backward_memory": {
            "einsum": answer(FB, (BACKWARD_SCORES, 'scores = torch.einsum("bhqd,bhkd->bhqk", q_tile, k_tile) * scale')),
            "D from the output per tile": answer(FB, ("D = (grad_out * out).sum(dim=-1)", "D = None"),
                                                 ("D_tile = D[..., q_start:q_stop].unsqueeze(-1)",
                                                  "D_tile = (do_tile * out[..., q_start:q_stop, :]).sum(-1, keepdim=True)")),
            "key blocks outside": answer(FB, (answer(FB).split("class FlashAttention")[0], KEYS_OUTSIDE)),
            "a copy of q saved": answer(FB, (SAVE, "ctx.save_for_backward(q * 1.0, k, v, out, lse)")),
        },
    }
    return {item: list(labelled.items()) for item, labelled in by_item.items()}


KNOWN_GAPS = {}


def library(answer):
    return {
        "online_softmax": [
            ("torch.softmax by getattr", answer(SS, ("return torch.exp(scores - maximum.unsqueeze(-1)) / total.unsqueeze(-1)",
                                                     'return getattr(torch, "soft" + "max")(scores, dim=-1)'))),
        ],
        "flash_forward": [
            ("scaled_dot_product_attention", answer(FF, ("    return out, lse\n",
                                                         "    out = torch.nn.functional.scaled_dot_product_attention("
                                                         "q, k, v, is_causal=causal)\n    return out, lse\n"))),
        ],
    }
