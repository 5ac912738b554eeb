"""What confines the student's process: bubblewrap's options, the trusted wrapper that starts
the command inside, and the limits (see :mod:`autograder.running.sandbox` for what the process gets).

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
  first process inside (:data:`WRAPPER`, trusted code) holds only ``CAP_SETUID`` and
  ``CAP_SETGID``; it drops for real to a uid and gid that this sandbox alone holds on the machine
  (:mod:`autograder.running.sandbox.host_ids`: the kernel's per-user quotas, such as the memory of pipes,
  are then the sandbox's own), and all capabilities go with uid 0. It then creates a user namespace
  of its own that maps 65534 to that uid and forbids nested user namespaces, sets the limits, and
  executes the student's command. The student is uid 65534 inside and not root outside, so the
  kernel enforces ``RLIMIT_NPROC``, counted in this sandbox's namespace only. (Dropping root
  *before* bwrap was tried: bwrap then cannot reach an interpreter under ``/root``, not even
  through ``--ro-bind-fd``, because it resolves the path.)
* When the grader runs as another user (the course's container), bwrap runs unprivileged and
  creates the user namespace itself (``--unshare-user --uid 65534 --disable-userns``); the wrapper
  sets the limits inside it, so again they count this sandbox alone.

A warm session's server (:mod:`autograder.running.harness`) keeps one capability, ``CAP_SYS_ADMIN`` in the
sandbox's own user namespace (never the host's), and nothing else: with it, it gives every run a
pid, mount and IPC namespace of its own, so that no run can reach the server or the runs after it
(see :mod:`autograder.running.harness.isolate`). Each run drops it before any student code. A one-shot
command (:func:`~autograder.running.sandbox.run_sandboxed`) gets none.

Memory: ``RLIMIT_AS`` is per process. ``import torch`` and a small forward/backward need about
0.7 GiB of address space with 2 threads and 1.5 GiB with 16, so the default of 4 GiB lets torch
work while a 50 GB allocation fails at once. A process can still fork up to ``processes`` children
of that size; tmpfs folders count against their ``--size``, not against ``RLIMIT_AS``.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from autograder.running.sandbox.environment import SYSTEM_PATHS, prepared, sandbox_path

SANDBOX_UID = 65534
"""uid and gid of the student's process (``nobody``/``nogroup`` on Debian)."""
_CAP_SYS_ADMIN = 21
_SYS_CAPGET, _SYS_CAPSET = {"x86_64": (125, 126), "aarch64": (90, 91)}.get(os.uname().machine, (None, None))

_ETC_PATHS = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives")
_PASSWD = f"nobody:x:{SANDBOX_UID}:{SANDBOX_UID}:nobody:/tmp:/usr/sbin/nologin\n"
_GROUP = f"nogroup:x:{SANDBOX_UID}:\n"

WRAPPER = f"""\
import json, os, resource, socket, sys
spec = json.loads(sys.argv[1])
sock = socket.socket(fileno=spec["sock"])
fds = [os.open(path, os.O_RDONLY | os.O_DIRECTORY) for path in spec["writable"]]
if fds:
    socket.send_fds(sock, [b"w"], fds)
sock.close()
for fd in fds:
    os.close(fd)
if spec["host_uid"] is not None:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    host = spec["host_uid"]
    os.setgroups([])
    os.setgid(host)
    os.setuid(host)
    libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: setuid cleared it; /proc/self/*_map need it
    if libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUSER)")
    for path, text in (("/proc/self/uid_map", f"{SANDBOX_UID} {{host}} 1"),
                       ("/proc/self/setgroups", "deny"),
                       ("/proc/self/gid_map", f"{SANDBOX_UID} {{host}} 1"),
                       ("/proc/sys/user/max_user_namespaces", "0")):
        with open(path, "w") as f:
            f.write(text)
    if spec["keep_sys_admin"]:  # inheritable, then ambient: it survives the exec (bwrap does this when not root)
        header, data = (ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()
        libc.syscall({_SYS_CAPGET}, header, data)
        data[2] |= 1 << {_CAP_SYS_ADMIN}
        if libc.syscall({_SYS_CAPSET}, header, data) != 0 or libc.prctl(47, 2, {_CAP_SYS_ADMIN}, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "keeping CAP_SYS_ADMIN for the server")
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
    scratch_inodes: int = 4096
    """Files and folders of each tmpfs a warm session's run writes (:mod:`autograder.running.harness.isolate`):
    empty files cost no bytes, but each pins about a kibibyte of the kernel's memory."""


@dataclass(frozen=True)
class Isolation:
    """What confines student code on this machine."""

    name: str
    """``"bubblewrap"`` or ``"none"``."""
    detail: str
    """One line for a TA: what is in force, or why bubblewrap is unavailable and what to do."""


def bwrap_args(readonly: dict[str, str], writable: dict[str, str], limits: Limits, cwd: str,
               info_fd: int, data_fds: list[int], serve: bool = False) -> list[str]:
    """The bwrap options that build the sandbox described in :mod:`autograder.running.sandbox`; with
    ``serve``, the command keeps ``CAP_SYS_ADMIN`` in the sandbox's user namespace (see above).
    ``data_fds`` hold the contents of ``/etc/passwd`` and ``/etc/group`` (:func:`data_files`)."""
    parents, size = _Parents(), str(limits.scratch_bytes)
    return (_namespace_args(info_fd, serve) + _system_args(parents, data_fds, size)
            + _bind_args(parents, readonly, writable, size) + ["--remount-ro", "/", "--chdir", cwd])


class _Parents:
    """The folders made in the sandbox so far; called with a path, the options that create its
    missing parents traversable (bwrap would make them 0700)."""

    def __init__(self):
        self.made = {"/"}

    def __call__(self, dest: str) -> list[str]:
        out, chain, parent = [], [], os.path.dirname(dest)
        while parent not in self.made:
            chain.append(parent)
            parent = os.path.dirname(parent)
        for path in reversed(chain):
            out += ["--perms", "0755", "--dir", path]
            self.made.add(path)
        self.made.add(dest)
        return out


def _namespace_args(info_fd: int, serve: bool) -> list[str]:
    """New namespaces for everything, and who the sandbox's user is."""
    args = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--hostname", "sandbox", "--die-with-parent", "--new-session",
            "--info-fd", str(info_fd)]
    if os.geteuid() == 0:
        return args + ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]  # for WRAPPER's drop
    return args + ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
                   "--disable-userns", *(["--cap-add", "CAP_SYS_ADMIN"] if serve else [])]


def _system_args(parents: _Parents, data_fds: list[int], size: str) -> list[str]:
    """The system read-only, its own /etc files, fresh /proc, /dev, /tmp and /dev/shm, and the
    grader's environment and interpreter, copied so that they name nothing of the host, at fixed paths
    (:mod:`~autograder.running.sandbox.environment`)."""
    args = []
    for path in SYSTEM_PATHS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
        else:
            continue
        parents.made.add(path)
    for path in _ETC_PATHS:
        if os.path.exists(path):
            args += parents(path) + ["--ro-bind", path, path]
    for fd, path in zip(data_fds, ("/etc/passwd", "/etc/group")):
        args += parents(path) + ["--perms", "0444", "--ro-bind-data", str(fd), path]
    args += ["--proc", "/proc", "--dev", "/dev", "--mqueue", "/dev/mqueue"]
    args += parents("/tmp") + ["--perms", "1777", "--size", size, "--tmpfs", "/tmp"]
    args += ["--perms", "1777", "--size", size, "--tmpfs", "/dev/shm"]
    for host, path in prepared():
        args += parents(path) + ["--ro-bind", host, path]
    return args


def _bind_args(parents: _Parents, readonly: dict[str, str], writable: dict[str, str], size: str) -> list[str]:
    """The run's own folders, shallowest first: read-only binds, and writable ones as fresh tmpfs."""
    args = []
    binds = [(os.path.normpath(dest), "ro", src) for src, dest in readonly.items()]
    binds += [(os.path.normpath(dest), "rw", src) for src, dest in writable.items()]
    for dest, kind, src in sorted(binds, key=lambda bind: bind[0].count("/")):
        args += parents(dest)
        if kind == "ro":
            args += ["--ro-bind", src, dest]
        else:
            args += ["--perms", "1777", "--size", size, "--tmpfs", dest]
    return args


def data_files() -> list[str]:
    """What the sandbox's files made from data hold, in the order :func:`bwrap_args` takes them."""
    return [_PASSWD, _GROUP]


def sandbox_python() -> str:
    """The grader's interpreter, as a sandbox finds it."""
    return sandbox_path(sys.executable)
