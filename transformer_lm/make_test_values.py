"""Makes the public test values of assignment 02 from a fixed seed.

Run ``python -m transformer_lm.make_test_values`` to rewrite
``transformer_lm/sandboxed/data/test_values.safetensors``; a test runs it again and compares, so the
stored file is always what this script makes. Never edit the file by hand.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from safetensors.torch import save_file

from transformer_lm import reference

SEED = 2024
INPUT_SIZE, HIDDEN, NUM_HEADS = 7, 9, 3
X_SHAPE = (3, 5, INPUT_SIZE)
PATH = Path(__file__).parent / "sandboxed" / "data" / "test_values.safetensors"  # read by sandboxed/test_values.py


def make() -> dict[str, torch.Tensor]:
    """All values, by ``<Group>.<name>``, as the UMass Lowell homework names them."""
    generator = torch.Generator().manual_seed(SEED)

    def uniform(*shape, fan_in):
        bound = 1.0 / math.sqrt(fan_in)
        return (torch.rand(*shape, generator=generator) * 2 - 1) * bound

    x = torch.randn(*X_SHAPE, generator=generator)
    values = {}
    single = {f"{p}_{kind}": uniform(*shape, fan_in=INPUT_SIZE)
              for p in "qkv" for kind, shape in (("weight", (HIDDEN, INPUT_SIZE)), ("bias", (HIDDEN,)))}
    weights = reference.AttentionWeights(single["q_weight"], single["k_weight"], single["v_weight"],
                                         single["q_bias"], single["k_bias"], single["v_bias"])
    with torch.no_grad():
        single["output"] = reference.multi_head_attention(x, weights, 1).output
    values.update({f"SelfAttentionTestValues.{k}": v for k, v in {"x": x, **single}.items()})

    multi = {f"{p}_{kind}": uniform(*shape, fan_in=INPUT_SIZE)
             for p in "qkv" for kind, shape in (("weight", (HIDDEN, INPUT_SIZE)), ("bias", (HIDDEN,)))}
    multi["mix_weight"] = uniform(HIDDEN, HIDDEN, fan_in=HIDDEN)
    multi["mix_bias"] = uniform(HIDDEN, fan_in=HIDDEN)
    weights = reference.AttentionWeights(multi["q_weight"], multi["k_weight"], multi["v_weight"],
                                         multi["q_bias"], multi["k_bias"], multi["v_bias"],
                                         multi["mix_weight"], multi["mix_bias"])
    with torch.no_grad():
        multi["output"] = reference.multi_head_attention(x, weights, NUM_HEADS).output
        multi["output_causal"] = reference.multi_head_attention(x, weights, NUM_HEADS, causal=True).output
    values.update({f"MultiHeadAttentionTestValues.{k}": v for k, v in {"x": x, **multi}.items()})
    return {name: t.clone().contiguous() for name, t in values.items()}


if __name__ == "__main__":
    PATH.parent.mkdir(exist_ok=True)
    save_file(make(), str(PATH), metadata={"made_by": "python -m transformer_lm.make_test_values", "seed": str(SEED)})
    print(f"wrote {PATH}")
