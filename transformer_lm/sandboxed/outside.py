"""What a call holds and starts outside PyTorch's operators, which the dispatch trace
(:class:`transformer_lm.sandboxed.tensor_trace.TensorTrace`) cannot see: NumPy arrays, Python lists and
numbers, memory maps, and other processes.

Memory is measured with :mod:`tracemalloc`, which counts every allocation of Python objects and of
NumPy's arrays (NumPy reports its data to it), plus the length of every memory map the call opens
(``mmap.__new__``'s audit event). PyTorch's own tensors are not in it: the trace counts those.
The resident set's high-water mark (``/proc/self/status``) would see everything at once, but the
grading sandbox has no ``/proc``, so both sides use this measure. It is judged at sizes where a
``T x T`` matrix of scores holds 16 million numbers, far more than a tile, so the interpreter's
own allocations (a few kilobytes) are noise.

Processes are seen by the audit events that start them (``os.fork``, ``os.posix_spawn``,
``subprocess.Popen``...), by the processor time of the children the call waited for, and by the
children still running after it: a process started with ``multiprocessing``'s ``spawn`` method
raises no audit event. In the grading sandbox the harness refuses all of them before they run.
"""

from __future__ import annotations

import gc
import os
import sys
import tracemalloc

import torch

PROCESS_EVENTS = frozenset({"os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec", "os.system",
                            "subprocess.Popen", "pty.spawn"})
"""Audit events that start a process."""


class _Watch:
    """What the audit hook notes while a call is watched: the process events and the bytes mapped."""

    def __init__(self):
        self.on = False
        self.started: list[str] = []
        self.mapped = 0


_WATCH = _Watch()


def _hook(event: str, args: tuple, _watch=_WATCH, _events=PROCESS_EVENTS, _int=int, _isinstance=isinstance) -> None:
    if not _watch.on:
        return
    if event in _events:
        _watch.started.append(event)
    elif event == "mmap.__new__" and _isinstance(args[1], _int):
        _watch.mapped += args[1]


sys.addaudithook(_hook)


def _children_seconds(_times=os.times) -> float:
    """Processor time of the children this process has waited for, so far."""
    times = _times()
    return times.children_user + times.children_system


def _children_running(_listdir=os.listdir, _open=open) -> int:
    """How many children of this process are running now (0 where ``/proc`` is not there)."""
    running = 0
    try:
        for task in _listdir("/proc/self/task"):
            with _open(f"/proc/self/task/{task}/children") as children:
                running += len(children.read().split())
    except OSError:
        return 0
    return running


def probe_outside_torch(fn, inputs: dict[str, torch.Tensor], call_kwargs: dict | None = None,
                        apply_arguments: list | None = None,
                        _tracemalloc=(tracemalloc.is_tracing, tracemalloc.start, tracemalloc.stop,
                                      tracemalloc.get_traced_memory, tracemalloc.reset_peak),
                        _watch=_WATCH, _children=_children_seconds, _running=_children_running,
                        _collect=gc.collect, _tensor=torch.tensor) -> dict[str, torch.Tensor]:
    """Calls ``fn(*inputs, **call_kwargs)`` once without gradients (and without the trace, whose
    own bookkeeping would be counted) and records ``outside.peak``, the most bytes of Python
    objects and NumPy arrays it held at once beyond what was held before, plus the bytes it
    mapped, and ``outside.processes``, how many processes it started. With ``apply_arguments``,
    ``fn`` is a ``torch.autograd.Function``: ``fn.apply(*inputs, *apply_arguments)`` runs first,
    unmeasured (the forward has its own check), and what is measured is its backward pass (of a
    gradient of ones). What ``tracemalloc`` needs is bound in the defaults: the grading sandbox
    takes it from every other caller."""
    is_tracing, start, stop, traced, reset_peak = _tracemalloc
    torch.manual_seed(0)
    arguments = [t.detach().clone().requires_grad_(apply_arguments is not None) for t in inputs.values()]
    output = None if apply_arguments is None else fn.apply(*arguments, *apply_arguments)
    _collect()
    tracing, children, running = is_tracing(), _children(), _running()
    if tracing:  # the student's own tracing, in a kernel: left on
        reset_peak()
    else:
        start()
    before = traced()[0]
    _watch.on, _watch.started, _watch.mapped = True, [], 0
    try:
        if output is None:
            with torch.no_grad():
                fn(*arguments, **(call_kwargs or {}))
        else:
            output.backward(torch.ones_like(output))
        peak = traced()[1] - before
    finally:
        _watch.on = False
        if not tracing:
            stop()
    started = len(_watch.started) or int(_children() > children or _running() > running)
    return {"outside.peak": _tensor(peak + _watch.mapped), "outside.processes": _tensor(started)}
