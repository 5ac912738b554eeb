"""A run's memory holds nothing of another run's and nothing of the course's code that has not been
released to it: proof by looking, not by listing what the server keeps.

A run starts as a copy of the process it is forked from. Runs used to be forked from the server,
whose stack held the gate of the course's code (every stage, released or not) and whose heap held
freed memory that had passed what earlier runs printed and reported. Now they are forked from a
template that never receives any of that (``autograder/running/harness/template.py``).

Markers are planted where a classmate's run and the course's code put them: the plan of one run
(a cell's source), what it prints, what it reports (a cell's error), and the course's code of the
stages a server holds (released to that run, and held back from a later one). While the first cell
of a late run (its stage not yet released) and of a later run sleeps, this test reads the whole
readable memory of the run's process from outside, every mapping of ``/proc/<pid>/maps`` through
``/proc/<pid>/mem`` (the freed and uninitialised blocks that ``numpy.empty`` would hand the run lie
in those mappings), and finds no marker. Against the code before the template (2b2f6be) it found
the held-back stage's marker in the late run's memory.
"""

import os
import secrets
import threading
import time

import pytest

from autograder.running import runner, sandbox
from warm_runs import plan

ISOLATION = sandbox.detect_isolation()
MARKERS = {place: f"MARK{place.upper()}{secrets.token_hex(6)}" for place in
           ("plan", "output", "report", "stage", "held_stage")}
SLEEP = "import time\ntime.sleep(6)\n"
FIND_SECONDS = 30.0
READINGS, READ_EVERY = 3, 1.0


def namespace_depth(pid) -> list[int]:
    """``pid``'s pid in each pid namespace it is in, outermost first."""
    with open(f"/proc/{pid}/status") as f:
        return [int(n) for n in next(line for line in f if line.startswith("NSpid:")).split()[1:]]


def the_run(outer_depth: int, before: set[str]) -> int | None:
    """A run's process: two pid namespaces below this test's (the sandbox's, then the run's own),
    not that namespace's init, and not one of the processes of ``before`` (an earlier run's, ending)."""
    for name in os.listdir("/proc"):
        if not name.isdigit() or name in before:
            continue
        try:
            pids = namespace_depth(name)
        except (OSError, StopIteration):
            continue
        if len(pids) == outer_depth + 2 and pids[-1] != 1:
            return int(name)
    return None


def markers_in_memory(pid: int, found: set[str]) -> None:
    """Adds to ``found`` the markers in the memory of process ``pid`` that anything could have written:
    every mapping that is writable, or holds no file (a mapping of a file that is not writable holds
    that file: a library's code and constants)."""
    wanted = {name: marker.encode() for name, marker in MARKERS.items()}
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", buffering=0) as memory:
        for line in maps:
            span, permissions, *rest = line.split()
            if "r" not in permissions or ("w" not in permissions and len(rest) > 3 and rest[3].startswith("/")):
                continue
            start, end = (int(address, 16) for address in span.split("-"))
            try:
                memory.seek(start)
                data = memory.read(end - start)
            except OSError:   # a mapping the kernel will not read ([vvar], say)
                continue
            found |= {name for name, marker in wanted.items() if marker in data}


def read_while_running(worker, the_plan, stages=None) -> set[str]:
    """Runs ``the_plan``, whose first cell sleeps; reads the run's memory from outside meanwhile, a
    few times, and returns the markers any reading found."""
    depth, seen, before = len(namespace_depth("self")), {}, set(os.listdir("/proc"))

    def reader():
        deadline = time.monotonic() + FIND_SECONDS
        while time.monotonic() < deadline and (pid := the_run(depth, before)) is None:
            time.sleep(0.05)
        found = set()
        for _ in range(READINGS):   # while the first cell sleeps, at intervals: the run has set up by the last
            time.sleep(READ_EVERY)
            try:
                markers_in_memory(pid, found)
            except (OSError, TypeError):   # the run has ended (or was never found)
                break
        seen["markers"] = found if pid is not None else None

    thread = threading.Thread(target=reader)
    thread.start()
    worker.run(the_plan, {}, 60, None, stages)
    thread.join()
    assert seen["markers"] is not None, "the run's process was not found"
    return seen["markers"]


@pytest.fixture(scope="module")
def worker():
    if ISOLATION.name != "bubblewrap":
        pytest.skip(ISOLATION.detail)
    with runner.Worker(runner.RunSettings(), ISOLATION) as worker:
        worker.run(plan("pass"), {}, 120, None)   # the sandbox warms up (imports torch) before the runs read
        yield worker


def test_a_run_holds_no_classmates_data_and_no_course_code_it_was_not_given(worker):
    classmate = plan(SLEEP, f"print({MARKERS['output']!r})", f"mine = {MARKERS['plan']!r}",
                     f"raise ValueError({MARKERS['report']!r})")
    released = {"own": [], "stages": [{"pids": [], "code": f"STAGE = {MARKERS['stage']!r}"}]}
    found = read_while_running(worker, classmate, released)
    assert {"plan", "output", "report"} <= found, found   # the control: its own plan, read at its start, is seen
    held_back = {"own": ["never_ends"], "stages": [{"pids": ["late"], "code": f"HELD = {MARKERS['held_stage']!r}"}]}
    late = read_while_running(worker, plan(SLEEP), held_back)
    later = read_while_running(worker, plan(SLEEP))
    assert late == set() and later == set(), (late, later)
