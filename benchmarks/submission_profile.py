"""Where a submission's grading time goes: each step's share of the whole.

    .venv/bin/python benchmarks/submission_profile.py [ASSIGNMENT] [--students 40] [--workers 1]

The class is :mod:`benchmarks.grader_speed`'s (the solution, the blank release, the solution with
its first answer blanked, in rotation), graded through ``pipeline.grade_and_record`` as
``autograder grade`` grades it. The grader's own functions are timed by wrapping them here (the
code under measure is not changed); each moment is charged to the innermost step running, so the
steps add up to the whole. Inside the sandbox, the run's journal gives the times (the server's
clock): from the request to the run's ``ready`` line (the server empties its folders), from there
to the first cell (fork, namespaces and the run's own start), each cell, each probe, the gaps
between steps (frames of records and journal lines), and from ``done`` to the server's answer (the
run's end and the server's clean-up). The first request of each sandbox also waits for its start
(Python and torch imported): that is ``sandbox start``, paid once per worker.

With one worker (the default) the steps follow each other, and the shares are of the class's
whole wall-clock time. With more, the steps of the workers overlap, and each share is of the sum.

Beside it, the floor: the same class's work alone, in this process, with no isolation, one thread as
in a run. Each notebook's code cells run in one IPython shell (emptied between notebooks) and each
probe of its first run is called after its cell, as the plan places them (a timed probe once per
window, a capped one without its cap, no trace); only the cells and the calls are timed, not the
making of their inputs. What the grader adds to a submission is the difference.
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autograder.judging import grading  # noqa: E402
from autograder.reading.preflight import preflight  # noqa: E402
from autograder.running.harness.run import _shell, window_record  # noqa: E402
from autograder.running.run_plan import plan_of  # noqa: E402
from transformer_lm.sandboxed import wire  # noqa: E402
from autograder.reading import assignment as assignment_module  # noqa: E402
from autograder.reading.config import load_settings  # noqa: E402
from autograder.reading.course import Course  # noqa: E402
from autograder.recording import feedback, pipeline, record  # noqa: E402
from autograder.running import journal, runner, sandbox  # noqa: E402
from benchmarks.grader_speed import make_class  # noqa: E402


class Clock:
    """Seconds charged to each step; a thread's moment goes to the innermost step it is in."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self.local = threading.local()
        self.lock = threading.Lock()

    def charge(self, step: str, seconds: float) -> None:
        with self.lock:
            self.seconds[step] += seconds

    def timed(self, step: str | None, function):
        """``function``, its own time (less that of the steps inside it) charged to ``step``; with
        ``step`` None, charged to nothing (``function`` charges its time itself)."""

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            stack = self.local.__dict__.setdefault("stack", [])
            if stack:
                self._pause(stack[-1])
            stack.append([step, time.perf_counter()])
            try:
                return function(*args, **kwargs)
            finally:
                self._pause(stack.pop())
                if stack:
                    stack[-1][1] = time.perf_counter()

        return wrapper

    def _pause(self, frame: list) -> None:
        now = time.perf_counter()
        if frame[0] is not None:
            self.charge(frame[0], now - frame[1])
        frame[1] = now


def split_request(clock: Clock, request):
    """``Session.request``, its time split by the run's journal into the steps the module names."""

    @functools.wraps(request)
    def wrapper(session, line, seconds, watch=None):
        first = not getattr(session, "profiled", False)
        session.profiled = True
        sent = time.time()
        reply = request(session, line, seconds, watch)
        answered = time.time()
        events = journal.parse(session.read(f"{runner.MOUNTS['out']}/journal.jsonl"))
        if not events or events[0].get("run") != line.split()[-1]:
            clock.charge("sandbox: a run that never began", answered - sent)
            return reply
        for step, seconds in journal_steps(events, sent, answered):
            clock.charge("sandbox start" if first and step == "run: request to ready" else step, seconds)
        return reply

    return wrapper


def journal_steps(events: list[dict], sent: float, answered: float) -> list[tuple[str, float]]:
    """The spans of one run, by the times of its journal's lines."""
    spans, mark, open_step = [("run: request to ready", events[0]["time"] - sent)], events[0]["time"], None
    first_step = True
    for event in events[1:]:
        name, at = event["event"], event["time"]
        if name in ("cell_start", "probe_start"):
            spans.append(("run: fork, namespaces, start" if first_step else "run: frames and journal", at - mark))
            first_step, open_step = False, (f"probe {event['probe']}" if name == "probe_start" else "cells")
            mark = at
        elif name in ("cell_end", "probe_end") and open_step:
            spans.append((open_step, at - mark))
            open_step, mark = None, at
        elif name == "done":
            spans.append(("run: frames and journal", at - mark))
            mark = at
    spans.append(("run: end and clean-up", answered - mark))
    return spans


STEPS = {
    "class: load checks and reference": (assignment_module.Assignment, "load"),
    "preflight": (grading, "preflight"),
    "plan": (runner, "plan_of"),
    "plan: inputs written": (runner.Worker, "run"),
    "frames and journal: read back": (runner.Attempts, "record"),
    "judging": (grading, "judge_item"),
    "recording: report": (pipeline, "write_report"),
    "recording: gradebook": (record, "record_in_gradebook"),
    "recording: gradebook opened and committed, CSV": (pipeline, "record_class"),
    "class: the gradebook knows the assignment": (record, "ensure_assignment_in_gradebook"),
    "pages: autograded notebook": (record, "write_autograded"),
    "pages: feedback": (feedback, "write_feedback"),
}


def instrument(clock: Clock) -> None:
    """Wraps each step of :data:`STEPS` and the sandbox's request where the grader calls them."""
    for step, (owner, name) in STEPS.items():
        setattr(owner, name, clock.timed(step, getattr(owner, name)))
    sandbox.Session.request = clock.timed(None, split_request(clock, sandbox.Session.request))


def floor(course: Course, name: str) -> float:
    """Seconds that the cells and probe calls of ``name``'s submissions take in this process alone (see
    the module's docstring)."""
    import torch

    torch.set_num_threads(1)
    assignment, shell, seconds = assignment_module.Assignment.load(course, name), _shell(), 0.0
    for student in course.students(name):
        for notebook, items in assignment.items.items():
            path = course.submission_folder(name, student) / f"{notebook}.ipynb"
            pre = preflight(path, assignment.release[notebook], items)
            if pre.fatal:
                continue
            first_run = grading.first_run_probes(assignment, items, pre)
            prepared = {pid: assignment.prepared[pid] for pid in assignment.probe_item if pid in first_run}
            plan, tensors = plan_of(pre, prepared, {pid: assignment.answers[assignment.probe_item[pid]]
                                                    for pid in prepared})
            shell.reset()
            for cell in plan["cells"]:
                start = time.perf_counter()
                if cell["source"]:
                    shell.run_cell(cell["source"], store_history=False, silent=True)
                seconds += time.perf_counter() - start
                for pid in cell["probes"]:
                    seconds += call_alone(pid, plan["calls"][pid], prepared[pid], tensors, shell.user_ns)
    return seconds


def call_alone(pid: str, call: dict, prepared, tensors: dict, namespace: dict) -> float:
    """Seconds that probe ``pid``'s planned ``call`` takes in this process (each window of a timed one, on
    inputs made before its clock starts); what the answer raises (a blank one) ends it, as in a run."""
    windows = call.get("windows")
    made = [prepared.clocked.inputs(window) for window in range(len(windows))] if windows else \
        [{name: tensors[wire.tensor_key(call.get("tensors_of", pid), name)] for name in call["tensor_keys"]}]
    seconds = 0.0
    for window, inputs in enumerate(made):
        start = time.perf_counter()
        try:
            if windows:
                window_record(call, windows[window], inputs, namespace)
            else:
                wire.call_probe(call, namespace, inputs)
        except Exception:  # noqa: BLE001 - the answer's error is a probe's result
            return seconds + time.perf_counter() - start
        seconds += time.perf_counter() - start
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assignment", nargs="?", default="02_multihead_attention")
    parser.add_argument("--students", type=int, default=40)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    clock = Clock()
    instrument(clock)
    with tempfile.TemporaryDirectory(prefix="profile-") as folder:
        root = Path(folder)
        make_class(root, args.assignment, args.students)
        course = Course(root, load_settings(root, workers=args.workers))
        start = time.perf_counter()
        pipeline.grade_and_record(course, args.assignment)
        whole = time.perf_counter() - start
        alone = floor(course, args.assignment)
    if args.workers == 1:  # what no step above holds: the pipeline's glue, and the threads' hand-overs
        clock.charge("other", whole - sum(clock.seconds.values()))
    total = sum(clock.seconds.values())
    print(f"{args.assignment}: {args.students} submissions, {args.workers} worker(s), {whole:.2f} s "
          f"({whole / args.students * 1000:.0f} ms per submission)")
    print(f"{'step':48s} {'ms/submission':>13s} {'share':>7s}")
    for step, seconds in sorted(clock.seconds.items(), key=lambda kv: -kv[1]):
        print(f"{step:48s} {seconds / args.students * 1000:13.1f} {seconds / total:7.1%}")
    print(f"{'floor: cells and probes alone, one process':48s} {alone / args.students * 1000:13.1f} "
          f"{alone / total:7.1%} (the class's wall-clock time: {whole / alone:.1f}x)")


if __name__ == "__main__":
    main()
