"""Starting a confined process (with the pipes and sockets it shares with the trusted side)
and making sure that nothing of it runs any more."""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

from autograder.running.sandbox.confine import WRAPPER, Isolation, Limits, bwrap_args, data_files, sandbox_python
from autograder.running.sandbox.host_ids import reserve as reserve_host_uid
from autograder.running.sandbox.folders import WritableFolders

_BASE_ENV = {"HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8"}
"""The environment under the caller's; ``PATH`` (:func:`_path`) puts the grader's ``python`` first."""


def _path(sandboxed: bool) -> str:
    """``PATH``: the grader's environment's programs first, where the command sees them."""
    bin_dir = os.path.dirname(sandbox_python()) if sandboxed else os.path.join(sys.prefix, "bin")
    return f"{bin_dir}:/usr/local/bin:/usr/bin:/bin"


READ_CHUNK = 1 << 16
POLL_SECONDS = 0.1
_TEARDOWN_SECONDS = 5.0
"""How long to wait for the kernel to kill the rest of a sandbox's pid namespace."""


@dataclass
class _Started:
    """A sandbox just started by :func:`launch`."""

    proc: subprocess.Popen
    sandboxed: bool
    start: float
    out_r: int
    """Read end of the merged stdout and stderr."""
    folders: WritableFolders
    pidfd: int | None
    """A pidfd of the sandbox's pid 1 (see :func:`_sandbox_pidfd`)."""
    control: int | None = None
    """Write end of the command's standard input, for a session."""
    replies: int | None = None
    """Read end of the command's answer pipe, for a session."""


def _wrapper_spec(limits: Limits, writable: dict[str, str], sandboxed: bool, serve: bool, host_uid: int | None) -> dict:
    """What the wrapper (:data:`WRAPPER`) sets up before it runs the command: its limits, the uid
    it drops root for (``host_uid``, or none where bwrap did not run as root), the folders it may
    write, and whether a session keeps CAP_SYS_ADMIN."""
    return {
        "rlimits": [("RLIMIT_AS", limits.memory_bytes), ("RLIMIT_NPROC", limits.processes),
                    ("RLIMIT_FSIZE", limits.file_size_bytes), ("RLIMIT_CORE", 0)],
        "host_uid": host_uid,
        "writable": list(writable.values()) if sandboxed else [],
        "keep_sys_admin": sandboxed and serve,
    }


def _in_bwrap(command: list[str], child_ends: list[int], readonly: dict[str, str], writable: dict[str, str],
              limits: Limits, cwd: str, serve: bool) -> list[str]:
    """``command`` inside bubblewrap; its info pipe's write end is the last of ``child_ends``, and
    the data files' descriptors join them."""
    info_w = child_ends[-1]
    data_fds = [_data_fd(text, child_ends) for text in data_files()]
    return [shutil.which("bwrap") or "bwrap", *bwrap_args(readonly, writable, limits, cwd, info_w, data_fds, serve),
            "--", *command]


def launch(stack: contextlib.ExitStack, argv: list[str], *, readonly: dict[str, str], writable: dict[str, str],
           limits: Limits, env: dict[str, str], cwd: str, isolation: Isolation, serve: bool = False) -> _Started:
    """Start ``argv`` confined as ``isolation`` allows; ``stack`` releases what it holds.

    With ``serve``, the command also gets a pipe on its standard input and one for its answers
    (see :class:`Session`); otherwise its standard input is empty.
    """
    sandboxed = isolation.name == "bubblewrap"
    host_uid = reserve_host_uid(stack) if sandboxed and os.geteuid() == 0 else None
    spec = _wrapper_spec(limits, writable, sandboxed, serve, host_uid)
    env = dict(env)
    child_ends: list[int] = []  # closed here once the child holds its copies
    stack.callback(lambda: [os.close(fd) for fd in child_ends])
    parent_sock, child_sock = socket.socketpair()
    stack.callback(parent_sock.close)
    child_ends.append(child_sock.detach())
    spec["sock"] = child_ends[0]
    out_r = _pipe(stack, child_ends)
    out_w = child_ends[-1]
    stdin, control, replies = subprocess.DEVNULL, None, None
    if serve:
        replies = _pipe(stack, child_ends)
        env["SANDBOX_REPLY_FD"] = str(child_ends[-1])
        stdin, control = os.pipe()
        stack.callback(os.close, control)
        child_ends.append(stdin)
    command = [sandbox_python() if sandboxed else sys.executable, "-I", "-S", "-c", WRAPPER, json.dumps(spec), *argv]
    if sandboxed:
        info_r = _pipe(stack, child_ends)
        command = _in_bwrap(command, child_ends, readonly, writable, limits, cwd, serve)
    start = time.monotonic()
    proc = subprocess.Popen(command, stdin=stdin, stdout=out_w,
                            stderr=subprocess.STDOUT, env={"PATH": _path(sandboxed), **_BASE_ENV, **env},
                            cwd="/" if sandboxed else cwd, start_new_session=True,
                            pass_fds=[fd for fd in child_ends if fd not in (out_w, stdin)])
    stack.callback(_reap, proc)  # if anything here raises (even ^C), the sandbox goes too
    while child_ends:  # EOF on the output must come when the last copy in the child closes
        os.close(child_ends.pop())
    pidfd = _sandbox_pidfd(info_r) if sandboxed else None
    if pidfd is not None:
        stack.callback(os.close, pidfd)
    folders = WritableFolders(parent_sock, writable, sandboxed, limits.file_size_bytes)
    stack.callback(folders.close)
    return _Started(proc, sandboxed, start, out_r, folders, pidfd, control, replies)


def teardown(started: _Started) -> None:
    """Make sure nothing of the sandbox runs any more."""
    if started.pidfd is not None:
        if started.proc.poll() is None:
            kill_group(started.proc)
        wait_readable(started.pidfd, _TEARDOWN_SECONDS)
    else:
        kill_group(started.proc)  # background processes of a plain run, where they stayed in its group


def keep_what_fits(kept: bytearray, chunk: bytes, limit: int) -> bool:
    """Append what fits of ``chunk`` to ``kept``; True when some of it was dropped."""
    room = limit - len(kept)
    kept += chunk[:max(0, room)]
    return len(chunk) > room


def _pipe(stack: contextlib.ExitStack, child_ends: list[int]) -> int:
    """A pipe whose read end the parent keeps (closed by ``stack``) and whose write end goes to
    ``child_ends``."""
    read_end, write_end = os.pipe()
    stack.callback(os.close, read_end)
    child_ends.append(write_end)
    return read_end


def _data_fd(text: str, child_ends: list[int]) -> int:
    """A pipe that already holds ``text``, for bwrap's ``--ro-bind-data``; returns its read end."""
    read_end, write_end = os.pipe()
    child_ends.append(read_end)
    os.write(write_end, text.encode())
    os.close(write_end)
    return read_end


def _sandbox_pidfd(info_r: int) -> int | None:
    """A pidfd of the sandbox's pid 1, which becomes readable once every process in it is gone.

    bwrap reports that pid on ``--info-fd`` right after creating it, and closes the pipe.
    """
    info = b""
    while chunk := os.read(info_r, 4096):
        info += chunk
    try:
        return os.pidfd_open(json.loads(info)["child-pid"])
    except (ValueError, KeyError, OSError):
        return None  # bwrap failed before starting the sandbox; its message is in the output


def poller(*fds: int) -> select.poll:
    """A poll object that waits for input on ``fds``."""
    polled = select.poll()
    for fd in fds:
        polled.register(fd, select.POLLIN)
    return polled


def wait_readable(fd: int, seconds: float) -> bool:
    """Wait until ``fd`` is readable (or closed) for at most ``seconds``."""
    return bool(poller(fd).poll(max(0, int(seconds * 1000))))


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group of ``proc``; bwrap's ``--die-with-parent`` takes the sandbox."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _reap(proc: subprocess.Popen) -> None:
    """Kill ``proc``'s group if it still runs, and wait for it."""
    if proc.poll() is None:
        kill_group(proc)
        proc.wait()
