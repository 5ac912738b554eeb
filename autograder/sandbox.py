"""Run untrusted student code in a confined process.

The grader's trust boundary is a process boundary: student code runs here, in a fresh process that
cannot see the course folder, cannot reach the network, cannot outlive its run and cannot exhaust
the machine; trusted code elsewhere reads back only the files it left in its writable folders.

With bubblewrap (``bwrap``, Debian package ``bubblewrap``, 0.8 or newer) the process gets:

* a root filesystem of its own: the system directories, the grader's Python interpreter and
  virtual environment (read-only, at their host paths, so the venv's ``python`` works), the
  caller's ``readonly`` binds, and size-limited tmpfs folders: ``/tmp`` (also ``HOME``),
  ``/dev/shm`` and every ``writable`` destination. Nothing else of the host is visible.
* its own pid, network, IPC and UTS namespaces: no network at all, and when the run ends the pid
  namespace dies, so no background process or daemon survives it.
* uid 65534 (``nobody``) with no capabilities, and no way to create further user namespaces.
* resource limits (address space, processes, file size, no core dumps), a wall-clock limit and a
  bound on the output that the caller keeps.

Where bubblewrap is missing or the kernel forbids what it needs, :func:`detect_isolation` says so
and why; :func:`run_sandboxed` then runs the command as a plain subprocess with the same limits,
environment and wall-clock kill but without filesystem, network or user isolation. Whether that is
acceptable is the caller's decision.

How the process becomes uid 65534, and why the fork-bomb limit holds
---------------------------------------------------------------------
``RLIMIT_NPROC`` is what bounds a fork bomb, and the kernel does not enforce it for a process whose
real uid outside every user namespace is root. So letting bwrap map the sandbox uid to root
(``bwrap --unshare-user --uid 65534`` run as root) leaves fork bombs unbounded. The limit must also
count this sandbox's processes only: ``RLIMIT_NPROC`` counts per user and per user namespace, so
sandboxes that share a uid in one namespace would share one budget and fail each other when a
grader runs several at once (torch's threads count as processes too).

* When the grader runs as root, bwrap runs privileged: as root it can bind the interpreter even
  where it lives under an unreadable ``/root``, and it builds the filesystem and namespaces. The
  first process inside (:data:`_WRAPPER`, trusted code) holds only ``CAP_SETUID`` and
  ``CAP_SETGID``; it drops to uid and gid 65534 for real (all capabilities go with uid 0), then
  creates a user namespace of its own that maps 65534 to 65534 and forbids nested user
  namespaces, sets the limits, and executes the student's command. The student is uid 65534 inside
  and outside, so the kernel enforces ``RLIMIT_NPROC``, counted in this sandbox's namespace only.
  (Dropping to 65534 *before* bwrap was tried: bwrap then cannot reach an interpreter under
  ``/root``, not even through ``--ro-bind-fd``, because it resolves the path.)
* When the grader runs as another user (the course's container), bwrap runs unprivileged and
  creates the user namespace itself (``--unshare-user --uid 65534 --disable-userns``); the wrapper
  sets the limits inside it, so again they count this sandbox alone.

Memory: ``RLIMIT_AS`` is per process. ``import torch`` and a small forward/backward need about
0.7 GiB of address space with 2 threads and 1.5 GiB with 16, so the default of 4 GiB lets torch
work while a 50 GB allocation fails at once. A process can still fork up to ``processes`` children
of that size; tmpfs folders count against their ``--size``, not against ``RLIMIT_AS``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

SANDBOX_UID = 65534
"""uid and gid of the student's process (``nobody``/``nogroup`` on Debian)."""

_SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC_PATHS = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives")
_PASSWD = f"nobody:x:{SANDBOX_UID}:{SANDBOX_UID}:nobody:/tmp:/usr/sbin/nologin\n"
_GROUP = f"nogroup:x:{SANDBOX_UID}:\n"
_BASE_ENV = {"PATH": f"{os.path.join(sys.prefix, 'bin')}:/usr/local/bin:/usr/bin:/bin",
             "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8"}
"""The environment under the caller's: ``python`` is the grader's venv, which the sandbox shows."""

_READ_CHUNK = 1 << 16
_POLL_SECONDS = 0.1
_EXIT_GRACE_SECONDS = 1.0
"""After the command exits, how long to wait for output that a leftover process still writes."""
_TEARDOWN_SECONDS = 5.0
"""How long to wait for the kernel to kill the rest of a sandbox's pid namespace."""
_COPY_MAX_ENTRIES = 10_000
_COPY_MAX_DEPTH = 8
"""Bounds on what is copied back from a writable folder; its size is bounded by its tmpfs."""

_WRAPPER = f"""\
import json, os, resource, socket, sys
spec = json.loads(sys.argv[1])
sock = socket.socket(fileno=spec["sock"])
fds = [os.open(path, os.O_RDONLY | os.O_DIRECTORY) for path in spec["writable"]]
if fds:
    socket.send_fds(sock, [b"w"], fds)
sock.close()
for fd in fds:
    os.close(fd)
if spec["drop_root"]:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    os.setgroups([])
    os.setgid({SANDBOX_UID})
    os.setuid({SANDBOX_UID})
    libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: setuid cleared it; /proc/self/*_map need it
    if libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUSER)")
    for path, text in (("/proc/self/uid_map", "{SANDBOX_UID} {SANDBOX_UID} 1"),
                       ("/proc/self/setgroups", "deny"),
                       ("/proc/self/gid_map", "{SANDBOX_UID} {SANDBOX_UID} 1"),
                       ("/proc/sys/user/max_user_namespaces", "0")):
        with open(path, "w") as f:
            f.write(text)
for name, value in spec["rlimits"]:
    resource.setrlimit(getattr(resource, name), (value, value))
os.execvp(sys.argv[2], sys.argv[2:])
"""
"""The first process inside the sandbox (and in a plain subprocess): trusted code that runs before
the student's. It hands the parent a descriptor of each writable tmpfs (so that their contents can
be copied out after the sandbox is gone), drops root where bwrap ran as root (see the module
docstring), sets the resource limits and executes the command. Executing the command clears every
capability the new user namespace gave it."""


@dataclass(frozen=True)
class Limits:
    """Resource limits of one run."""

    wall_seconds: float = 60.0
    """Whole run; after this the process group is killed (and with it the pid namespace)."""
    memory_bytes: int = 4 * 2**30
    """``RLIMIT_AS`` of each process: torch imports, a 50 GB allocation fails."""
    processes: int = 64
    """``RLIMIT_NPROC``: processes and threads of the sandbox together (bounds a fork bomb)."""
    file_size_bytes: int = 64 * 2**20
    """``RLIMIT_FSIZE``: the largest file the process may write."""
    output_bytes: int = 1 * 2**20
    """Merged stdout and stderr kept; the rest is read and dropped."""
    scratch_bytes: int = 256 * 2**20
    """Size of each tmpfs: ``/tmp``, ``/dev/shm`` and every writable folder."""


@dataclass(frozen=True)
class Isolation:
    """What confines student code on this machine."""

    name: str
    """``"bubblewrap"`` or ``"none"``."""
    detail: str
    """One line for a TA: what is in force, or why bubblewrap is unavailable and what to do."""


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


@functools.cache
def detect_isolation() -> Isolation:
    """Find out, once per process, whether bubblewrap can sandbox code here.

    It runs a real sandbox (the same namespaces, mounts and privilege drop as every run), because a
    ``bwrap`` on the PATH says nothing about whether the kernel lets it create namespaces.
    """
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return Isolation("none", "bubblewrap is not installed, so student code runs unconfined; "
                                 "install it with `apt-get install bubblewrap`")
    probe = run_sandboxed([sys.executable, "-I", "-S", "-c", "pass"], readonly={}, writable={},
                          limits=Limits(wall_seconds=30), env={}, cwd="/",
                          isolation=Isolation("bubblewrap", "probe"))
    if probe.returncode != 0:
        lines = probe.output.strip().splitlines() or [f"exit status {probe.returncode}"]
        return Isolation("none", f"bubblewrap cannot create a sandbox here ({lines[-1]}); it needs "
                                 "version 0.8 or newer and user namespaces (check sysctl "
                                 "user.max_user_namespaces, kernel.unprivileged_userns_clone and "
                                 "kernel.apparmor_restrict_unprivileged_userns, or the container's "
                                 "seccomp profile)")
    version = subprocess.run([bwrap, "--version"], capture_output=True, text=True).stdout.strip()
    return Isolation("bubblewrap", f"{version}: uid {SANDBOX_UID} without capabilities, "
                                   "no network, own pid namespace, only the interpreter and bound "
                                   "folders visible, size-limited tmpfs for writing")


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
        started = _launch(stack, argv, readonly=readonly, writable=writable, limits=limits, env=env,
                          cwd=cwd, isolation=isolation)
        poll = None if watch is None else functools.partial(watch, started.folders.read)
        output, truncated, timed_out = _collect(started.proc, started.out_r, started.start + limits.wall_seconds,
                                                limits.output_bytes, poll)
        wall = time.monotonic() - started.start
        _teardown(started)
        if started.sandboxed:
            started.folders.copy_back()
    returncode, sig = _decode_status(started.proc.returncode, started.sandboxed)
    return SandboxResult(returncode=None if timed_out else returncode,
                         signal=signal.SIGKILL if timed_out else sig, timed_out=timed_out,
                         output=output.decode("utf-8", errors="replace"),
                         output_truncated=truncated, wall_seconds=wall)


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
    ``autograder/harness.py``); this class only carries requests and answers, enforces time,
    and reads the writable folders, as :func:`run_sandboxed` does for a single run.

    A session that times out, is stopped by ``watch`` or ends is dead: :attr:`alive` turns
    false and the caller starts a new one. Use it as a context manager, or call :meth:`close`.
    """

    def __init__(self, argv: list[str], *, readonly: dict[str, str], writable: dict[str, str],
                 limits: Limits, env: dict[str, str], cwd: str, isolation: Isolation):
        self.limits = limits
        self._stack = contextlib.ExitStack()
        try:
            self._started = _launch(self._stack, argv, readonly=readonly, writable=writable, limits=limits,
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
            while _wait_readable(started.out_r, 0):  # what was printed before the answer
                chunk = os.read(started.out_r, _READ_CHUNK)
                if not chunk:
                    break
                truncated = _keep(kept, chunk, self.limits.output_bytes) or truncated
            if text is None:
                self.stop()
            return Reply(text, kept.decode("utf-8", errors="replace"), truncated, timed_out, stopped)

        if not self.alive:
            return reply()
        try:
            os.write(started.control, line.encode() + b"\n")
        except BrokenPipeError:
            return reply()
        deadline = time.monotonic() + seconds
        next_watch = time.monotonic()
        poller = select.poll()
        poller.register(started.out_r, select.POLLIN)
        poller.register(started.replies, select.POLLIN)
        while (now := time.monotonic()) < deadline:
            if watch is not None and now >= next_watch:
                next_watch = now + _POLL_SECONDS
                reason = watch(self.read)
                if reason is not None:
                    return reply(stopped=reason)
            for fd, _ in poller.poll(max(0, int(min(deadline - now, _POLL_SECONDS) * 1000))):
                chunk = os.read(fd, _READ_CHUNK)
                if fd == started.out_r:
                    if not chunk:
                        poller.unregister(fd)
                    truncated = _keep(kept, chunk, self.limits.output_bytes) or truncated
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
            _teardown(self._started)

    def close(self) -> None:
        """Kill the sandbox, if it still runs, and release everything it held."""
        self.stop()
        self._stack.close()


@dataclass
class _Started:
    """A sandbox just started by :func:`_launch`."""

    proc: subprocess.Popen
    sandboxed: bool
    start: float
    out_r: int
    """Read end of the merged stdout and stderr."""
    folders: _WritableFolders
    pidfd: int | None
    """A pidfd of the sandbox's pid 1 (see :func:`_sandbox_pidfd`)."""
    control: int | None = None
    """Write end of the command's standard input, for a session."""
    replies: int | None = None
    """Read end of the command's answer pipe, for a session."""


def _launch(stack: contextlib.ExitStack, argv: list[str], *, readonly: dict[str, str], writable: dict[str, str],
            limits: Limits, env: dict[str, str], cwd: str, isolation: Isolation, serve: bool = False) -> _Started:
    """Start ``argv`` confined as ``isolation`` allows; ``stack`` releases what it holds.

    With ``serve``, the command also gets a pipe on its standard input and one for its answers
    (see :class:`Session`); otherwise its standard input is empty.
    """
    sandboxed = isolation.name == "bubblewrap"
    spec = {
        "rlimits": [("RLIMIT_AS", limits.memory_bytes), ("RLIMIT_NPROC", limits.processes),
                    ("RLIMIT_FSIZE", limits.file_size_bytes), ("RLIMIT_CORE", 0)],
        "drop_root": sandboxed and os.geteuid() == 0,
        "writable": list(writable.values()) if sandboxed else [],
    }
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
    command = [sys.executable, "-I", "-S", "-c", _WRAPPER, json.dumps(spec), *argv]
    if sandboxed:
        info_r = _pipe(stack, child_ends)
        info_w = child_ends[-1]
        data_fds = [_data_fd(_PASSWD, child_ends), _data_fd(_GROUP, child_ends)]
        command = [shutil.which("bwrap") or "bwrap",
                   *_bwrap_args(readonly, writable, limits, cwd, info_w, data_fds),
                   "--", *command]
    start = time.monotonic()
    proc = subprocess.Popen(command, stdin=stdin, stdout=out_w,
                            stderr=subprocess.STDOUT, env={**_BASE_ENV, **env},
                            cwd="/" if sandboxed else cwd, start_new_session=True,
                            pass_fds=[fd for fd in child_ends if fd not in (out_w, stdin)])
    stack.callback(_reap, proc)  # if anything here raises (even ^C), the sandbox goes too
    while child_ends:  # EOF on the output must come when the last copy in the child closes
        os.close(child_ends.pop())
    pidfd = _sandbox_pidfd(info_r) if sandboxed else None
    if pidfd is not None:
        stack.callback(os.close, pidfd)
    folders = _WritableFolders(parent_sock, writable, sandboxed, limits.file_size_bytes)
    stack.callback(folders.close)
    return _Started(proc, sandboxed, start, out_r, folders, pidfd, control, replies)


def _teardown(started: _Started) -> None:
    """Make sure nothing of the sandbox runs any more."""
    if started.pidfd is not None:
        if started.proc.poll() is None:
            _kill_group(started.proc)
        _wait_readable(started.pidfd, _TEARDOWN_SECONDS)
    else:
        _kill_group(started.proc)  # background processes of a plain run, where they stayed in its group


def _keep(kept: bytearray, chunk: bytes, limit: int) -> bool:
    """Append what fits of ``chunk`` to ``kept``; True when some of it was dropped."""
    room = limit - len(kept)
    kept += chunk[:max(0, room)]
    return len(chunk) > room


def _bwrap_args(readonly: dict[str, str], writable: dict[str, str], limits: Limits, cwd: str,
                info_fd: int, data_fds: list[int]) -> list[str]:
    """The bwrap options that build the sandbox described in the module docstring."""
    args = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--hostname", "sandbox", "--die-with-parent", "--new-session",
            "--info-fd", str(info_fd)]
    if os.geteuid() == 0:
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]  # for _WRAPPER's drop
    else:
        args += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
                 "--disable-userns"]
    made = {"/"}

    def parents(dest: str) -> list[str]:
        """Create the missing parents of ``dest`` traversable (bwrap would make them 0700)."""
        out = []
        parent = os.path.dirname(dest)
        chain = []
        while parent not in made:
            chain.append(parent)
            parent = os.path.dirname(parent)
        for path in reversed(chain):
            out += ["--perms", "0755", "--dir", path]
            made.add(path)
        made.add(dest)
        return out

    for path in _SYSTEM_PATHS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
        else:
            continue
        made.add(path)
    for path in _ETC_PATHS:
        if os.path.exists(path):
            args += parents(path) + ["--ro-bind", path, path]
    for fd, path in zip(data_fds, ("/etc/passwd", "/etc/group")):
        args += parents(path) + ["--perms", "0444", "--ro-bind-data", str(fd), path]
    size = str(limits.scratch_bytes)
    args += ["--proc", "/proc", "--dev", "/dev", "--mqueue", "/dev/mqueue"]
    args += parents("/tmp") + ["--perms", "1777", "--size", size, "--tmpfs", "/tmp"]
    args += ["--perms", "1777", "--size", size, "--tmpfs", "/dev/shm"]
    for path in _interpreter_dirs():
        args += parents(path) + ["--ro-bind", path, path]
    binds = [(os.path.normpath(dest), "ro", src) for src, dest in readonly.items()]
    binds += [(os.path.normpath(dest), "rw", src) for src, dest in writable.items()]
    for dest, kind, src in sorted(binds, key=lambda bind: bind[0].count("/")):
        args += parents(dest)
        if kind == "ro":
            args += ["--ro-bind", src, dest]
        else:
            args += ["--perms", "1777", "--size", size, "--tmpfs", dest]
    return args + ["--remount-ro", "/", "--chdir", cwd]


def _interpreter_dirs() -> list[str]:
    """The grader's venv and base interpreter, which the sandbox sees at their host paths."""
    dirs = {sys.prefix, sys.base_prefix,
            os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))}
    return sorted(d for d in dirs
                  if not any(d == s or d.startswith(s + "/") for s in _SYSTEM_PATHS))


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


def _collect(proc: subprocess.Popen, fd: int, deadline: float, keep: int,
             watch: Callable[[], str | None] | None) -> tuple[bytes, bool, bool]:
    """Read the output until it ends, keeping ``keep`` bytes, and enforce the deadline.

    Reading never stops while the process runs, so it never blocks on a full pipe, and what is
    beyond ``keep`` is dropped as it arrives. ``watch`` is called between reads, at least every
    ``_POLL_SECONDS``, and the process is killed when it gives a reason. Returns the output,
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
            next_watch = now + _POLL_SECONDS
            if watch() is not None:
                _kill_group(proc)
        if not _wait_readable(fd, min(stop - now, _POLL_SECONDS)):
            continue
        chunk = os.read(fd, _READ_CHUNK)
        if not chunk:
            break
        truncated = _keep(kept, chunk, keep) or truncated
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        proc.wait()
    return bytes(kept), truncated, timed_out


def _wait_readable(fd: int, seconds: float) -> bool:
    """Wait until ``fd`` is readable (or closed) for at most ``seconds``."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(0, int(seconds * 1000))))


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group of ``proc``; bwrap's ``--die-with-parent`` takes the sandbox."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _reap(proc: subprocess.Popen) -> None:
    """Kill ``proc``'s group if it still runs, and wait for it."""
    if proc.poll() is None:
        _kill_group(proc)
        proc.wait()


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


class _WritableFolders:
    """The writable folders of one run, as the trusted side reads them.

    In the sandbox they are tmpfs mounts that the host cannot see by path; the wrapper sends the
    parent a descriptor of each, which keeps it alive after the sandbox is gone. Files are opened
    through those descriptors without following symlinks, so the student cannot make the trusted
    side read a host file. Without a sandbox the host folders themselves are used.
    """

    def __init__(self, sock: socket.socket, writable: dict[str, str], sandboxed: bool,
                 limit: int):
        self._sock, self._sandboxed, self._limit = sock, sandboxed, limit
        self._folders = {os.path.normpath(dest): host for host, dest in writable.items()}
        self._fds: dict[str, int] | None = None if sandboxed and writable else {}
        sock.setblocking(False)

    def _descriptors(self) -> dict[str, int]:
        """The tmpfs descriptors by sandbox path, once the wrapper has sent them."""
        if self._fds is None:
            try:
                _, fds, _, _ = socket.recv_fds(self._sock, 16, len(self._folders))
            except (BlockingIOError, ConnectionError):
                return {}
            self._fds = dict(zip(self._folders, fds))
        return self._fds

    def read(self, path: str) -> bytes:
        """The contents of the regular file at sandbox ``path`` (``b""`` if there is none)."""
        path = os.path.normpath(path)
        for dest, host in self._folders.items():
            if not path.startswith(dest + "/"):
                continue
            parts = path[len(dest) + 1:].split("/")
            if self._sandboxed:
                dir_fd = self._descriptors().get(dest)
                return b"" if dir_fd is None else _read_regular(dir_fd, parts, self._limit)
            try:
                dir_fd = os.open(host, os.O_RDONLY | os.O_DIRECTORY)
            except OSError:
                return b""
            try:
                return _read_regular(dir_fd, parts, self._limit)
            finally:
                os.close(dir_fd)
        return b""

    def copy_back(self) -> None:
        """Copy each tmpfs into its host folder (the sandbox is gone: nothing changes meanwhile)."""
        budget = [_COPY_MAX_ENTRIES]
        for dest, fd in self._descriptors().items():
            _copy_tree(fd, self._folders[dest], 0, budget)

    def close(self) -> None:
        for fd in (self._fds or {}).values():
            os.close(fd)


def _read_regular(dir_fd: int, parts: list[str], limit: int) -> bytes:
    """Up to ``limit`` bytes of the regular file at ``parts`` under ``dir_fd``, opened without
    following symlinks; ``b""`` if it is missing or not a regular file."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
    fds = [dir_fd]
    try:
        for part in parts[:-1]:
            fds.append(os.open(part, flags | os.O_DIRECTORY, dir_fd=fds[-1]))
        fds.append(os.open(parts[-1], flags, dir_fd=fds[-1]))
        return os.read(fds[-1], limit) if stat.S_ISREG(os.fstat(fds[-1]).st_mode) else b""
    except OSError:
        return b""
    finally:
        for fd in fds[1:]:
            os.close(fd)


def _copy_tree(src_fd: int, dest: str, depth: int, budget: list[int]) -> None:
    """Copy the directory open as ``src_fd`` into ``dest`` on the host, without following
    symlinks (see :class:`_WritableFolders`)."""
    os.makedirs(dest, exist_ok=True)
    with os.scandir(src_fd) as entries:
        names = [entry.name for entry in entries]
    for name in names:
        if budget[0] <= 0:
            return
        budget[0] -= 1
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=src_fd)
        except OSError:
            continue  # a symlink (ELOOP) or something else it may not open
        try:
            mode = os.fstat(fd).st_mode
            target = os.path.join(dest, name)
            if stat.S_ISDIR(mode) and depth < _COPY_MAX_DEPTH:
                _copy_tree(fd, target, depth + 1, budget)
            elif stat.S_ISREG(mode):
                with open(target, "wb") as out:
                    while chunk := os.read(fd, _READ_CHUNK):
                        out.write(chunk)
        finally:
            os.close(fd)
