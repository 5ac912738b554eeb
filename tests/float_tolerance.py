"""How the tests compare floats: at a stated tolerance, never bit for bit.

Another CPU (AVX-512 against AVX2, say) sums a matrix product in another order and rounds the
last bits differently, so a value stored on one machine and made again on another can differ by
a few float32 ulps (1.8e-7 was seen for the public test values). ``ACROSS_MACHINES`` allows that
and stays well under the checks' own tolerance (``atol`` 1e-6 for the public test values of
assignment 02, 1e-5 with ``rtol`` 1e-4 everywhere else). Integers and booleans stay exact.
"""

import torch

ACROSS_MACHINES = {"rtol": 1e-6, "atol": 5e-7}


def assert_same(got: torch.Tensor, expected: torch.Tensor, name: str = "") -> None:
    """Exactly equal for integer and boolean tensors; within ``ACROSS_MACHINES`` for floats (NaN where
    NaN is expected: a mistake that gives NaN is stored as NaN)."""
    if got.is_floating_point() or expected.is_floating_point():
        torch.testing.assert_close(got, expected, **ACROSS_MACHINES, equal_nan=True, msg=lambda m: f"{name}: {m}")
    else:
        assert torch.equal(got, expected), name
