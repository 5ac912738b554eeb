"""Assignment 05's claims about tiled attention, checked with the instructor's reference on a
CUDA device (where its benchmark cell adds a CUDA row) or on the CPU.

    python benchmarks/cuda_check.py [--device cuda] [--sizes 1024 2048 4096 8192]

It needs only torch and this repository. For each size it prints the peak memory and time of the
plain attention, the tiled forward (``flash_forward``, 128×128 tiles, as in the notebook) and
PyTorch's fused kernel, as the notebook's cell does, then checks what the notebook says:

- the tiled forward and its backward by recomputation agree with plain attention and autograd
  (float32, to ``TOLERANCE``), with and without the causal mask;
- the plain version's peak memory grows with T² (about ×4 when T doubles), the tiled version's
  with T (under ×2.5).

It exits 1, naming the claim, if one fails.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from transformer_lm.measure import measure  # noqa: E402
from transformer_lm.instructor.reference import (FlashAttention, flash_forward,  # noqa: E402
                                                 scaled_dot_product_attention)

TOLERANCE = 1e-4
"""Largest difference allowed between the tiled and the plain results (float32, entries of order 1)."""
BLOCK = 128


def versions():
    return {
        "plain": lambda q, k, v: scaled_dot_product_attention(q, k, v).output,
        "flash_forward": lambda q, k, v: flash_forward(q, k, v, block_q=BLOCK, block_k=BLOCK)[0],
        "F.sdpa": F.scaled_dot_product_attention,
    }


def largest_gaps(device: str, T: int, causal: bool) -> tuple[float, float]:
    """The largest differences of the tiled output and of its gradients from plain attention's."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 4, T, 64, device=device, requires_grad=True) for _ in range(3))  # (1, 4, T, 64)
    mask = torch.ones(T, T, dtype=torch.bool, device=device).tril() if causal else None
    plain = scaled_dot_product_attention(q, k, v, mask).output
    tiled = FlashAttention.apply(q, k, v, causal, BLOCK, BLOCK)
    grad_out = torch.randn_like(plain)
    expected = torch.autograd.grad(plain, (q, k, v), grad_out)
    got = torch.autograd.grad(tiled, (q, k, v), grad_out)
    return ((tiled - plain).abs().max().item(),
            max((g - e).abs().max().item() for g, e in zip(got, expected)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--sizes", type=int, nargs="+", default=None,
                        help="sequence lengths, at least two (default: the notebook's for the device)")
    args = parser.parse_args(argv)
    sizes = args.sizes or ([256, 512, 1024, 2048, 4096, 8192] if args.device == "cuda" else [256, 512, 1024, 2048])
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    print(f"torch {torch.__version__} on {device_name}")

    results = {}
    print(f"{'T':>5} | " + " | ".join(f"{name:^19}" for name in versions()))
    print(f"{'':>5} | " + " | ".join(f"{'MiB':>8} {'ms':>10}" for _ in versions()))
    for T in sizes:
        q, k, v = (torch.randn(1, 4, T, 64, device=args.device) for _ in range(3))  # (1, 4, T, 64) each
        cells = []
        for name, fn in versions().items():
            results[name, T] = result = measure(fn, q, k, v)
            cells.append(f"{result.peak_mib:>8.2f} {1000 * result.seconds:>10.2f}")
        print(f"{T:>5} | " + " | ".join(cells))

    failures = []
    for causal in (False, True):
        out_gap, grad_gap = largest_gaps(args.device, sizes[-2], causal)
        print(f"T = {sizes[-2]}, causal={causal}: largest gap of the output {out_gap:.1e}, "
              f"of the gradients {grad_gap:.1e}")
        if max(out_gap, grad_gap) > TOLERANCE:
            failures.append(f"the tiled attention (causal={causal}) differs from plain attention by more than {TOLERANCE}")
    for name, most in (("plain", None), ("flash_forward", 2.5)):
        growth = results[name, sizes[-1]].peak_bytes / results[name, sizes[-2]].peak_bytes
        print(f"{name}: peak memory x{growth:.2f} from T = {sizes[-2]} to {sizes[-1]}")
        if most is None and growth < 3.5:
            failures.append(f"plain attention's memory grew only x{growth:.2f} when T doubled (T² says x4)")
        if most is not None and growth > most:
            failures.append(f"flash_forward's memory grew x{growth:.2f} when T doubled (linear in T says x2)")
    for failure in failures:
        print("FAILED:", failure)
    print("all claims hold" if not failures else f"{len(failures)} claim(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
