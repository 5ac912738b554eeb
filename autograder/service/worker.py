"""A worker process of the grading service: claims requests and grades them in a warm sandbox.

Each request is graded as ``autograder grade`` grades a submitted notebook (preflight, a run in
the sandbox, the trusted comparison: :func:`autograder.judging.grading.grade_notebook`), with a sandbox
that stays warm between requests. The result goes into the store; nothing goes into the
gradebook, since a check is not a submission. A grader error (never a student's mistake, which
grading turns into an item's status) is logged with the request's id and student, gives the
request back to the queue (or answers it as failed, its notebook kept, after ``max_attempts``
tries: :func:`autograder.service.supervisor.give_back`) and starts a fresh sandbox. The process
dies with the service that started it (``PR_SET_PDEATHSIG``), so that a restarted service never
shares its requests with a worker of its former life.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import asdict
from pathlib import Path

from autograder.judging import grading
from autograder.reading import messages
from autograder.recording import pipeline
from autograder.running import runner
from autograder.reading.assignment import Assignment
from autograder.reading.course import Course
from autograder.reading.course import checks_version
from autograder.reading.errors import GradingError
from autograder.service.policy import Policies
from autograder.service.store import Request, Store
from autograder.service.supervisor import give_back

PR_SET_PDEATHSIG = 1
IDLE_POLL_S = 0.2


def die_with_parent(parent: int) -> None:
    """Asks Linux to kill this process when its parent dies; exits at once if it already has."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        sys.exit(0)


def exit_on_terminate() -> None:
    """The service stops its workers with SIGTERM, whose default kills at once: exit instead, so
    that the way out removes what the worker keeps in ``/tmp`` (its sandbox's folders, which hold
    the hidden inputs of the last run, and a request's copy)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))


class Assignments:
    """Each assignment's prepared checks, loaded again when its hidden checks or release change."""

    def __init__(self, course: Course):
        self.course, self.loaded = course, {}

    def get(self, name: str) -> Assignment:
        loaded = self.loaded.get(name)
        if loaded is None or loaded.checks_version != checks_version(self.course, name):
            loaded = self.loaded[name] = Assignment.load(self.course, name)
        return loaded


def grade_request(assignments: Assignments, request: Request, sandbox: runner.Worker) -> dict:
    """The result of one request: its notebook's items as the feedback pages hold them, each with
    what a student may read of its text before the deadline (``public``: :mod:`autograder.reading.messages`),
    and the notes preflight made (a repaired cell id, a flagged pattern)."""
    assignment = assignments.get(request.assignment)
    with tempfile.TemporaryDirectory(prefix="check-") as folder:
        path = Path(folder) / f"{request.notebook}.ipynb"
        path.write_bytes(request.content or b"")
        items, pre = grading.grade_notebook(assignment, request.notebook, path, sandbox)
    names = messages.course_names(assignment)
    return {"score": sum(i.score for i in items), "max_score": sum(i.max_score for i in items),
            "items": [{**asdict(i), "public": messages.public(i.status, i.message, names)} for i in items],
            "notes": list(pre.flags), "checks_version": assignment.checks_version}


def work(root: Path, name: str) -> None:
    """Grades requests until the process is killed."""
    course = Course(root)
    policies = Policies(root)
    store = Store(policies.database)
    isolation = pipeline.isolation_for(course)
    assignments = Assignments(course)
    for assignment in policies.policies:  # prepared before the first student waits for them
        try:
            assignments.get(assignment)
        except GradingError as error:
            print(f"Worker {name}: {assignment} cannot be checked: {error}", file=sys.stderr)
    sandbox = runner.Worker(grading.run_settings(course.settings), isolation)
    try:
        while True:
            request = store.claim(name)
            if request is None:
                time.sleep(IDLE_POLL_S)
                continue
            try:
                result = grade_request(assignments, request, sandbox)
            except Exception:  # noqa: BLE001 - a grader error costs only this request
                print(f"Worker {name}: the grader failed on request {request.id} of {request.user} "
                      f"({request.assignment}, try {request.attempts}):", file=sys.stderr)
                traceback.print_exc()
                policies.load()
                give_back(course.root, store, {name}, policies.settings.max_attempts,
                          f"the grader raised an error in worker {name} (its traceback is above)")
                sandbox.close()
                sandbox = runner.Worker(grading.run_settings(course.settings), isolation)
                continue
            store.finish(request, name, result)
    finally:
        sandbox.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A worker of `autograder serve` (started by it).")
    parser.add_argument("--course", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--parent", type=int, required=True)
    args = parser.parse_args(argv)
    die_with_parent(args.parent)
    exit_on_terminate()
    logging.basicConfig(level=logging.INFO, format="[autograder worker %(asctime)s] %(message)s")
    work(Path(args.course), args.name)


if __name__ == "__main__":
    main()
