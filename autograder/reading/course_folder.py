"""Why a course folder cannot be used, in one sentence, before a command writes anything: it does not
exist, nothing is mounted at the TA container's ``/course``, the command's user may not write it, or a
student named on the command line has no submission in it.

In the container the course folder is ``/course``, which says little to a TA: docs/containers.md's
commands pass the host's name for it in ``AUTOGRADER_COURSE_ON_HOST``, and every sentence here names
both.
"""

from __future__ import annotations

import difflib
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


def require_submissions(course, assignment: str, students: list[str] | None) -> None:
    """Refuses, before anything is written, a ``--student`` who has no submission (a typo, most
    often): grading one would put a student with no points in the gradebook and every export."""
    missing = [student for student in students or [] if not course.submission_folder(assignment, student).is_dir()]
    if not missing:
        return
    known = course.students(assignment)
    looked = []
    for student in missing:
        close = difflib.get_close_matches(student, known, n=3, cutoff=0.6)
        looked.append(f"{student} (nothing in {course.submission_folder(assignment, student)}"
                      + (f"; did you mean {' or '.join(close)}?)" if close else ")"))
    raise GradingError(f"no submission of {assignment} for {', '.join(looked)}. The grader reads a submission only "
                       f"from submitted/<student>/{assignment}/ (where nbgrader collect and zip_collect put it). "
                       "Nothing was graded or written.")
