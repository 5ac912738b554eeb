"""What the instructor allows students to check, read from the course's ``nbgrader_config.py``.

Set per assignment, as ``c.CheckService.assignments``::

    c.CheckService.assignments = {
        "01_attention_basics": {"open": True, "per_hour": 5, "in_all": 40, "show": "hint",
                                "deadline": "2026-12-04T17:00:00+01:00"},
    }

An assignment that is not listed is closed. The file is read again whenever it changes, so an
instructor opens, closes or loosens checks without restarting the service.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from datetime import datetime
from pathlib import Path

from traitlets import Dict, Int, Unicode
from traitlets.config import Configurable

from autograder.reading.config import CONFIG_FILE, read_config
from autograder.reading.errors import GradingError

SHOWN = ("status", "hint")


class CheckService(Configurable):
    """What ``c.CheckService`` may set in ``nbgrader_config.py``."""

    assignments = Dict(help="Per assignment: open, per_hour, in_all, show ('status' or 'hint'), deadline "
                            "(ISO 8601 with its UTC offset) and max_wait_minutes. Unlisted assignments are "
                            "closed.").tag(config=True)
    workers = Int(2, help="Requests graded side by side, each by a worker process with a warm sandbox."
                  ).tag(config=True)
    max_waiting = Int(2, help="Requests one student may have waiting or being graded at once.").tag(config=True)
    max_notebook_mb = Int(5, help="The largest notebook a student may send, in MiB.").tag(config=True)
    max_sending = Int(2, min=1, help="Notebooks one student may be sending at once (each body goes to a file "
                                     "while it comes); one more is answered 429 before any of it is read."
                      ).tag(config=True)
    body_seconds = Int(120, min=5, help="How long sending one notebook may take; past it the connection is closed "
                                        "(read when the service starts).").tag(config=True)
    read_seconds = Int(30, min=1, help="How long reading a sent notebook may take (in a child process, off the "
                                       "service's loop); a notebook that takes longer is refused (422)."
                       ).tag(config=True)
    read_memory_mb = Int(512, min=16, help="How much memory reading a sent notebook may take, in MiB; a notebook that "
                                           "takes more is refused (413).").tag(config=True)
    max_attempts = Int(3, help="Times a request is tried before it is answered as failed (a worker died or the grader "
                               "raised on it each time); a failed request counts as a check, and its notebook is "
                               "kept in .grading/check_failures/ for the instructor.").tag(config=True)
    max_refused_per_hour = Int(20, min=1, help="Refused requests of one student recorded in any 60 minutes; past "
                                               "it, a refused request is answered 429 and not stored.").tag(config=True)
    database = Unicode("check_requests.db", help="The SQLite file of every request and result, relative to the "
                                                 "course folder.").tag(config=True)


@dataclass(frozen=True)
class Policy:
    """The checks of one assignment: whether they are open, how many a student gets in an hour
    (a sliding 60 minutes) and in all, what a student sees of each item ('status': status and
    points; 'hint': also the message, the mistake's name and its hint), when they close, and how
    long a request may wait in the queue."""

    open: bool = False
    per_hour: int = 5
    in_all: int = 40
    show: str = "hint"
    deadline: datetime | None = None
    max_wait_minutes: float = 15.0

    @classmethod
    def parse(cls, assignment: str, raw: dict) -> Policy:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        where = f"c.CheckService.assignments[{assignment!r}]"
        if unknown:
            raise GradingError(f"{where} has unknown settings {unknown}; the settings are {sorted(known)}.")
        values = dict(raw)
        if values.get("show", "hint") not in SHOWN:
            raise GradingError(f"{where}['show'] is {values['show']!r}; it is 'status' or 'hint'.")
        for name in ("per_hour", "in_all"):
            if name in values and (not isinstance(values[name], int) or values[name] < 0):
                raise GradingError(f"{where}[{name!r}] is {values[name]!r}; it is a whole number, 0 or more.")
        if values.get("deadline") is not None:
            values["deadline"] = parse_deadline(where, values["deadline"])
        return cls(**values)

    def closed_because(self, now: datetime) -> str | None:
        """Why no new check is taken now, or None when checks are open."""
        if not self.open:
            return "Checks of this assignment are not open: the instructor has not opened them."
        if self.deadline and now >= self.deadline:
            return f"Checks of this assignment closed at its deadline, {self.deadline:%Y-%m-%d %H:%M %Z}."
        return None


def parse_deadline(where: str, value) -> datetime:
    """A deadline with its UTC offset: a time without one is ambiguous on a server in another zone."""
    try:
        deadline = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    except ValueError:
        raise GradingError(f"{where}['deadline'] is {value!r}; write it as ISO 8601 with its UTC offset, for "
                           f"example '2026-12-04T17:00:00+01:00'.") from None
    if deadline.tzinfo is None:
        raise GradingError(f"{where}['deadline'] is {value!r}, which has no UTC offset; add one, for example "
                           f"'{deadline.isoformat()}+00:00'.")
    return deadline


class Policies:
    """The service's settings and every assignment's policy, read again when ``nbgrader_config.py``
    changes (its modification time)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._stamp: int | None = None
        self.load()

    def load(self) -> None:
        stamp = os.stat(self.root / CONFIG_FILE).st_mtime_ns
        if stamp == self._stamp:
            return
        settings = CheckService(config=read_config(self.root))
        policies = {name: Policy.parse(name, raw) for name, raw in settings.assignments.items()}
        self.settings, self.policies, self._stamp = settings, policies, stamp

    def for_assignment(self, assignment: str) -> Policy:
        self.load()
        return self.policies.get(assignment, Policy())

    @property
    def database(self) -> Path:
        return self.root / self.settings.database
