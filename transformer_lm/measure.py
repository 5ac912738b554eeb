"""Time and peak memory of one call, on the CPU or on a CUDA device: what the benchmarks of
assignment 05, its lecture and ``benchmarks/`` measure.

On a CUDA device the peak is the allocator's own (``torch.cuda.max_memory_allocated``). On the
CPU, PyTorch keeps no such count, so the peak is that of the tensors the call's operators create,
alive at once (:class:`transformer_lm.sandboxed.tensor_trace.TensorTrace`): the inputs are not counted,
and neither is memory outside tensors. The time is the best of ``repeats`` calls made without the
trace, which slows every operator down.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from transformer_lm.sandboxed import tensor_trace


@dataclass(frozen=True)
class Measurement:
    seconds: float
    peak_bytes: int

    @property
    def peak_mib(self) -> float:
        return self.peak_bytes / 2**20


def _device_of(args) -> torch.device:
    return next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("cpu"))


def peak_bytes(fn, *args, **kwargs) -> int:
    """The most bytes of tensors that ``fn(*args, **kwargs)`` made and held at once."""
    device = _device_of(args)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn(*args, **kwargs)
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    with tensor_trace.trace_tensors() as trace:
        fn(*args, **kwargs)
    return trace.peak


def seconds(fn, *args, repeats: int = 3, **kwargs) -> float:
    """The best wall-clock time of ``repeats`` calls of ``fn(*args, **kwargs)``, after one warm-up."""
    device = _device_of(args)

    def synchronize():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    fn(*args, **kwargs)
    best = float("inf")
    for _ in range(repeats):
        synchronize()
        start = time.perf_counter()
        fn(*args, **kwargs)
        synchronize()
        best = min(best, time.perf_counter() - start)
    return best


def measure(fn, *args, repeats: int = 3, **kwargs) -> Measurement:
    """Time (:func:`seconds`) and peak memory (:func:`peak_bytes`) of ``fn(*args, **kwargs)``."""
    with torch.no_grad():
        return Measurement(seconds(fn, *args, repeats=repeats, **kwargs), peak_bytes(fn, *args, **kwargs))
