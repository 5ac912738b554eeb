"""Every check request and its result, in one SQLite file of the course folder; also the queue.

The queue is the table itself: a request waits as a row in state ``queued`` until a worker
claims it, so a service that restarts finds its waiting requests where they were. States:

- ``queued``: waiting for a worker; ``running``: a worker (``worker``) is grading it;
- ``done``: graded, ``result`` holds the items; ``refused``: not taken (limit, closed, bad notebook);
- ``expired``: waited in the queue longer than its assignment allows; ``failed``: the grader failed on it
  ``max_attempts`` times, or failed on it and it then waited too long.

``queued``, ``running``, ``done`` and ``failed`` requests count against a student's limits: a
notebook that makes the grader fail costs a check, so that it cannot keep the workers busy
without end. Refused and expired ones cost no check (an expired one is the service's fault), but
only a request the grader never began can expire: one given back after a try that did not finish
ends as ``failed`` when it waits too long, since a notebook that kills its worker would otherwise
cost nothing (and each try restarts a sandbox). Expiry counts the time spent in the queue only
(``queued_wait``, and the time since ``queued_since``), never the time a worker spent on it.
Refusals have a limit of their own (``max_refused`` in the last hour): past it a request is
answered with :class:`TooManyRefused` and nothing is stored.

How large the file grows, per student. Every text a student chooses is cut short (a file name to
:data:`MAX_FILENAME` characters, a message to :data:`MAX_MESSAGE`, a result's item texts to
:data:`MAX_ITEM_TEXT`, its notes to :data:`MAX_NOTES`), and a request's notebook is kept only while
it waits or is graded, and for a failed request (for the instructor to see why). So a student's
rows take at most:

- refused and expired requests: the latest :data:`KEPT_UNCOUNTED` (or ``max_refused``, if larger)
  of each kind are kept, the older ones deleted in the transaction that adds one; each row takes
  at most :data:`UNCOUNTED_ROW_BYTES`, so 2 x 50 x 5 KiB = 500 KiB however many a student sends
  (tests/test_service_store.py sends 2,000, with megabyte file names, and measures the file);
- checks (counted): at most the assignments' ``in_all``, each its result's items (ours, with texts
  cut) and, for a failed one, its notebook (at most ``max_notebook_mb``);
- notebooks waiting: at most ``max_waiting``, of at most ``max_notebook_mb`` each.

Pages freed by deleted rows and dropped notebooks are used again, so the file grows by these
bounds, not by what a student sends; the write-ahead log is cut back to
:data:`autograder.service.schema.WAL_BYTES`.

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
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from autograder.service import schema

COUNTED = ("queued", "running", "done", "failed")
WAITING = ("queued", "running")
HOUR = 3600.0
MAX_FILENAME = 120
"""Characters of a file name kept: it shows in pages, and a student may send a megabyte of it."""
MAX_MESSAGE = 600
"""Characters of a request's message (ours, quoting at most a file name and 40 characters of a student's)."""
MAX_ITEM_TEXT = 1000
"""Characters kept of each text of a result's item (a message may quote what a student's code raised)."""
MAX_NOTES = 20
"""A result's notes kept (preflight's repairs and flags), each cut to MAX_MESSAGE characters."""
ITEM_FIELDS = ("grade_id", "status", "score", "max_score", "message", "public", "mistake", "hint", "deduction")
"""What the service keeps of a graded item: what :mod:`autograder.service.shown` may show, not the answer."""
KEPT_UNCOUNTED = 50
"""Refused requests, and expired ones, kept per student; older ones are deleted."""
UNCOUNTED_ROW_BYTES = 5 * 1024
"""The most a refused or expired request takes in the file, indexes and page slack included (measured
by tests/test_service_store.py)."""
FAILED_COUNTS = ("It counts as one of your checks, so that such a notebook cannot keep the graders busy. Your "
                 "instructor has the notebook and the log of what went wrong: tell them the address of this page. "
                 "Meanwhile, use the visible checks.")
"""The end of a failed request's message: why it costs a check, and what to do."""


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
    queued_since: float | None  # when it last went (back) into the queue; None once taken out
    queued_wait: float          # seconds it waited in the queue before that
    content: bytes | None = None

    @property
    def items(self) -> list[dict]:
        return json.loads(self.result)["items"] if self.result else []

    def time_queued(self, now: float) -> float:
        """Seconds it has spent in the queue, in all its turns there, up to ``now``."""
        return self.queued_wait + (max(0.0, now - self.queued_since) if self.queued_since is not None else 0.0)

    @property
    def waited(self) -> float | None:
        """Seconds from sending to the start of grading (or to now's answer, for those never graded)."""
        end = self.started if self.started is not None else self.finished
        return None if end is None else end - self.submitted


COLUMNS = [name for name in Request.__dataclass_fields__ if name != "content"]


class TooManyRefused(Exception):
    """A request refused while its student's refusals of the last hour are at their limit: it is
    answered with :attr:`message` (the reason, and that it was not recorded) and not stored."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def cut(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters, storable as UTF-8 (JSON may carry lone surrogates)."""
    text = text if len(text) <= limit else text[:limit - 1] + "…"
    return text.encode("utf-8", "replace").decode("utf-8")


def kept_result(result: dict) -> dict:
    """What the service keeps of a grading result: the fields a student may be shown of each item,
    its texts cut (a message may quote a student's output), and the first notes, cut."""
    items = [{key: cut(item[key], MAX_ITEM_TEXT) if isinstance(item.get(key), str) else item.get(key)
              for key in ITEM_FIELDS} for item in result["items"]]
    notes = [cut(str(note), MAX_MESSAGE) for note in result.get("notes", [])[:MAX_NOTES]]
    return {**result, "items": items, "notes": notes}


def fair_order(queued: list[Request]) -> list[Request]:
    """``queued`` in the order workers take them: by round, then as they came."""
    return sorted(queued, key=lambda r: (r.round, r.seq))


class Store:
    """The requests table of one SQLite file; one instance per process (or thread)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = schema.connect(self.path)

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
                        "round, message, content, finished, queued_since) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (request_id, user, assignment, notebook, cut(filename, MAX_FILENAME), size, now, state,
                         self._round_for(user) if state == "queued" else 0, cut(message, MAX_MESSAGE), content,
                         None if state == "queued" else now, now if state == "queued" else None))
        return self.get(request_id)

    def _prune(self, user: str, state: str, keep: int) -> None:
        """Deletes all but the latest ``keep`` requests of ``user`` in ``state`` (refused or expired):
        what bounds the file's growth however many such requests a student sends."""
        self.db.execute("DELETE FROM requests WHERE user = ? AND state = ? AND seq NOT IN (SELECT seq FROM requests "
                        "WHERE user = ? AND state = ? ORDER BY seq DESC LIMIT ?)", (user, state, user, state, keep))

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
               max_waiting: int, max_refused: int, now: float | None = None) -> Request:
        """Queues a check, or records it as refused with the reason, in one transaction with the
        counts it is decided on; the policy's limits hold exactly under any number of requests.
        Raises :class:`TooManyRefused` for a refusal past ``max_refused`` in the hour."""
        now = time.time() if now is None else now
        with self.transaction():
            reason = self._refusal(user, assignment, policy, max_waiting, now)
            if reason:
                return self._refuse(user, assignment, notebook, filename, len(content), reason, max_refused, now)
            return self._insert(user, assignment, notebook, filename, len(content), "queued", "", content, now)

    def refuse(self, user: str, filename: str, size: int, message: str, max_refused: int,
               now: float | None = None) -> Request:
        """Records a request that was refused before any limit was looked at (a notebook too large, not
        valid JSON, not of this course), so that the instructor sees it too; raises
        :class:`TooManyRefused` past ``max_refused`` refusals in the hour."""
        now = time.time() if now is None else now
        with self.transaction():
            return self._refuse(user, "", "", filename, size, message, max_refused, now)

    def _refuse(self, user: str, assignment: str, notebook: str, filename: str, size: int, message: str,
                max_refused: int, now: float) -> Request:
        """A refused request stored (and the oldest beyond those kept deleted), unless the student's
        refusals of the last hour are at ``max_refused``."""
        (recent,) = self.db.execute("SELECT COUNT(*) FROM requests WHERE user = ? AND state = 'refused' AND "
                                    "submitted > ?", (user, now - HOUR)).fetchone()
        if recent >= max_refused:
            (nth,) = self.db.execute("SELECT submitted FROM requests WHERE user = ? AND state = 'refused' ORDER BY "
                                     "submitted DESC LIMIT 1 OFFSET ?", (user, max_refused - 1)).fetchone()
            raise TooManyRefused(f"{message} (This request was not recorded: {recent} of your requests were refused "
                                 f"in the last hour, the most the service records until "
                                 f"{time.strftime('%H:%M', time.gmtime(nth + HOUR))} UTC. Fix what this message "
                                 f"says before you send again.)")
        request = self._insert(user, assignment, notebook, filename, size, "refused", message, None, now)
        self._prune(user, "refused", max(KEPT_UNCOUNTED, max_refused))
        return request

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

    def get(self, request_id: str) -> Request | None:
        found = self._select("id = ?", (request_id,))
        return found[0] if found else None

    def of_user(self, user: str, limit: int = 200) -> list[Request]:
        return self._select("user = ?", (user,), tail=f"ORDER BY seq DESC LIMIT {int(limit)}")

    def every(self, limit: int, offset: int = 0) -> list[Request]:
        """Every student's requests, newest first, ``limit`` of them after the first ``offset``."""
        return self._select("1", tail=f"ORDER BY seq DESC LIMIT {int(limit)} OFFSET {int(offset)}")

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
            self.db.execute("UPDATE requests SET state = 'running', worker = ?, started = ?, attempts = attempts + 1, "
                            "queued_wait = ?, queued_since = NULL WHERE seq = ?",
                            (worker, now, order[0].time_queued(now), seq))
            self.db.execute("UPDATE served SET round = MAX(round, ?)", (order[0].round,))
            return self._select("seq = ?", (seq,), content=True)[0]

    def finish(self, request: Request, worker: str, result: dict) -> bool:
        """Records the result of a request ``worker`` graded (what :func:`kept_result` keeps of it) and drops
        its notebook; False when it was no longer that worker's (given back meanwhile, after the service
        restarted): the result is then dropped."""
        with self.transaction():
            changed = self.db.execute(
                "UPDATE requests SET state = 'done', finished = ?, worker = NULL, score = ?, max_score = ?, "
                "result = ?, message = '', content = NULL WHERE seq = ? AND state = 'running' AND worker = ?",
                (time.time(), result["score"], result["max_score"], json.dumps(kept_result(result)), request.seq,
                 worker)).rowcount
        return changed == 1

    def give_back(self, workers_gone: set[str] | None, max_attempts: int) -> list[Request]:
        """Puts requests being graded by a worker that is gone (``workers_gone``; None: every worker,
        as when the service starts) back in the queue, in their old place, or, after ``max_attempts``
        tries, answers them as ``failed``, which counts as a check and keeps the notebook (the caller
        logs why and keeps a copy for the instructor: a student sees no grader internals). Returns
        those given back or failed, with their notebooks, as they were before."""
        with self.transaction():
            running = self._select("state = 'running'", content=True)
            lost = [r for r in running if workers_gone is None or r.worker in workers_gone]
            for request in lost:
                if request.attempts >= max_attempts:
                    self._fail(request, time.time(), f"The grader failed {request.attempts} times on this notebook "
                                                     f"(a fault of the grader, not a mistake in your answers, which it "
                                                     f"reports item by item). {FAILED_COUNTS}")
                else:
                    self.db.execute("UPDATE requests SET state = 'queued', worker = NULL, started = NULL, "
                                    "queued_since = ? WHERE seq = ?", (time.time(), request.seq))
            return lost

    def expire(self, max_wait_seconds, now: float | None = None) -> list[Request]:
        """Answers every request that has waited in the queue longer than its assignment allows
        (``max_wait_seconds(assignment)``), counting only its time in the queue. One no worker began
        is ``expired``: it costs no check, its notebook is dropped, and only the latest
        :data:`KEPT_UNCOUNTED` of a student are kept. One a worker began and did not finish is
        ``failed``, which counts, its notebook kept, as after ``max_attempts`` tries. Returns both,
        as they were before (a failed one with its notebook, for the caller to keep)."""
        now = time.time() if now is None else now

        def waiting_too_long() -> list[Request]:
            return [r for r in self._select("state = 'queued'") if r.time_queued(now) > max_wait_seconds(r.assignment)]

        if not waiting_too_long():
            return []  # asked twice a second: no write lock when no request is late
        with self.transaction():
            late = [self._select("seq = ?", (r.seq,), content=True)[0] if r.attempts else r for r in waiting_too_long()]
            for request in late:
                minutes = f"{max_wait_seconds(request.assignment) / 60:g}"
                if request.attempts:
                    self._fail(request, now, f"The grader began this check {request.attempts} time(s) without "
                                             f"finishing, and it then waited more than {minutes} minutes for a free "
                                             f"worker. {FAILED_COUNTS}")
                    continue
                self.db.execute(
                    "UPDATE requests SET state = 'expired', finished = ?, message = ?, content = NULL, "
                    "queued_wait = ?, queued_since = NULL WHERE seq = ?",
                    (now, f"The grader was too busy: your check waited more than {minutes} minutes for a free "
                          "worker (many students are checking at once). It was not counted against your checks; "
                          "send it again in a while, and use the visible checks meanwhile.", request.time_queued(now),
                     request.seq))
            for user in {request.user for request in late if not request.attempts}:
                self._prune(user, "expired", KEPT_UNCOUNTED)
            return late

    def _fail(self, request: Request, now: float, message: str) -> None:
        """Answers ``request`` as failed (it counts as a check), its notebook kept for the instructor."""
        self.db.execute("UPDATE requests SET state = 'failed', worker = NULL, finished = ?, message = ?, "
                        "queued_wait = ?, queued_since = NULL WHERE seq = ?",
                        (now, message, request.time_queued(now), request.seq))
