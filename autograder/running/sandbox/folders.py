"""The writable folders of a run, read by the trusted side while the run goes on and copied
back to the host after it, never following the student's symlinks."""

from __future__ import annotations

import os
import socket
import stat

_COPY_CHUNK = 1 << 16
"""Bytes read at a time when a file is copied back."""
_COPY_MAX_ENTRIES = 10_000
_COPY_MAX_DEPTH = 8
"""Bounds on what is copied back from a writable folder; its size is bounded by its tmpfs."""


class WritableFolders:
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
    symlinks (see :class:`WritableFolders`)."""
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
                    while chunk := os.read(fd, _COPY_CHUNK):
                        out.write(chunk)
        finally:
            os.close(fd)
