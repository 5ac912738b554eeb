"""Every check request and its result, in one SQLite file of the course folder; also the queue.

The queue is the table itself: a request waits as a row in state ``queued`` until a worker
claims it, so a service that restarts finds its waiting requests where they were. States:

- ``queued``: waiting for a worker; ``running``: a worker (``worker``) is grading it;
- ``done``: graded, ``result`` holds the items; ``refused``: not taken (limit, closed, bad notebook);
- ``expired``: waited longer than its assignment allows; ``failed``: workers died on it ``max_attempts`` times.

Only ``queued``, ``running`` and ``done`` requests count against a student's limits: a request the
service could not answer costs the student nothing.

Fairness (start-time fair queuing): each request gets a round when it comes. A student with
nothing waiting joins the round being served now; their next request goes one round after their
last one still waiting or being graded. Workers take the lowest round first, and within a round
the order requests came in. So a student's first waiting request goes before anyone's second,
a request's place only improves except when a student with nothing waiting comes in ahead, and
a request given back after a crash keeps its round, at the front. Every write that decides
something (a limit, a round, a claim) happens in one ``BEGIN IMMEDIATE`` transaction, so two
processes never both take the last check or the same request.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import sqlite3
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

COUNTED = ("queued", "running", "done")
WAITING = ("queued", "running")
HOUR = 3600.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    user TEXT NOT NULL,
    assignment TEXT NOT NULL,
    filename TEXT NOT NULL,
    notebook TEXT NOT NULL DEFAULT '',
    size INTEGER NOT NULL DEFAULT 0,
    submitted REAL NOT NULL,
    started REAL,
    finished REAL,
    state TEXT NOT NULL,
    round INTEGER NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0,
    worker TEXT,
    score REAL,
    max_score REAL,
    result TEXT,
    message TEXT NOT NULL DEFAULT '',
    content BLOB
);
CREATE INDEX IF NOT EXISTS requests_by_state ON requests (state, round, seq);
CREATE TABLE IF NOT EXISTS served (id INTEGER PRIMARY KEY CHECK (id = 0), round INTEGER NOT NULL);
INSERT OR IGNORE INTO served VALUES (0, 0);
CREATE INDEX IF NOT EXISTS requests_by_user ON requests (user, assignment, submitted);
"""


@dataclass
class Request:
    """One row of ``requests``; ``content`` (the notebook's bytes) is loaded only for a worker."""

    seq: int
    id: str
    user: str
    assignment: str
    filename: str
    notebook: str
    size: int
    submitted: float
    started: float | None
    finished: float | None
    state: str
    round: int
    attempts: int
    worker: str | None
    score: float | None
    max_score: float | None
    result: str | None
    message: str
    content: bytes | None = None

    @property
    def items(self) -> list[dict]:
        return json.loads(self.result)["items"] if self.result else []

    @property
    def waited(self) -> float | None:
        """Seconds from sending to the start of grading (or to now's answer, for those never graded)."""
        end = self.started if self.started is not None else self.finished
        return None if end is None else end - self.submitted


COLUMNS = [name for name in Request.__dataclass_fields__ if name != "content"]


def fair_order(queued: list[Request]) -> list[Request]:
    """``queued`` in the order workers take them: by round, then as they came."""
    return sorted(queued, key=lambda r: (r.round, r.seq))


class Store:
    """The requests table of one SQLite file; one instance per process (or thread)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA busy_timeout=30000")
        self.db.executescript(SCHEMA)

    def close(self) -> None:
        self.db.close()

    @contextlib.contextmanager
    def transaction(self):
        """A write transaction that holds SQLite's write lock from its first statement."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def _select(self, where: str, args=(), content: bool = False, tail: str = "") -> list[Request]:
        columns = COLUMNS + (["content"] if content else [])
        rows = self.db.execute(f"SELECT {', '.join(columns)} FROM requests WHERE {where} {tail}", args).fetchall()
        return [Request(**dict(zip(columns, row))) for row in rows]

    def _insert(self, user: str, assignment: str, notebook: str, filename: str, size: int, state: str,
                message: str, content: bytes | None, now: float) -> Request:
        request_id = secrets.token_urlsafe(12)
        self.db.execute("INSERT INTO requests (id, user, assignment, notebook, filename, size, submitted, state, "
                        "round, message, content, finished) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (request_id, user, assignment, notebook, filename, size, now, state,
                         self._round_for(user) if state == "queued" else 0, message, content,
                         None if state == "queued" else now))
        return self.get(request_id)

    def _round_for(self, user: str) -> int:
        """The round of a new request of ``user``: the one served now, or the one after their last waiting."""
        (served,) = self.db.execute("SELECT round FROM served").fetchone()
        marks = ", ".join("?" * len(WAITING))
        (last,) = self.db.execute(f"SELECT MAX(round) FROM requests WHERE user = ? AND state IN ({marks})",
                                  (user, *WAITING)).fetchone()
        return served if last is None else max(served, last + 1)

    # -- what a student does

    def usage(self, user: str, assignment: str, now: float) -> tuple[int, int, float | None]:
        """How many checks of ``assignment`` count against ``user`` in the last hour and in all,
        and when the oldest of the hour's stops counting (None when the hour has none)."""
        marks = ", ".join("?" * len(COUNTED))
        rows = self.db.execute(f"SELECT submitted FROM requests WHERE user = ? AND assignment = ? AND state IN "
                               f"({marks}) ORDER BY submitted", (user, assignment, *COUNTED)).fetchall()
        hour = [t for (t,) in rows if t > now - HOUR]
        return len(hour), len(rows), (hour[0] + HOUR if hour else None)

    def submit(self, user: str, assignment: str, notebook: str, filename: str, content: bytes, policy,
               max_waiting: int, now: float | None = None) -> Request:
        """Queues a check, or records it as refused with the reason, in one transaction with the
        counts it is decided on; the policy's limits hold exactly under any number of requests."""
        now = time.time() if now is None else now
        with self.transaction():
            reason = self._refusal(user, assignment, policy, max_waiting, now)
            if reason:
                return self._insert(user, assignment, notebook, filename, len(content), "refused", reason, None, now)
            return self._insert(user, assignment, notebook, filename, len(content), "queued", "", content, now)

    def _refusal(self, user: str, assignment: str, policy, max_waiting: int, now: float) -> str | None:
        closed = policy.closed_because(datetime.fromtimestamp(now, timezone.utc))
        if closed:
            return closed
        marks = ", ".join("?" * len(WAITING))
        (waiting,) = self.db.execute(f"SELECT COUNT(*) FROM requests WHERE user = ? AND state IN ({marks})",
                                     (user, *WAITING)).fetchone()
        if waiting >= max_waiting:
            return (f"You already have {waiting} check(s) waiting or being graded; a student may have "
                    f"{max_waiting} at once. Wait for their results, then check again.")
        hour, in_all, frees = self.usage(user, assignment, now)
        if in_all >= policy.in_all:
            return f"You have used all {policy.in_all} checks of this assignment."
        if hour >= policy.per_hour:
            minutes = max(1, round((frees - now) / 60))
            return (f"You have used your {policy.per_hour} checks of the last hour; the next one frees up in "
                    f"{minutes} minute(s), at {time.strftime('%H:%M', time.gmtime(frees))} UTC.")
        return None

    def refuse(self, user: str, assignment: str, filename: str, size: int, message: str) -> Request:
        """Records a request that was refused before any limit was looked at (a notebook too large, not
        valid JSON, not of this course), so that the instructor sees it too."""
        with self.transaction():
            return self._insert(user, assignment, "", filename, size, "refused", message, None, time.time())

    def get(self, request_id: str) -> Request | None:
        found = self._select("id = ?", (request_id,))
        return found[0] if found else None

    def of_user(self, user: str, limit: int = 200) -> list[Request]:
        return self._select("user = ?", (user,), tail=f"ORDER BY seq DESC LIMIT {int(limit)}")

    def every(self, limit: int = 1000) -> list[Request]:
        return self._select("1", tail=f"ORDER BY seq DESC LIMIT {int(limit)}")

    def place(self, request: Request) -> int | None:
        """A waiting request's place in the queue (1: next), or None when it is not waiting."""
        if request.state != "queued":
            return None
        (ahead,) = self.db.execute("SELECT COUNT(*) FROM requests WHERE state = 'queued' AND (round < ? OR "
                                   "(round = ? AND seq < ?))", (request.round, request.round, request.seq)).fetchone()
        return ahead + 1

    # -- what workers and the supervisor do

    def claim(self, worker: str, now: float | None = None) -> Request | None:
        """The next request in fair order, now ``running`` under ``worker``, with its notebook."""
        now = time.time() if now is None else now
        if self.db.execute("SELECT 1 FROM requests WHERE state = 'queued' LIMIT 1").fetchone() is None:
            return None  # an idle worker asks often: no write lock when there is nothing to take
        with self.transaction():
            order = fair_order(self._select("state = 'queued'"))
            if not order:
                return None
            seq = order[0].seq
            self.db.execute("UPDATE requests SET state = 'running', worker = ?, started = ?, attempts = attempts + 1 "
                            "WHERE seq = ?", (worker, now, seq))
            self.db.execute("UPDATE served SET round = MAX(round, ?)", (order[0].round,))
            return self._select("seq = ?", (seq,), content=True)[0]

    def finish(self, request: Request, worker: str, result: dict) -> bool:
        """Records the result of a request ``worker`` graded; False when it was no longer that worker's
        (given back meanwhile, after the service restarted): the result is then dropped."""
        with self.transaction():
            changed = self.db.execute(
                "UPDATE requests SET state = 'done', finished = ?, worker = NULL, score = ?, max_score = ?, "
                "result = ?, message = '' WHERE seq = ? AND state = 'running' AND worker = ?",
                (time.time(), result["score"], result["max_score"], json.dumps(result), request.seq, worker)).rowcount
        return changed == 1

    def give_back(self, workers_gone: set[str] | None, max_attempts: int) -> list[Request]:
        """Puts requests being graded by a worker that is gone (``workers_gone``; None: every worker,
        as when the service starts) back in the queue, in their old place, or, after ``max_attempts``
        tries, answers them as ``failed`` (the caller logs why: a student sees no grader internals).
        Returns those given back or failed."""
        with self.transaction():
            running = self._select("state = 'running'")
            lost = [r for r in running if workers_gone is None or r.worker in workers_gone]
            for request in lost:
                if request.attempts >= max_attempts:
                    self.db.execute(
                        "UPDATE requests SET state = 'failed', worker = NULL, finished = ?, message = ? WHERE seq = ?",
                        (time.time(), f"The grader failed {request.attempts} times on this request. It was not "
                                      "counted against your checks, and the service's log says why. Send it again, "
                                      "or tell your instructor if it keeps happening.", request.seq))
                else:
                    self.db.execute("UPDATE requests SET state = 'queued', worker = NULL, started = NULL WHERE seq = ?",
                                    (request.seq,))
            return lost

    def expire(self, max_wait_seconds, now: float | None = None) -> list[Request]:
        """Answers every request that has waited in the queue longer than its assignment allows
        (``max_wait_seconds(assignment)``) with a message that says so; they cost no check."""
        now = time.time() if now is None else now

        def waiting_too_long() -> list[Request]:
            return [r for r in self._select("state = 'queued'") if now - r.submitted > max_wait_seconds(r.assignment)]

        if not waiting_too_long():
            return []  # asked twice a second: no write lock when no request is late
        with self.transaction():
            late = waiting_too_long()
            for request in late:
                minutes = max_wait_seconds(request.assignment) / 60
                self.db.execute(
                    "UPDATE requests SET state = 'expired', finished = ?, message = ? WHERE seq = ?",
                    (now, f"The grader was too busy: your check waited more than {minutes:g} minutes for a free "
                          "worker (many students are checking at once). It was not counted against your checks; "
                          "send it again in a while, and use the visible checks meanwhile.", request.seq))
            return late
