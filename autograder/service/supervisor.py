"""Keeps the grading service's worker processes running, and the queue honest.

Every half second: a worker that exited (killed, out of memory, a crash) is replaced and its
request goes back to the queue (:meth:`Store.give_back`), and requests that waited longer than
their assignment allows are answered as expired (or as failed, when a worker began one and did
not finish it: :meth:`Store.expire`). At start, requests that a former life of the
service was grading go back to the queue: its workers died with it. A request tried
``max_attempts`` times is answered as failed, and its notebook is kept for the instructor in
``.grading/check_failures/<request id>.ipynb`` (:func:`give_back`, which workers use too).
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

from autograder.service.policy import Policies
from autograder.service.store import Request, Store

RESPAWN_AFTER_S = 5.0  # a worker that fails at once is not restarted in a tight loop
FAILURES = Path(".grading") / "check_failures"

log = logging.getLogger("autograder.serve")


def give_back(root: Path, store: Store, workers_gone: set[str] | None, max_attempts: int, why: str) -> None:
    """Gives the requests of workers that are gone back to the queue, or answers them as failed after
    ``max_attempts`` tries, and logs each with its id and student; a failed one's notebook is kept in
    the course for the instructor, who has only the log to find what made the grader fail."""
    for request in store.give_back(workers_gone, max_attempts):
        if request.attempts < max_attempts:
            log.warning("Request %s of %s (%s): %s; it goes back to the queue (try %d of %d)", request.id,
                        request.user, request.assignment, why, request.attempts, max_attempts)
        else:
            log.error("Request %s of %s (%s): %s, on its last try (%d of %d); it is answered as failed and counts "
                      "as a check. Its notebook is kept at %s", request.id, request.user, request.assignment, why,
                      request.attempts, max_attempts, keep_notebook(root, request))


def keep_notebook(root: Path, request: Request) -> Path:
    """Writes the notebook of a failed request to ``.grading/check_failures/<request id>.ipynb``."""
    path = root / FAILURES / f"{request.id}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(request.content or b"")
    return path


class Supervisor:
    def __init__(self, root: Path, policies: Policies, store: Store):
        self.root, self.policies, self.store = Path(root), policies, store
        self.workers: dict[int, tuple[str, subprocess.Popen, float]] = {}

    def start(self) -> None:
        settings = self.policies.settings
        give_back(self.root, self.store, None, settings.max_attempts, "the service restarted while it was graded")
        for slot in range(max(1, settings.workers)):
            self._spawn(slot)

    def _spawn(self, slot: int) -> None:
        name = f"{socket.gethostname()}-{os.getpid()}-{slot}-{secrets.token_hex(3)}"
        process = subprocess.Popen([sys.executable, "-m", "autograder.service.worker", "--course", str(self.root),
                                    "--name", name, "--parent", str(os.getpid())])
        self.workers[slot] = (name, process, time.monotonic())
        log.info("Worker %s started (pid %d)", name, process.pid)

    def tick(self) -> None:
        """Replaces dead workers, gives their requests back, and expires requests waiting too long."""
        self.policies.load()
        for slot, (name, process, started) in list(self.workers.items()):
            if process.poll() is None:
                continue
            give_back(self.root, self.store, {name}, self.policies.settings.max_attempts,
                      f"its worker {name} stopped with exit status {process.returncode}")
            if time.monotonic() - started >= RESPAWN_AFTER_S:
                log.warning("Worker %s exited with status %s; starting another", name, process.returncode)
                self._spawn(slot)
        for request in self.store.expire(lambda a: self.policies.for_assignment(a).max_wait_minutes * 60):
            if request.attempts:
                log.error("Request %s of %s (%s) waited too long in the queue after %d tries that did not finish; "
                          "it is answered as failed and counts as a check. Its notebook is kept at %s", request.id,
                          request.user, request.assignment, request.attempts, keep_notebook(self.root, request))
            else:
                log.warning("Request %s of %s expired in the queue", request.id, request.user)

    def stop(self) -> None:
        for _, process, _ in self.workers.values():
            process.terminate()
        for _, process, _ in self.workers.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
