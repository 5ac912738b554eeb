"""Audit bank of assignment 06 (attention in today's decoders): each item's catalogued mistakes,
and correct answers written another way (see autograder/commands/audit.py).

The attention layer builds on ``apply_rope`` and ``sliding_window_mask``, and padded generation on
the layer, so a mutant of an earlier answer must cost its own item only. Counting positions from
the padding changes no generated token under RoPE: the check of the positions names it. A mask
made for the first queries after a cache shows only where the layer makes its own mask, which
generation never asks of it (it always passes one). A cache's size that counts the keys only is
half the size, which ``kv_cache_bytes`` names.
"""

ROPE, WINDOW, GQA, PADDED, BYTES = ("apply_rope", "sliding_window_mask", "grouped_query_attention",
                                    "padded_generation", "kv_cache_bytes")

SPEEDS = "speeds = base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)"
WINDOW_LINE = "return (key_index <= query_index) & (key_index > query_index - window)"
K_HEADS = "k_heads = k.repeat_interleave(group, dim=1)"
V_HEADS = "v_heads = v.repeat_interleave(group, dim=1)"
EMPTY = "empty = torch.isneginf(scores).all(dim=-1, keepdim=True)"
CAUSAL = "attn_mask = torch.tril(ones, diagonal=T_k - T)"
LAYER_WINDOW = "attn_mask = sliding_window_mask(T, T_k, self.window).to(x.device)"
FIRST_QUERIES = (CAUSAL, "attn_mask = torch.tril(ones)")   # the causal mask of the first queries after a cache
SOFTMAX = "weights = torch.softmax(scores.masked_fill(empty, 0.0), dim=-1)"
ZEROS = "weights = weights.masked_fill(empty, 0.0)"
POSITIONS = "return (attention_mask.long().cumsum(dim=-1) - 1).clamp(min=0)"
PAD_MASK = "return causal & attention_mask.bool()[:, None, None, :]"
NEXT_POSITIONS = "positions = positions[:, -1:] + 1"
CACHED_CALL = "logits, caches = model(next_tokens, positions, padded_attention_mask(attention_mask, 1), caches)"
LAST_STEP = ("        if step == max_new_tokens - 1:\n"
             "            break                                                        "
             "# the last token needs no forward pass\n")
# The whole padded batch run again at every step, without the caches.
RERUN = ((NEXT_POSITIONS, "idx = torch.cat((idx, next_tokens), dim=-1)"),
         (CACHED_CALL, "logits, caches = model(idx, padded_positions(attention_mask), "
                       "padded_attention_mask(attention_mask, idx.shape[-1]))"))
BYTES_LINE = "return vectors * head_dim * dtype.itemsize"

INTERLEAVED = '''def apply_rope(x, positions, base=10000.0):
    d = x.shape[-1]
    angles = positions.double().unsqueeze(-1) * base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    if positions.dim() == 2:
        angles = angles.unsqueeze(1)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)
'''

# The same rotation written on each half, in float32, and as complex numbers.
HALVES = '''def apply_rope(x, positions, base=10000.0):
    half = x.shape[-1] // 2
    inverse = 1.0 / base ** (torch.arange(half, dtype=torch.float32) * 2 / x.shape[-1])
    angles = positions.float()[..., None] * inverse
    if positions.dim() == 2:
        angles = angles[:, None]
    cos, sin = torch.cos(angles), torch.sin(angles)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
'''
COMPLEX = '''def apply_rope(x, positions, base=10000.0):
    half = x.shape[-1] // 2
    angles = torch.outer(positions.flatten().double(), base ** (-torch.arange(half).double() / half))
    angles = angles.view(*positions.shape, half)
    if positions.dim() == 2:
        angles = angles.unsqueeze(1)
    turned = torch.complex(x[..., :half].double(), x[..., half:].double()) * torch.polar(torch.ones_like(angles), angles)
    return torch.cat([turned.real, turned.imag], dim=-1).to(x.dtype)
'''
# Llama's repeat_kv in Hugging Face transformers: expand a new axis, then merge it into the heads.
EXPAND = ("k_heads = k[:, :, None].expand(-1, -1, group, -1, -1).reshape(B, self.n_heads, T_k, self.head_dim)",
          "v_heads = v[:, :, None].expand(-1, -1, group, -1, -1).reshape(B, self.n_heads, T_k, self.head_dim)")


def mutants(answer):
    return {
        ROPE: {
            "rope_interleaved": answer(ROPE, (answer(ROPE), INTERLEAVED)),
            "rope_exponent_off": answer(ROPE, (SPEEDS, SPEEDS.replace("torch.arange(0, d, 2,", "torch.arange(d // 2,"))),
        },
        WINDOW: {
            "window_off_by_one": answer(WINDOW, (WINDOW_LINE, WINDOW_LINE.replace("- window)", "- window - 1)"))),
        },
        GQA: {
            "kv_heads_repeated_not_interleaved": answer(GQA, (K_HEADS, "k_heads = k.repeat(1, group, 1, 1)"),
                                                        (V_HEADS, "v_heads = v.repeat(1, group, 1, 1)")),
            "empty_rows_nan": answer(GQA, (SOFTMAX, "weights = torch.softmax(scores, dim=-1)"), (ZEROS, "pass")),
            "cache_causal_first_queries": answer(GQA, FIRST_QUERIES),
            "cache_window_first_queries": answer(GQA, (LAYER_WINDOW, LAYER_WINDOW.replace(
                "(T, T_k, self.window)", "(T_k, T_k, self.window)[:T]"))),
        },
        PADDED: {
            "positions_from_padding": answer(PADDED, (POSITIONS, "return torch.arange(attention_mask.shape[-1])"
                                                                 ".expand(attention_mask.shape)")),
            "pads_attended": answer(PADDED, (PAD_MASK, "return causal.expand(attention_mask.shape[0], 1, -1, -1)")),
            "cache_positions_not_offset_rope": answer(PADDED, (NEXT_POSITIONS,
                                                               "positions = torch.zeros_like(positions[:, -1:])")),
            "generation_reruns_sequence": answer(PADDED, *RERUN),
        },
        BYTES: {
            "cache_keys_only": answer(BYTES, ("vectors = 2 * n_layers", "vectors = n_layers")),
        },
    }


def alternatives(answer):
    return {
        ROPE: [
            ("halves, float32", answer(ROPE, (answer(ROPE), HALVES))),
            ("complex numbers", answer(ROPE, (answer(ROPE), COMPLEX))),
            ("no device argument", answer(ROPE, (SPEEDS, "speeds = base ** (-torch.arange(0, d, 2).double() / d)"))),
        ],
        WINDOW: [
            ("tril and triu", answer(WINDOW, (WINDOW_LINE, "ones = torch.ones(query_len, key_len, dtype=torch.bool)\n"
                                                           "    return torch.tril(ones, key_len - query_len) & "
                                                           "torch.triu(ones, key_len - query_len - window + 1)"))),
            ("distance", answer(WINDOW, (WINDOW_LINE, "distance = query_index - key_index\n"
                                                      "    return (distance >= 0) & (distance < window)"))),
            ("loops", answer(WINDOW, (WINDOW_LINE, "return torch.tensor([[0 <= key_len - query_len + i - j < window "
                                                   "for j in range(key_len)] for i in range(query_len)])"))),
        ],
        GQA: [
            ("expand and reshape", answer(GQA, (K_HEADS, EXPAND[0]), (V_HEADS, EXPAND[1]))),
            ("index with h // group", answer(GQA, (K_HEADS, "k_heads = k[:, torch.arange(self.n_heads) // group]"),
                                             (V_HEADS, "v_heads = v[:, torch.arange(self.n_heads) // group]"))),
            ("nan_to_num after the softmax", answer(GQA, (SOFTMAX, "weights = torch.softmax(scores, dim=-1)"),
                                                    (ZEROS, "weights = torch.nan_to_num(weights, nan=0.0)"))),
            ("additive mask", answer(GQA, ('scores = scores.masked_fill(~attn_mask, float("-inf"))',
                                           'scores = scores + torch.zeros_like(scores).masked_fill(~attn_mask, '
                                           'float("-inf"))'))),
            ("causal mask by index", answer(GQA, (CAUSAL, "attn_mask = torch.arange(T_k, device=x.device) <= "
                                                          "torch.arange(T_k - T, T_k, device=x.device)[:, None]"))),
            ("the last rows of the square window", answer(GQA, (LAYER_WINDOW, LAYER_WINDOW.replace(
                "(T, T_k, self.window)", "(T_k, T_k, self.window)[T_k - T:]")))),
        ],
        PADDED: [
            ("positions with where", answer(PADDED, (POSITIONS, "counted = attention_mask.long().cumsum(-1) - 1\n"
                                                                "    return torch.where(attention_mask.bool(), counted, "
                                                                "torch.zeros_like(counted))"))),
            ("mask with unsqueeze", answer(PADDED, (PAD_MASK, "return causal.unsqueeze(0).unsqueeze(0) & "
                                                              "attention_mask.bool().unsqueeze(1).unsqueeze(2)"))),
            ("next positions from the mask", answer(PADDED, (NEXT_POSITIONS, "positions = padded_positions(torch.cat("
                                                                             "(attention_mask, torch.ones_like("
                                                                             "next_tokens)), dim=-1))[:, -1:]"))),
            ("a forward pass after the last token too", answer(PADDED, (LAST_STEP, ""))),
            ("the caches passed as a new list", answer(PADDED, (CACHED_CALL, CACHED_CALL.replace(
                "caches)", "[(k, v) for k, v in caches])")))),
        ],
        BYTES: [
            ("bits", answer(BYTES, (BYTES_LINE, "return vectors * head_dim * torch.finfo(dtype).bits // 8"))),
            ("element_size", answer(BYTES, (BYTES_LINE, "return vectors * head_dim * torch.empty(0, dtype=dtype)"
                                                        ".element_size()"))),
            ("math.prod", answer(BYTES, (BYTES_LINE, "return math.prod((2, n_layers, n_kv_heads, seq_len, batch, "
                                                     "head_dim, dtype.itemsize))"))),
        ],
    }


KNOWN_GAPS = {}


def library(answer):
    return {
        GQA: [
            ("F.scaled_dot_product_attention", answer(GQA, (
                "out = (weights @ v_heads)",
                "out = F.scaled_dot_product_attention(q, k_heads, v_heads, attn_mask=attn_mask)"))),
        ],
    }
