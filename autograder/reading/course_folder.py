"""Why a course folder cannot be used, in one sentence, before a command writes anything: it does not
exist, nothing is mounted at the TA container's ``/course``, or the command's user may not write it.

In the container the course folder is ``/course``, which says little to a TA: docs/containers.md's
commands pass the host's name for it in ``AUTOGRADER_COURSE_ON_HOST``, and every sentence here names
both.
"""

from __future__ import annotations

import os
from pathlib import Path

from autograder.reading.errors import GradingError

MOUNTED = Path("/course")
"""Where the TA's container expects the course folder (autograder/Dockerfile)."""
WRITTEN = (".grading", "gradebook.db", "autograded", "feedback", "reports")
"""What grading writes in a course folder, besides new files in the folder itself."""


def in_container() -> bool:
    """Whether this process runs in a container (podman writes the first file, docker the second)."""
    return Path("/run/.containerenv").exists() or Path("/.dockerenv").exists()


def named(path: Path) -> str:
    """``path``, with the host's name for it where it lies in the container's mounted course folder."""
    host = os.environ.get("AUTOGRADER_COURSE_ON_HOST")
    if host and path.is_relative_to(MOUNTED):
        return f"{path} ({Path(host) / path.relative_to(MOUNTED)} on the host)"
    return str(path)


def refused(path: Path, reason: str = "may not write") -> str:
    """The sentence for a path this process's user may not use (``reason``), with what to do."""
    uid, gid = os.geteuid(), os.getegid()
    if in_container():
        fix = ("run the container with --user set to the course folder's owner, as docs/containers.md shows "
               "(--user \"$(stat -c %u:%g /path/to/course)\" with podman as root or docker)")
    else:
        fix = f"run as the course folder's owner, or give it to this user (chown -R {uid}:{gid} on the folder)"
    return f"uid {uid} {reason} {named(path)}: {fix}."


def check(root: Path) -> None:
    """Raises :class:`GradingError` unless ``root`` exists, holds something and may be written
    where grading writes; whether it is a course folder at all, :meth:`Course.require` says."""
    if not root.is_dir():
        raise GradingError(f"The course folder {named(root)} does not exist: run this in the course folder, or "
                           "pass --course DIR.")
    if root == MOUNTED and in_container() and os.access(root, os.R_OK) and not any(root.iterdir()):
        raise GradingError("/course is empty: mount the course folder there with -v /path/to/course:/course, as "
                           "docs/containers.md shows.")
    blocked = [path for path in (root, *(root / name for name in WRITTEN))
               if path.exists() and not os.access(path, os.R_OK | os.W_OK | (os.X_OK if path.is_dir() else 0))]
    if blocked:
        raise GradingError(refused(blocked[0]))
