"""The CPU time of a probe's call, as the kernel counts it for the run's process, read by the server.

Why: a run's process is the student's, so a count of work it takes of itself could be forged, and
work its cells did before a call (or a later probe does after it) could be moved out of a count
taken there. So the server orders each timed call. For each of a probe's windows (one entry of
its planned call's ``windows``, the keyword arguments of one call) the run asks (``clock``); the
server reads the run's CPU clock and only then sends that window's inputs, which it keeps where
the run cannot see (a file of ``<course>/clocked/`` for each window), so nothing in the run could
start on them sooner. The run calls the answer, sends its record as a file and says so
(``clocked``), then waits; the server reads the clock again, once that file has come. Whatever
made the record from those inputs ran between the two readings, and the clock counts every thread
of the process (``clock_gettime`` of the process's CPU clock, in nanoseconds): the figure cannot be
made smaller by anything the run's code does elsewhere. A window out of that order counts for
nothing, nor does any later one of its probe.
"""

from __future__ import annotations

import json
import os
import time

import torch

from . import report

CPU_CLOCK = 2
"""``CPUCLOCK_SCHED``: the kernel's count, in nanoseconds, of the time every thread of a process ran."""
FIGURES = "clocks.json"
"""The server's file of figures in the results folder: no name a run may report (those end in
``.safetensors``)."""


def cpu_nanoseconds(pid: int) -> int:
    """The CPU time process ``pid`` has used, all its threads together (its clock id as
    ``clock_getcpuclockid`` makes it)."""
    return time.clock_gettime_ns(((~pid) << 3) | CPU_CLOCK)


class Clock:
    """The server's side: the windows of each timed probe (``{probe: [the file of each window's
    inputs]}``), the figure of each window that kept the order (nanoseconds, or None), and what it
    sends the run (``send``, bytes)."""

    def __init__(self, folder: str, windows: dict[str, list[str]], send, run_pid):
        self.folder, self.windows, self.send, self.run_pid = folder, windows, send, run_pid
        self.figures: dict[str, list[int | None]] = {pid: [] for pid in windows}
        self.started: tuple[str, int, int] | None = None
        """The open window: its probe, its number and the clock's reading when it opened."""

    def seen(self, event: dict, open_probe: str | None, written: set[str]) -> None:
        """Acts on a run's event: ``open_probe`` is the probe the journal's order has open, and
        ``written`` the files the run has reported so far."""
        name, pid = event["event"], event.get("probe")
        if name == "clock":
            window = len(self.figures.get(pid, ()))
            if self.started is None and pid == open_probe and pid in self.windows \
                    and window < len(self.windows[pid]) and None not in self.figures[pid]:
                self.started = (pid, window, self._now())
                with open(os.path.join(self.folder, os.path.basename(self.windows[pid][window])), "rb") as f:
                    self.send(report.raw_frame(f.read()))
                return
            self._void(pid)
        elif name == "clocked":
            started, self.started = self.started, None
            if started is None or started[0] != pid or f"{pid}.{started[1]}.safetensors" not in written:
                self._void(pid if started is None else started[0])
                return
            now = self._now()
            self.figures[pid].append(None if None in (now, started[2]) else now - started[2])
            self.send(report.frame({}))
        elif self.started is not None and name.startswith("probe_"):   # the call raised: no one waits
            self.figures[self.started[0]].append(None)
            self.started = None

    def _now(self) -> int | None:
        """The run's CPU clock, or None when the server cannot tell which process is the run."""
        pid = self.run_pid()
        return cpu_nanoseconds(pid) if pid is not None else None

    def _void(self, pid) -> None:
        """A window out of order: it, and every later one of its probe, counts for nothing; the run
        is told so instead of waiting."""
        if pid in self.figures:
            self.figures[pid].append(None)
        self.send(report.frame({"void": True}))

    def write(self, out_dir: str) -> None:
        """The figures, for the trusted side."""
        with open(os.path.join(out_dir, FIGURES), "w") as f:
            json.dump(self.figures, f)


DTYPES = {"F32": "float32", "F64": "float64"}
"""The dtypes of safetensors' format a window's inputs come in."""


def window_tensors(data: memoryview) -> dict:
    """A window's inputs (safetensors' format: the length of a JSON header, the header, the data)
    as tensors over ``data`` itself, without a copy."""
    size = int.from_bytes(data[:8], "little")
    header = json.loads(bytes(data[8:8 + size]))
    header.pop("__metadata__", None)
    tensors = {}
    for name, entry in header.items():
        dtype = getattr(torch, DTYPES[entry["dtype"]])
        start, stop = entry["data_offsets"]
        count = (stop - start) // dtype.itemsize
        tensors[name] = torch.frombuffer(data, dtype=dtype, count=count, offset=8 + size + start).view(entry["shape"])
    return tensors


def clocked_call(pid: str, call: dict, call_window, io) -> None:
    """The run's side: each window of the planned ``call`` of probe ``pid`` in turn, between the
    server's readings. ``call_window(kwargs, tensors)`` makes one call and returns its record;
    ``io`` is ``(send, send_file, receive, as_bytes)``, where ``receive(into)`` reads the server's
    next frame (into ``into``: the windows reuse one buffer). Raises ``LookupError`` when the
    server times no more windows of it."""
    send, send_file, receive, as_bytes = io
    buffer = bytearray()
    for window, kwargs in enumerate(call["windows"]):
        send("clock", probe=pid, window=window)
        inputs = receive(buffer)
        if not isinstance(inputs, memoryview):
            raise LookupError("the server times no window of this call")
        buffer = inputs.obj
        record = call_window(kwargs, window_tensors(inputs))
        send_file(f"{pid}.{window}.safetensors", as_bytes(record))
        send("clocked", probe=pid, window=window)
        if receive(None) != {}:
            raise LookupError("the server did not time this window")
