"""Keeps the grading service's worker processes running, and the queue honest.

Every half second: a worker that exited (killed, out of memory, a crash) is replaced and its
request goes back to the queue (:meth:`Store.give_back`), and requests that waited longer than
their assignment allows are answered as expired. At start, requests that a former life of the
service was grading go back to the queue: its workers died with it.
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
from autograder.service.store import Store

RESPAWN_AFTER_S = 5.0  # a worker that fails at once is not restarted in a tight loop

log = logging.getLogger("autograder.serve")


class Supervisor:
    def __init__(self, root: Path, policies: Policies, store: Store):
        self.root, self.policies, self.store = Path(root), policies, store
        self.workers: dict[int, tuple[str, subprocess.Popen, float]] = {}

    def start(self) -> None:
        settings = self.policies.settings
        for request in self.store.give_back(None, settings.max_attempts):
            log.info("Request %s of %s goes back to the queue: the service restarted while it was graded",
                     request.id, request.user)
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
            why = f"its worker stopped with exit status {process.returncode}"
            for request in self.store.give_back({name}, self.policies.settings.max_attempts):
                log.warning("Request %s of %s: %s; %s", request.id, request.user, why,
                            "it goes back to the queue" if request.attempts < self.policies.settings.max_attempts
                            else "it has failed too often and is answered as failed")
            if time.monotonic() - started >= RESPAWN_AFTER_S:
                log.warning("Worker %s exited with status %s; starting another", name, process.returncode)
                self._spawn(slot)
        for request in self.store.expire(lambda a: self.policies.for_assignment(a).max_wait_minutes * 60):
            log.warning("Request %s of %s expired in the queue", request.id, request.user)

    def stop(self) -> None:
        for _, process, _ in self.workers.values():
            process.terminate()
        for _, process, _ in self.workers.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
