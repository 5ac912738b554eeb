"""Who gets checks: the students on the course's roster, which is nbgrader's gradebook.

The Hub's role gives the service to every Hub user, but checks are the course's, so only the
students an instructor enrolled (``nbgrader db student add <username>``, or formgrader's Manage
Students) get a quota; anyone else is told to ask for that. A student's nbgrader id is their Hub
username, as nbgrader's own JupyterHub setup has it.

The roster is read again when it is older than :data:`FRESH_SECONDS`, so that a student added
while the service runs gets in within seconds, without a restart, and a student removed loses
checks as soon; between reads, requests are answered from the last one. A read opens the
gradebook as the grader does (:func:`autograder.recording.record.gradebook`) in a thread, so that the
event loop never waits on the database, and requests that come during a read share it.
"""

from __future__ import annotations

import asyncio
import logging
import time

from tornado import web

from autograder.reading.course import Course
from autograder.recording.record import gradebook

FRESH_SECONDS = 5.0


def not_on_roster(user: str) -> str:
    return (f"{user} is not on this course's roster, so the grading service has no checks for you. Ask the "
            f"instructor to add you to the roster (nbgrader db student add {user}), then reload this page.")


def students(course: Course) -> frozenset[str]:
    """The ids of the students in the course's gradebook."""
    with gradebook(course) as book:
        return frozenset(student.id for student in book.students)


class Roster:
    """The course's roster as last read, and the read under way, if any."""

    def __init__(self, course: Course):
        self.course = course
        self.names: frozenset[str] = frozenset()
        self.read_at = float("-inf")
        self.reading: asyncio.Future | None = None

    async def holds(self, user: str) -> bool:
        if time.monotonic() - self.read_at > FRESH_SECONDS:
            if self.reading is None:
                self.reading = asyncio.ensure_future(self.read())
            await asyncio.shield(self.reading)
        return user in self.names

    async def read(self) -> None:
        try:
            names = await asyncio.get_running_loop().run_in_executor(None, students, self.course)
        except Exception:
            logging.getLogger("autograder.serve").exception("The course's roster (its gradebook) could not be read")
            raise web.HTTPError(503, "The service could not read the course's roster. Tell your instructor; try "
                                     "again in a minute.") from None
        finally:
            self.reading = None
        self.names, self.read_at = names, time.monotonic()
