"""Each run in namespaces of its own, out of reach of the server and of the runs after it.

The server holds ``CAP_SYS_ADMIN`` in the sandbox's user namespace (and only there). For each run
it forks a process that unshares a pid, mount and IPC namespace and forks the run's init; the
init hides ``/proc`` and the results folder, forks the run itself, drops every capability and
waits. So the run and anything it starts:

* see no process but their own (the server is not in their pid namespace: no signal,
  ``prlimit``, ``setpriority``, ``sched_setaffinity`` or ``ioprio_set`` can name it), and die
  with the init when the run ends;
* see no ``/proc`` at all (no command line, mount table or environment of anything) and cannot
  write where the server puts their results;
* start from the server's own limits, priority, CPU set and scheduler, and cannot raise them;
* have System V IPC and POSIX message queues of their own.

After each run the server compares its own state with what it was before the first run
(:class:`State`); a server that is not intact serves no more runs, and the next submission gets
a fresh sandbox. While a run goes on, the server watches from outside how much memory and CPU
the run's processes use together (:class:`Watch`): a run that holds more than its memory, or
keeps more than one core busy, is stopped or slowed before it can starve a neighbouring sandbox.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import resource
import signal
import time
import traceback
from dataclasses import dataclass

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID = 0x00020000, 0x08000000, 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 1 << 14, 1 << 18
PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 4, 38, 47, 4
SYS_CAPSET = {"x86_64": 126, "aarch64": 91}.get(os.uname().machine)
KEYCTL = {"x86_64": 250, "aarch64": 219}.get(os.uname().machine)
"""The keyctl system call's number (glibc has no wrapper for it)."""
KEYCTL_JOIN_SESSION_KEYRING = 1
RUN_OOM_SCORE = "1000"
"""A run's ``oom_score_adj``: the kernel's OOM killer takes runs before any trusted process, and a
run cannot lower it again."""
HIDDEN = ("/proc",)
"""Folders a run sees as empty (besides the results folder)."""
RLIMITS = tuple(sorted(getattr(resource, name) for name in dir(resource) if name.startswith("RLIMIT_")))
CORES_PER_RUN = 1.0
"""How many cores a run's processes may keep busy together (the grader's own runs use one)."""
MQUEUE = "/dev/mqueue"


@dataclass(frozen=True)
class Scratch:
    """Where a run may write: an empty tmpfs at each of ``folders``, mounted in the run's own mount
    namespace, bounded in bytes and in files, where nothing can be executed or loaded as code.

    A size limit alone lets a run pin kernel memory that no limit counts: a million empty files
    hold about a gigabyte of inodes. The inode bound stops that, and since the mounts die with the
    run's namespaces, before the server answers, what a run wrote is freed in its own time: the
    next submission starts on empty folders with nothing to wipe."""

    folders: tuple[str, ...]
    size_bytes: int
    inodes: int


class Libc:
    """The system calls Python's ``os`` lacks."""

    def __init__(self):
        self._libc = ctypes.CDLL(None, use_errno=True)

    def _check(self, result: int, what: str) -> None:
        if result != 0:
            raise OSError(ctypes.get_errno(), what)

    def unshare(self, flags: int) -> None:
        self._check(self._libc.unshare(flags), "unshare")

    def mount(self, source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
        encode = (lambda text: None if text is None else text.encode())
        self._check(self._libc.mount(encode(source), encode(target), encode(fstype), flags, encode(data)),
                    f"mount {target}")

    def prctl(self, option: int, value: int = 0) -> None:
        self._check(self._libc.prctl(option, value, 0, 0, 0), f"prctl {option}")

    def drop_capabilities(self) -> None:
        """Clears every capability for good (ambient, effective, permitted, inheritable), and
        forbids gaining any by executing a program."""
        self._check(self._libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clearing ambient capabilities")
        header, data = (ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()
        self._check(self._libc.syscall(SYS_CAPSET, header, data), "capset")
        self.prctl(PR_SET_NO_NEW_PRIVS, 1)

    @property
    def raw(self):
        return self._libc


@dataclass(frozen=True)
class State:
    """What of the server's own state a run could have changed, were it able to reach it."""

    rlimits: tuple[tuple[int, tuple[int, int]], ...]
    nice: int
    affinity: frozenset[int]
    scheduler: int
    oom_score: str
    descriptors: tuple[tuple[int, int, int], ...]

    @classmethod
    def now(cls) -> State:
        with open("/proc/self/oom_score_adj") as f:
            oom = f.read().strip()
        return cls(tuple((r, resource.getrlimit(r)) for r in RLIMITS), os.getpriority(os.PRIO_PROCESS, 0),
                   frozenset(os.sched_getaffinity(0)), os.sched_getscheduler(0), oom, _descriptors())

    def changes(self, other: State) -> list[str]:
        return [name for name in ("rlimits", "nice", "affinity", "scheduler", "oom_score", "descriptors")
                if getattr(self, name) != getattr(other, name)]

    def restore(self) -> None:
        """Gives the calling process (a run about to start) exactly this state."""
        for limit, value in self.rlimits:
            resource.setrlimit(limit, value)
        os.setpriority(os.PRIO_PROCESS, 0, self.nice)
        os.sched_setaffinity(0, self.affinity)
        os.umask(0o022)


def _descriptors() -> tuple[tuple[int, int, int], ...]:
    """The server's standard descriptors, each with its status flags and, for a pipe, its size: what
    a run would share with the server had it held them (a run holds its own output pipe instead)."""
    found = []
    for fd in (0, 1, 2):
        try:
            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        except OSError:
            continue
        try:
            size = fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
        except OSError:  # not a pipe
            size = -1
        found.append((fd, flags, size))
    return tuple(found)


def start_run(libc: Libc, run, state: State, folders: tuple[tuple[str, ...], Scratch], keep: tuple[int, ...],
              status_w: int, output: int) -> int:
    """Forks the process that makes the run's namespaces; returns its pid. In there, the run's
    init (pid 1 of the new pid namespace) starts ``run()`` (which must never return) in a process
    that holds no capability, sees the first of ``folders`` as empty read-only folders and the
    second's as fresh tmpfs mounts of its own (:class:`Scratch`), and writes the run's wait status to
    ``status_w`` when it ends. ``keep``: the descriptors the run may hold; ``output``: the pipe that
    is the run's standard output and error, its own."""
    pid = os.fork()
    if pid:
        return pid
    try:
        _keep_only(keep + (status_w, output))
        libc.unshare(CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC)
        init = os.fork()
        if init == 0:
            _init(libc, run, state, folders, keep, status_w, output)
        os.waitpid(init, 0)
    except BaseException:  # noqa: BLE001 - the harness's own failure: said in the output, the run gets no status
        traceback.print_exc()
    finally:
        os._exit(0)


def start_plain_run(libc: Libc, run, state: State, folders: tuple[tuple[str, ...], Scratch],
                    keep: tuple[int, ...], status_w: int, output: int) -> int:
    """Forks the run itself, without namespaces (no sandbox: nothing to hide it from, no
    capability to drop); returns its pid, whose wait status is the run's."""
    pid = os.fork()
    if pid == 0:
        try:
            _become_run(libc, state, keep, output, capabilities=False)
            run()
        except BaseException:  # noqa: BLE001 - the harness's own failure: said in the output
            traceback.print_exc()
        finally:
            os._exit(70)  # only if the run itself failed
    return pid


def _init(libc: Libc, run, state: State, folders: tuple[tuple[str, ...], Scratch], keep: tuple[int, ...],
          status_w: int, output: int) -> None:
    """The run's init: makes its view of the filesystem, starts the run, relays how it ended.
    When it exits, the kernel kills whatever the run left in its pid namespace."""
    try:
        libc.prctl(PR_SET_DUMPABLE, 1)  # /proc/self of a process that is not dumpable is root's
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(RUN_OOM_SCORE)
        libc.prctl(PR_SET_DUMPABLE, 0)  # the run must not trace its init
        libc.mount(None, "/", None, MS_REC | MS_PRIVATE)
        hidden, scratch = folders
        for folder in hidden:
            libc.mount("hidden", folder, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0555")
        for folder in scratch.folders:
            libc.mount("scratch", folder, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                       f"size={scratch.size_bytes},nr_inodes={scratch.inodes},mode=1777")
        if os.path.isdir(MQUEUE):  # the run's own IPC namespace's queues, which die with it
            libc.mount("mqueue", MQUEUE, "mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        child = os.fork()
        if child == 0:
            try:
                _become_run(libc, state, keep, output)
                run()
            except BaseException:  # noqa: BLE001 - as above
                traceback.print_exc()
            finally:
                os._exit(70)  # only if the run itself failed
        libc.drop_capabilities()
        while True:
            pid, status = os.waitpid(-1, 0)
            if pid == child:
                os.write(status_w, str(status).encode())
                break
    except BaseException:  # noqa: BLE001 - as above
        traceback.print_exc()
    finally:
        os._exit(0)


def _become_run(libc: Libc, state: State, keep: tuple[int, ...], output: int, capabilities: bool = True) -> None:
    """What a run starts from, whatever the runs before it did: the server's limits, priority, CPU
    set and umask, a session and a session keyring of its own, no capabilities, ``output`` as its
    standard output and error (a pipe of its own, whose flags and size die with it), and only the
    descriptors ``keep``."""
    os.dup2(output, 1)
    os.dup2(output, 2)
    _keep_only(keep)
    state.restore()
    os.setsid()
    if KEYCTL is not None:
        libc.raw.syscall(KEYCTL, KEYCTL_JOIN_SESSION_KEYRING, None)
    if capabilities:
        libc.drop_capabilities()
    libc.prctl(PR_SET_DUMPABLE, 1)


def _keep_only(keep: tuple[int, ...]) -> None:
    """Nothing on the standard input (the server's requests come there), and no descriptor but
    ``keep`` besides the output."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    start = 3
    for fd in sorted(keep):
        os.closerange(start, fd)
        start = fd + 1
    os.closerange(start, resource.getrlimit(resource.RLIMIT_NOFILE)[0])


class Watch:
    """The memory and CPU of a run's processes, seen from the server (their ``/proc`` entries in
    the sandbox's pid namespace, which the run itself cannot see): all processes but the sandbox's
    init, the server, the ``template`` runs are forked from and the run's two helpers."""

    def __init__(self, memory_bytes: int, helper: int, template: int):
        self.memory_bytes, self.helper, self.template = memory_bytes, helper, template
        self.exceeded = False
        self._ticks = os.sysconf("SC_CLK_TCK")
        self._last: tuple[float, float] | None = None
        self._me = os.getpid()

    def _pids(self) -> list[int]:
        pids = []
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) in (1, self._me, self.template, self.helper):
                continue
            try:
                with open(f"/proc/{name}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if parent != self.helper:  # the run's init, a child of the helper, is not the run
                pids.append(int(name))
        return pids

    def run_pid(self) -> int | None:
        """The run's process, or None when the run is not one process (a run starts none)."""
        pids = self._pids()
        return pids[0] if len(pids) == 1 else None

    def check(self) -> None:
        """Stops the run when its processes hold more anonymous memory than ``memory_bytes``
        together; pauses them for a while when they used more than :data:`CORES_PER_RUN` cores
        since the last check."""
        pids = self._pids()
        anonymous, cpu = 0, 0.0
        for pid in pids:
            try:
                with open(f"/proc/{pid}/status") as f:
                    anonymous += next((int(line.split()[1]) * 1024 for line in f if line.startswith("RssAnon:")), 0)
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                cpu += (int(fields[11]) + int(fields[12])) / self._ticks
            except (OSError, IndexError, ValueError):
                continue
        if anonymous > self.memory_bytes:
            self.exceeded = True
            self._signal(pids, signal.SIGKILL)
            return
        now = time.monotonic()
        if self._last is not None:
            used, elapsed = cpu - self._last[1], now - self._last[0]
            if used > CORES_PER_RUN * elapsed + 0.05:
                self._signal(pids, signal.SIGSTOP)
                time.sleep(min(used - CORES_PER_RUN * elapsed, 0.5))
                self._signal(pids, signal.SIGCONT)
                now = time.monotonic()
        self._last = (now, cpu)

    @staticmethod
    def _signal(pids: list[int], sig: int) -> None:
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
