"""One command in a sandbox, from start to end: :func:`run_sandboxed`."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from autograder.running.sandbox.confine import Isolation, Limits
from autograder.running.sandbox.process import (POLL_SECONDS, READ_CHUNK, keep_what_fits, kill_group, launch, teardown,
                                                wait_readable)

_EXIT_GRACE_SECONDS = 1.0
"""After the command exits, how long to wait for output that a leftover process still writes."""


@dataclass
class SandboxResult:
    """How a run ended and what it printed."""

    returncode: int | None
    """Exit status, or ``None`` when the process was killed by a signal."""
    signal: int | None
    """The signal that ended it (``SIGKILL`` after a timeout, ``SIGSEGV`` for a segfault...)."""
    timed_out: bool
    output: str
    """The first ``output_bytes`` of stdout and stderr, merged, decoded with errors="replace"."""
    output_truncated: bool
    wall_seconds: float


def run_sandboxed(argv: list[str], *, readonly: dict[str, str], writable: dict[str, str],
                  limits: Limits, env: dict[str, str], cwd: str, isolation: Isolation,
                  watch: Callable[[Callable[[str], bytes]], str | None] | None = None,
                  ) -> SandboxResult:
    """Run ``argv`` confined as ``isolation`` allows and return how it ended.

    ``readonly`` and ``writable`` map host folders to paths inside the sandbox. The process runs as
    uid 65534, so what it must read has to be readable by others. A writable destination starts
    as an empty tmpfs of ``limits.scratch_bytes``; after the run, its regular files and folders
    are copied into the host folder (never following symlinks). ``cwd`` is a path inside the
    sandbox. The environment is ``env`` over :data:`_BASE_ENV`; it is handed over through bwrap's
    own environment, not its command line, where any user could read it.

    ``watch``, if given, is called about every 0.1 s while the command runs (a per-step time limit
    can live there). It gets ``read(path)``, which returns the current contents of a regular file
    in a writable folder, named by its sandbox path (``b""`` if there is none; symlinks are not
    followed; at most ``limits.file_size_bytes``). If ``watch`` returns a reason, the run is
    killed: ``signal`` is ``SIGKILL`` and ``timed_out`` stays false.

    Without isolation (``isolation.name == "none"``) no path is remapped: the command sees the host
    filesystem, writes straight into the host folders, and ``cwd`` is a host path; ``read`` still
    takes sandbox paths and reads the matching host file.
    """
    with contextlib.ExitStack() as stack:
        started = launch(stack, argv, readonly=readonly, writable=writable, limits=limits, env=env,
                         cwd=cwd, isolation=isolation)
        poll = None if watch is None else functools.partial(watch, started.folders.read)
        output, truncated, timed_out = _collect(started.proc, started.out_r, started.start + limits.wall_seconds,
                                                limits.output_bytes, poll)
        wall = time.monotonic() - started.start
        teardown(started)
        if started.sandboxed:
            started.folders.copy_back()
    returncode, sig = _decode_status(started.proc.returncode, started.sandboxed)
    return SandboxResult(returncode=None if timed_out else returncode,
                         signal=signal.SIGKILL if timed_out else sig, timed_out=timed_out,
                         output=output.decode("utf-8", errors="replace"),
                         output_truncated=truncated, wall_seconds=wall)


def _collect(proc: subprocess.Popen, fd: int, deadline: float, keep: int,
             watch: Callable[[], str | None] | None) -> tuple[bytes, bool, bool]:
    """Read the output until it ends, keeping ``keep`` bytes, and enforce the deadline.

    Reading never stops while the process runs, so it never blocks on a full pipe, and what is
    beyond ``keep`` is dropped as it arrives. ``watch`` is called between reads, at least every
    ``POLL_SECONDS``, and the process is killed when it gives a reason. Returns the output,
    whether it was cut and whether the process was killed for running past ``deadline``.
    """
    kept = bytearray()
    truncated = timed_out = False
    stop = deadline
    next_watch = time.monotonic()
    while (now := time.monotonic()) < stop:
        if stop == deadline and proc.poll() is not None:
            stop = min(deadline, now + _EXIT_GRACE_SECONDS)  # only a leftover process writes now
        elif watch is not None and now >= next_watch:
            next_watch = now + POLL_SECONDS
            if watch() is not None:
                kill_group(proc)
        if not wait_readable(fd, min(stop - now, POLL_SECONDS)):
            continue
        chunk = os.read(fd, READ_CHUNK)
        if not chunk:
            break
        truncated = keep_what_fits(kept, chunk, keep) or truncated
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_group(proc)
        proc.wait()
    return bytes(kept), truncated, timed_out


def _decode_status(status: int, sandboxed: bool) -> tuple[int | None, int | None]:
    """Split a wait status into exit code and signal.

    bwrap reports a command killed by signal n as exit status 128 + n (like a shell), so inside
    the sandbox an exit status of 129 to 192 is read as that signal.
    """
    if status < 0:
        return None, -status
    if sandboxed and 128 < status <= 128 + 64 and (status - 128) in signal.valid_signals():
        return None, status - 128
    return status, None
