"""Answers to assignment 05 that compute the right values and hold a whole T x T matrix only in some
mode of the call: with the causal mask, with autograd on, on inputs that require grad, below a
length, and in the backward without the mask; and the mistake of one boolean T x T causal mask per
call. Each kept its memory point while the memory cap judged only the forward without the mask and
the backward with it, both at T = 8192 and without autograd. Each is the solution's answer cell
with a few lines changed.
"""

from __future__ import annotations

from skipping_evasions import DV, edited, solution_cell

SHAPES = "    *batch, T_q, d = q.shape\n"
SCORES = "scores = q_tile @ k[..., k_start:k_stop, :].transpose(-2, -1) * scale   # (B, H, bq, bk)\n"
TILE_MASK = "scores = scores.masked_fill(cols > rows, float(\"-inf\"))               # (B, H, bq, bk)\n" \
            "            new_max"
SAVE = "ctx.save_for_backward(q, k, v, out, lse)\n"
BACKWARD_START = "    T_q, d = q.shape[-2:]\n"

WHOLE_BACKWARD = '''    if {when}:   # the whole matrix at once
        scale = 1.0 / math.sqrt(q.shape[-1])
        scores = q @ k.transpose(-2, -1) * scale                                # (B, H, T_q, T_k)
        if causal:
            scores = scores.masked_fill(torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
        weights = torch.exp(scores - lse.unsqueeze(-1))
        d_scores = weights * (grad_out @ v.transpose(-2, -1) - (grad_out * out).sum(dim=-1, keepdim=True))
        return d_scores @ k * scale, d_scores.transpose(-2, -1) @ q * scale, weights.transpose(-2, -1) @ grad_out
'''


def kept_when(condition: str) -> str:
    """The solution's ``flash_forward`` that, when ``condition`` holds, also keeps every tile of
    scores in one (B, H, T_q, T_k) tensor for the whole call."""
    return edited(solution_cell("flash_forward"),
                  (SHAPES, SHAPES + f"    kept = q.new_zeros(*q.shape[:-1], k.shape[-2]) if {condition} else None\n"),
                  (SCORES, SCORES + "            if kept is not None:\n"
                                    "                kept[..., q_start:q_stop, k_start:k_stop] = scores\n"))


def forward_evasions() -> dict[str, str]:
    """``flash_forward`` cells that hold every score in one mode of the call, or a T x T mask."""
    return {
        "m1_whole_when_causal": kept_when("causal"),
        "m2_whole_with_autograd_on": kept_when("torch.is_grad_enabled()"),
        "m3_whole_when_inputs_require_grad": kept_when("q.requires_grad"),
        "m4_whole_when_causal_with_autograd_on": kept_when("causal and torch.is_grad_enabled()"),
        "m5_whole_below_the_documented_length": kept_when("q.shape[-2] < 8192"),
        "m6_causal_mask_per_call": edited(
            solution_cell("flash_forward"),
            (SHAPES, SHAPES + "    future = torch.ones(T_q, k.shape[-2], dtype=torch.bool).triu(1) if causal "
                              "else None   # (T_q, T_k)\n"),
            (TILE_MASK, TILE_MASK.replace("cols > rows", "future[q_start:q_stop, k_start:k_stop]"))),
    }


def backward_evasions() -> dict[str, str]:
    """``flash_backward`` cells (with ``FlashAttention``) that hold a whole matrix only without the
    mask, or below the documented length."""
    cell = solution_cell("flash_backward")
    return {
        "m7_ctx_keeps_the_weights_without_mask": edited(cell, (SAVE, SAVE + "        if not causal:\n"
                                                         "            ctx.weights = torch.exp(q @ k.transpose(-2, -1) "
                                                         "/ math.sqrt(q.shape[-1]) - lse.unsqueeze(-1))\n")),
        "m8_backward_whole_without_mask": edited(cell, (BACKWARD_START, WHOLE_BACKWARD.format(when="not causal")
                                                        + BACKWARD_START)),
        # tiled, so its work is the solution's: the weights of every tile kept in one (B, H, T_q, T_k) tensor
        "m9_backward_keeps_every_tile_below_the_documented_length": edited(
            cell, (BACKWARD_START, BACKWARD_START + "    kept = q.new_zeros(*q.shape[:-1], k.shape[-2]) if q.shape[-2] "
                   "< 8192 else None\n"),
            (DV, "if kept is not None:\n                kept[..., q_start:q_stop, k_start:k_stop] = weights\n"
                 "            " + DV)),
    }
