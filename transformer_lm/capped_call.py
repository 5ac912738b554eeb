"""A visible check's call under the memory cap that the grader's check uses, in a process of its own.

The grader judges assignment 05's memory by a cap the kernel enforces
(:mod:`transformer_lm.sandboxed.memory_cap`): the answer is called where the whole score matrix
cannot be allocated, and its values are judged. A visible check does the same in the student's
kernel, but a cap there would last for the rest of the session. So the kernel forks: the child caps
its own memory at what it holds now plus the check's ``extra`` bytes (and refuses to start a
process, map memory or make what the kernel would hold bytes in, as the grader's runs do; it keeps
no descriptor of the kernel's but its standard ones), makes the call, and sends back through a pipe
what it returned, or what it raised with the answer's lines of its traceback. The kernel itself is
never capped.

A kernel's memory is not a grading run's. Its threads (Jupyter's own, PyTorch's OpenMP workers)
allocated in heaps of their own, which glibc keeps mapped once they are freed, and the child, when
its own heap cannot grow, takes space from them: space mapped before the cap, which the cap never
counts (a kernel whose threads had freed 20 MiB blocks let a 56 MiB row of scores through). So the
child also measures what the kernel counts as resident: it gives every free page of every heap back
first (``malloc_trim``), and after the call its peak resident memory may have grown by at most the
cap (:func:`_peak_growth`). A grading run starts no thread, so it has no such heaps.

A child that does not answer within :data:`SECONDS` is killed. What the call prints is shown after
it, and the child computes on one thread (see :func:`_child`). Forking needs Linux (``os.fork`` and
a kernel that enforces ``RLIMIT_DATA``); elsewhere :func:`call_capped` raises
:class:`CapUnavailable`, and the check says that only the grader checks the cap there.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import os
import pickle
import resource
import select
import signal
import sys
import time
import traceback

import torch

from transformer_lm.sandboxed import memory_cap

SECONDS = 120
"""How long the capped call may take before its process is killed."""
MAX_PRINTED = 10_000
"""The most characters of what the call printed that are shown."""
TRACEBACK_FRAMES = 3
"""The answer's last frames in a raised error's traceback that are sent back: where it arose."""
LIBRARY_FOLDERS = tuple(os.path.dirname(path) + os.sep
                        for path in (torch.__file__, os.path.dirname(memory_cap.__file__)))
"""torch's folder and the course package's: frames there are not the answer's."""


class CapUnavailable(Exception):
    """This machine cannot run a call under the cap (not Linux)."""


class CappedCallFailed(Exception):
    """The capped call's process ended without an answer; the message says how."""


class CappedCallRaised(Exception):
    """The capped call raised ``error``; ``trace`` holds the answer's frames where it arose."""

    def __init__(self, error: Exception, trace: str):
        super().__init__(f"{error}\n{trace}".rstrip())
        self.error, self.trace = error, trace


def _answer_lines(error: BaseException) -> str:
    """Where in the answer ``error`` arose: the last frames of its traceback that are not torch's or
    the course's, as a traceback shows them."""
    frames = [frame for frame in traceback.extract_tb(error.__traceback__)
              if not frame.filename.startswith(LIBRARY_FOLDERS)]
    return "".join(traceback.format_list(frames[-TRACEBACK_FRAMES:]))


STATUS = "/proc/self/status"
"""Where the kernel says what this process holds resident (``VmHWM``, its peak, and the file-backed
and shared parts of what it holds now)."""
RESET_PEAK = "/proc/self/clear_refs"
"""Writing ``5`` here sets the peak resident memory (``VmHWM``) to what is resident now (Linux 4.0)."""
OVER_PEAK = ("the call held {held:.0f} MiB more at its peak than before it, and a capped call may hold "
             "{cap:.0f} MiB more: the grader's cap refuses it")
"""Why a call whose peak went past the cap failed, though its allocations were served (from space
the kernel's threads had freed)."""


def _resident() -> dict[str, int]:
    """What the kernel counts as resident for this process, in bytes: ``VmHWM`` (the peak),
    ``VmRSS`` (now), and of it ``RssFile`` and ``RssShmem`` (files' pages and shared memory)."""
    with open(STATUS) as status:
        fields = dict(line.split(":", 1) for line in status if ":" in line)
    return {name: int(fields[name].split()[0]) * 1024 for name in ("VmHWM", "VmRSS", "RssFile", "RssShmem")}


def _reset_peak() -> dict[str, int] | None:
    """Sets the peak resident memory to what is resident now, and returns :func:`_resident`; None
    where the kernel does not say (no ``/proc``), and then only the cap judges."""
    try:
        with open(RESET_PEAK, "w") as reset:
            reset.write("5")
        return _resident()
    except OSError:
        return None


def _peak_growth(before: dict[str, int]) -> int:
    """How far the peak of private memory rose above ``before`` (a :func:`_reset_peak`): the peak less
    what was resident then, less what files' pages and shared memory grew by since (a library's code
    paged in by the call's first use of an operator is not the answer's memory)."""
    after = _resident()
    shared = (after["RssFile"] + after["RssShmem"]) - (before["RssFile"] + before["RssShmem"])
    return after["VmHWM"] - before["VmRSS"] - max(shared, 0)


def _outcome(function, extra: int) -> tuple:
    """``("returned", value)``, or ``("raised", error, where in the answer it arose)``, of
    ``function()`` under the cap; the error's own cause where it has one (the answer's error). A
    call whose peak resident memory rose by more than ``extra`` raised ``MemoryError``."""
    libc = ctypes.CDLL(None)
    if hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)    # the free pages of every heap: their reuse is then paged in, and counted
    memory_cap.cap(extra)
    before = _reset_peak()
    memory_cap.refuse_uncounted()
    try:
        value = function()
    except Exception as error:  # noqa: BLE001 - whatever the answer raised is its outcome
        return ("raised", error, _answer_lines(error.__cause__ or error))
    held = 0 if before is None else _peak_growth(before)
    if held > extra:
        return ("raised", MemoryError(OVER_PEAK.format(held=held / 2**20, cap=extra / 2**20)), "")
    return ("returned", value)


def _close_inherited(keep: int) -> None:
    """Closes every descriptor the child inherited but the standard three and ``keep`` (the pipe
    back): the kernel holds both ends of some of its own pipes and sockets (asyncio's event loop a
    pair of sockets), whose buffers would hold bytes outside the cap."""
    os.closerange(3, keep)
    os.closerange(keep + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])


def _child(function, extra: int, write_end: int) -> None:
    """In the forked process: the outcome of ``function()`` under the cap, with what it printed,
    written to the pipe; never returns."""
    printed = io.StringIO()
    try:
        _close_inherited(write_end)
        # one thread: the kernel's OpenMP workers are not in the child, and a pool that the kernel
        # used waits for them there forever (PyTorch's DataLoader workers do the same)
        torch.set_num_threads(1)
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            outcome = _outcome(function, extra)
        try:
            data = pickle.dumps((*outcome, printed.getvalue()[-MAX_PRINTED:]))
        except Exception as error:  # noqa: BLE001 - a value that cannot be sent is said to be so
            unsent = RuntimeError(f"what the call gave could not be sent back ({type(error).__name__}: {error})")
            data = pickle.dumps(("raised", unsent, "", printed.getvalue()[-MAX_PRINTED:]))
        with os.fdopen(write_end, "wb") as pipe:
            pipe.write(data)
    finally:
        os._exit(0)


def _read_all(read_end: int, pid: int, seconds: float) -> bytes:
    """What the child writes before it closes the pipe, or kills it after ``seconds``."""
    deadline, chunks = time.monotonic() + seconds, []
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([read_end], [], [], left)[0]:
            os.kill(pid, signal.SIGKILL)
            raise CappedCallFailed(f"the call took longer than {seconds:g} s and was stopped")
        chunk = os.read(read_end, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _death(status: int) -> str:
    """Why a child that sent nothing ended, from its wait status."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        return f"the call's process was ended by {name}, without an answer"
    return f"the call's process exited with status {os.WEXITSTATUS(status)}, without an answer"


def call_capped(function, extra: int, seconds: float = SECONDS):
    """``function()`` in a forked process whose memory is capped at what it holds plus ``extra``
    bytes: what it returned. Raises :class:`CappedCallRaised` with what it raised,
    :class:`CappedCallFailed` when its process ended without an answer, and
    :class:`CapUnavailable` off Linux."""
    if not sys.platform.startswith("linux"):
        raise CapUnavailable(f"a memory cap that the kernel enforces needs Linux (this is {sys.platform})")
    sys.stdout.flush()
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        _child(function, extra, write_end)
    os.close(write_end)
    try:
        data = _read_all(read_end, pid, seconds)
    finally:
        os.close(read_end)
        status = os.waitpid(pid, 0)[1]
    if not data:
        raise CappedCallFailed(_death(status))
    kind, value, *rest = pickle.loads(data)
    printed = rest[-1]
    if printed:
        print(printed, end="" if printed.endswith("\n") else "\n")
    if kind == "raised":
        raise CappedCallRaised(value, rest[0])
    return value
