"""A sandbox kept running to serve one request after another: :class:`Session`."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from autograder.running.sandbox.confine import Isolation, Limits
from autograder.running.sandbox.process import (POLL_SECONDS, READ_CHUNK, keep_what_fits, launch, poller, teardown,
                                                wait_readable)


@dataclass
class Reply:
    """What one request to a :class:`Session` came back with."""

    text: str | None
    """The command's answer line; ``None`` when the sandbox ended or was stopped before answering."""
    output: str
    """What was printed meanwhile (the first ``limits.output_bytes``), decoded with errors="replace"."""
    output_truncated: bool
    timed_out: bool
    """Stopped for running past the request's time."""
    stopped: str | None = None
    """The reason ``watch`` gave, when it stopped the sandbox."""


class Session:
    """A sandbox kept running to serve one request after another.

    Starting Python and importing torch costs seconds; a session pays that once and then
    serves many requests. The command reads one request line at a time on its standard input
    and answers each with one line on the descriptor whose number is in ``$SANDBOX_REPLY_FD``
    (a pipe of its own, so nothing the command's children print can pass for an answer).
    The command is trusted code that must keep requests apart from each other (see
    ``autograder/running/harness.py``); this class only carries requests and answers, enforces time,
    and reads the writable folders, as :func:`run_sandboxed` does for a single run.

    A session that times out, is stopped by ``watch`` or ends is dead: :attr:`alive` turns
    false and the caller starts a new one. Use it as a context manager, or call :meth:`close`.
    """

    def __init__(self, argv: list[str], *, readonly: dict[str, str], writable: dict[str, str],
                 limits: Limits, env: dict[str, str], cwd: str, isolation: Isolation):
        self.limits = limits
        self._stack = contextlib.ExitStack()
        try:
            self._started = launch(self._stack, argv, readonly=readonly, writable=writable, limits=limits,
                                   env=env, cwd=cwd, isolation=isolation, serve=True)
        except BaseException:
            self._stack.close()
            raise
        self.alive = True
        self._pending = b""

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def read(self, path: str) -> bytes:
        """The current contents of a regular file in a writable folder (see :func:`run_sandboxed`)."""
        return self._started.folders.read(path)

    def request(self, line: str, seconds: float,
                watch: Callable[[Callable[[str], bytes]], str | None] | None = None) -> Reply:
        """Send ``line`` and wait up to ``seconds`` for the answer, reading the output meanwhile.

        ``watch`` works as in :func:`run_sandboxed`; when it gives a reason, the sandbox is killed.
        """
        started = self._started
        kept, truncated = bytearray(), False

        def reply(text=None, timed_out=False, stopped=None) -> Reply:
            nonlocal truncated
            while wait_readable(started.out_r, 0):  # what was printed before the answer
                chunk = os.read(started.out_r, READ_CHUNK)
                if not chunk:
                    break
                truncated = keep_what_fits(kept, chunk, self.limits.output_bytes) or truncated
            if text is None:
                self.stop()
            return Reply(text, kept.decode("utf-8", errors="replace"), truncated, timed_out, stopped)

        if not self.alive:
            return reply()
        try:
            os.write(started.control, line.encode() + b"\n")
        except BrokenPipeError:
            return reply()
        next_watch = time.monotonic()
        deadline = next_watch + seconds
        polled = poller(started.out_r, started.replies)
        while (now := time.monotonic()) < deadline:
            if watch is not None and now >= next_watch:
                next_watch = now + POLL_SECONDS
                reason = watch(self.read)
                if reason is not None:
                    return reply(stopped=reason)
            for fd, _ in polled.poll(max(0, int(min(deadline - now, POLL_SECONDS) * 1000))):
                chunk = os.read(fd, READ_CHUNK)
                if fd == started.out_r:
                    if not chunk:
                        polled.unregister(fd)
                    truncated = keep_what_fits(kept, chunk, self.limits.output_bytes) or truncated
                    continue
                if not chunk:
                    return reply()  # the command is gone
                self._pending += chunk
                if b"\n" in self._pending:
                    text, self._pending = self._pending.split(b"\n", 1)
                    return reply(text.decode("utf-8", errors="replace"))
        return reply(timed_out=True)

    def stop(self) -> None:
        """Kill the sandbox now; what its writable folders hold stays readable until :meth:`close`."""
        if self.alive:
            self.alive = False
            teardown(self._started)

    def close(self) -> None:
        """Kill the sandbox, if it still runs, and release everything it held."""
        self.stop()
        self._stack.close()
