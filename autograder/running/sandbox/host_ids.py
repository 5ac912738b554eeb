"""A uid of its own on the host for each sandbox, so that no two sandboxes share the kernel's
per-user limits.

The kernel counts some resources per user of the whole machine, whatever namespaces a process is
in: the memory of its pipes (``fs.pipe-user-pages-soft``: past it, new pipes are small and none may
grow), its keys (``kernel.keys.maxkeys``), its inotify instances, its queued signals. Sandboxes that
all ran as uid 65534 shared those with each other and with every other ``nobody`` process of the
machine: a student who took the pipe quota in one sandbox took it from the sandboxes graded beside
it, and from another course's grader on the same machine.

When the grader runs as root, each sandbox therefore runs as a uid of its own, the first free one
from :data:`FIRST_UID`, held with a lock on a file for as long as the sandbox lives. The locks live
in :data:`LOCKS`, which only root can write, so that the graders of several courses on one machine
share the range without ever sharing a uid. Inside the sandbox the uid is still 65534.

A grader that is not root cannot choose its sandboxes' uids: the sandbox's user namespace maps 65534
to the grader's own uid, and what keeps a student from hurting the next then is that the trusted
code inside never depends on a per-user quota (the warm server never sizes a pipe, see
:class:`autograder.running.harness.serve.Gate`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat

FIRST_UID = 1_879_048_192
"""The start of a range that systemd's table of uids leaves unused (1879048192 to 2147483647): no
account, dynamic user or container's range lives there."""
COUNT = 65_536
LOCKS = "/run/autograder-sandbox-uids"


def reserve(stack: contextlib.ExitStack) -> int:
    """A uid (also used as the gid) that no other sandbox of this machine holds; ``stack`` gives it
    back. Only for a grader that runs as root."""
    folder = _lock_folder()
    for uid in range(FIRST_UID, FIRST_UID + COUNT):
        fd = os.open(os.path.join(folder, str(uid)), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        stack.callback(os.close, fd)
        return uid
    raise RuntimeError(f"all {COUNT} sandbox uids from {FIRST_UID} are in use: too many sandboxes run at once")


def _lock_folder() -> str:
    """:data:`LOCKS`, made if need be, and refused unless only root can write it (anyone who could
    would choose which uid the next sandbox gets)."""
    os.makedirs(LOCKS, mode=0o700, exist_ok=True)
    info = os.lstat(LOCKS)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0 or info.st_mode & 0o022:
        raise RuntimeError(f"{LOCKS} must be a folder that only root can write; remove it and grade again")
    return LOCKS
