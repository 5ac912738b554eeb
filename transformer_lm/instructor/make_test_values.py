"""Makes the values that the visible checks judge against, from fixed seeds, with the reference.

Run ``python -m transformer_lm.instructor.make_test_values`` (the instructor, on the trusted side) to rewrite

* ``transformer_lm/sandboxed/data/test_values.safetensors``: assignment 02's public test values,
  as the UMass Lowell homework names them;
* ``transformer_lm/data/visible_checks.safetensors``: every visible check of the six notebooks
  (:mod:`transformer_lm.instructor.visible_checks`): its inputs, what the reference gives and what each
  catalogued mistake gives on them, which :mod:`transformer_lm.checks` judges against.

A test runs it again and compares at a tolerance, so the stored files are always what this script
makes. Never edit them by hand.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from safetensors.torch import save_file

from transformer_lm import checks, stored
from transformer_lm.instructor import reference, visible_checks

SEED = 2024
INPUT_SIZE, HIDDEN, NUM_HEADS = 7, 9, 3
X_SHAPE = (3, 5, INPUT_SIZE)
PATH = Path(__file__).parent.parent / "sandboxed" / "data" / "test_values.safetensors"  # read by sandboxed/test_values.py
MADE_BY = "python -m transformer_lm.instructor.make_test_values"
LIMIT = 5 * 2**20
"""The most bytes the stored values of all six assignments may take together."""


def make() -> dict[str, torch.Tensor]:
    """All public test values, by ``<Group>.<name>``, as the UMass Lowell homework names them."""
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


def write(test_values: Path = PATH, visible: Path = checks.STORED) -> None:
    """Writes both files, readable by every user; refuses when together they pass :data:`LIMIT`."""
    test_values.parent.mkdir(parents=True, exist_ok=True)
    visible.parent.mkdir(parents=True, exist_ok=True)
    save_file(make(), str(test_values), metadata={"made_by": MADE_BY, "seed": str(SEED)})
    stored.save(visible_checks.make(), visible, made_by=MADE_BY)
    for path in (test_values, visible):
        path.chmod(0o644)  # safetensors writes 0600; the grader, often another user (a container's), reads them
    size = test_values.stat().st_size + visible.stat().st_size
    if size > LIMIT:
        raise SystemExit(f"the stored values take {size} bytes, more than {LIMIT}: make the visible checks smaller")
    print(f"wrote {test_values} and {visible}: {size / 2**20:.2f} MiB")


if __name__ == "__main__":
    write()
