"""Calls that may crash or hang the process that makes them, each made in a forked child.

Finding what PyTorch's operators compute means calling every one of them on inputs they were not
written for: a few batch-norm kernels crash the process on them, some functions start processes of
their own or take their first call's set-up past any patience. The children are killed with
whatever they started, and the next one goes on after the candidate that stopped them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

SECONDS_PER_CALL = 5
"""How long one candidate may hold a child before the child is killed."""


def _try_in_child(candidates: list, start: int, tried: Callable, log: Path) -> None:
    """A child's part of :func:`_crash_safe`: each candidate from ``start`` on, and what it found, to ``log``."""
    os.setsid()
    quiet = os.open(os.devnull, os.O_RDWR)
    for descriptor in (0, 1, 2):
        os.dup2(quiet, descriptor)
    with open(log, "w", buffering=1) as out:
        for index in range(start, len(candidates)):
            out.write(f"start {index}\n")
            for finding in tried(candidates[index]):
                out.write(f"found {finding}\n")
        out.write("done\n")


def crash_safe(candidates: list, tried: Callable[[object], Iterable[str]]) -> tuple[set[str], list[str]]:
    """What ``tried`` finds for each candidate, called in forked children: a child that dies, or
    that one candidate holds past :data:`SECONDS_PER_CALL`, is killed with whatever it started
    (some of torch's functions start processes of their own), and a new child goes on after that
    candidate. The findings, and the candidates that crashed or hung."""
    found, crashed, start = set(), [], 0
    with tempfile.TemporaryDirectory() as folder:
        while start < len(candidates):
            log = Path(folder) / f"from-{start}"
            pid = os.fork()
            if pid == 0:
                try:   # the child never unwinds into its parent's code, whatever a candidate raises
                    _try_in_child(candidates, start, tried, log)
                finally:
                    os._exit(0)
            last, since = None, time.monotonic()
            while os.waitpid(pid, os.WNOHANG) == (0, 0):
                time.sleep(0.02)
                started = [line for line in log.read_text().splitlines() if line.startswith("start ")] \
                    if log.exists() else []
                if started and started[-1] != last:
                    last, since = started[-1], time.monotonic()
                elif time.monotonic() - since > SECONDS_PER_CALL:
                    os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            lines = log.read_text().splitlines() if log.exists() else []
            found |= {line.split(" ", 1)[1] for line in lines if line.startswith("found ")}
            if "done" in lines:
                break
            at = max((int(line.split()[1]) for line in lines if line.startswith("start ")), default=start)
            crashed.append(str(candidates[at][:2] if isinstance(candidates[at], tuple) else candidates[at]))
            start = at + 1
    return found, crashed
