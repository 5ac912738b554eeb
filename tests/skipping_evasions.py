"""Answers to assignment 05 that compute the right values and skip no tile under the causal mask,
each made safe against NaN in another way, so that a key block filled with NaN never reaches an
earlier row: the classes of evasion that kept ``causal_skipping`` and ``backward_memory`` while
those items judged the work by where NaN flowed (``tests/honest_forward.py`` holds the honest
answer that refuses non-finite inputs, which lost both items then). Each is the solution's answer
cell with a few lines changed, so they follow the solution.
"""

from __future__ import annotations

import json
from pathlib import Path

from autograder.reading.cells import grade_id

SOURCE = Path(__file__).resolve().parents[1] / "source" / "05_efficient_attention" / "efficient_attention.ipynb"
KEY_LOOP = "for k_start in range(0, min(T_k, q_stop) if causal else T_k, block_k):"
EVERY_KEY = "for k_start in range(0, T_k, block_k):"
SCALE = "scale = 1.0 / math.sqrt(d)\n"
ACC = "acc = alpha.unsqueeze(-1) * acc + weights @ v[..., k_start:k_stop, :]"
NEW_MAX = "new_max = torch.maximum(row_max, scores.amax(dim=-1))"
DV = "dv[..., k_start:k_stop, :] += weights.transpose(-2, -1) @ do_tile"
D_SCORES = "d_scores = weights * (d_weights - D_tile)"
DQ = "dq[..., q_start:q_stop, :] += d_scores @ k_tile * scale"


def solution_cell(gid: str) -> str:
    """The answer cell ``gid`` of the solution notebook."""
    notebook = json.loads(SOURCE.read_text())
    return "".join(next(c for c in notebook["cells"] if grade_id(c) == gid)["source"])


def edited(source: str, *changes: tuple[str, str]) -> str:
    """``source`` with each ``(old, new)`` made, each ``old`` found exactly once."""
    for old, new in changes:
        if source.count(old) != 1:
            raise ValueError(f"{old!r} occurs {source.count(old)} times")
        source = source.replace(old, new)
    return source


def forward_evasions() -> dict[str, str]:
    """``flash_forward`` cells that visit every key block under the causal mask, NaN-safe."""
    cell = solution_cell("flash_forward")
    return {
        "e1_nan_to_num": edited(cell, (KEY_LOOP, EVERY_KEY),
                                (SCALE, SCALE + "    k, v = torch.nan_to_num(k), torch.nan_to_num(v)\n")),
        "e2_where_on_products": edited(cell, (KEY_LOOP, EVERY_KEY), (ACC, "products = weights @ v[..., k_start:k_stop, :]"
                                       "\n            acc = alpha.unsqueeze(-1) * acc + torch.where(products.isnan(), "
                                       "0.0, products)")),
        "e3_masked_v": edited(cell, (KEY_LOOP, EVERY_KEY), (ACC, "visible = torch.arange(k_start, k_stop).unsqueeze(-1) "
                              "< (q_stop if causal else T_k)\n            acc = alpha.unsqueeze(-1) * acc + weights @ torch.where(visible, "
                              "v[..., k_start:k_stop, :], 0.0)")),
        "e4_tile_tested_for_nan": edited(cell, (KEY_LOOP, EVERY_KEY), (ACC, "products = weights @ v[..., k_start:k_stop, :]"
                                         "\n            if not bool(products.isnan().any()):\n"
                                         "                acc = alpha.unsqueeze(-1) * acc + products")),
        "e5_scores_then_skip": edited(cell, (KEY_LOOP, EVERY_KEY),
                                      (NEW_MAX, "if causal and k_start >= q_stop:\n                continue   # scores "
                                       "made and masked; only the rest skipped\n            " + NEW_MAX)),
    }


def inflated_without_mask() -> str:
    """Every tile computed under the mask, and the call without it made slower on purpose, so that its
    two calls cost about what a skipping answer's do: no figure of time tells it from an honest
    answer that does more work per tile (docs/threat-model.md, not claimed)."""
    return edited(solution_cell("flash_forward"), (KEY_LOOP, EVERY_KEY), (ACC, ACC + "\n            if not causal:\n"
                  "                _ = q_tile @ k[..., k_start:k_stop, :].transpose(-2, -1)"))


def one_block_too_many() -> str:
    """Each query block visits the key block after its end too, 43 of 64 tiles at the timed size
    instead of 36: no more than 4/3 of the honest work at any sizes, which the honest answers' own
    spread covers, so the grader does not claim it (docs/threat-model.md, not claimed)."""
    return edited(solution_cell("flash_forward"), (KEY_LOOP, KEY_LOOP.replace("q_stop", "q_stop + block_k")))


def backward_evasions() -> dict[str, str]:
    """``flash_backward`` cells (with the solution's ``FlashAttention``) that visit every key block
    under the causal mask, NaN-safe in dq's rows."""
    cell = solution_cell("flash_backward")
    return {
        "b1_nan_to_num": edited(cell, (KEY_LOOP, EVERY_KEY),
                                (SCALE, SCALE + "    k, v = torch.nan_to_num(k), torch.nan_to_num(v)\n")),
        "b2_where_on_products": edited(cell, (KEY_LOOP, EVERY_KEY),
                                       (D_SCORES, "d_scores = torch.where(weights > 0, weights * (d_weights - D_tile), "
                                        "0.0)"),
                                       (DQ, "products = d_scores @ k_tile * scale\n            "
                                        "dq[..., q_start:q_stop, :] += torch.where(products.isnan(), 0.0, products)")),
        "b3_dk_dv_every_tile": edited(cell, (KEY_LOOP, EVERY_KEY),
                                      (DQ, "if not causal or k_start < q_stop:   # dq's rows skip; dk and dv do not\n"
                                       "                " + DQ)),
    }
