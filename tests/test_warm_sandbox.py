"""Submissions that share a warm sandbox (one ``runner.Worker``) cannot reach each other or the
server that starts them.

Each run has a pid, mount and IPC namespace of its own (``autograder/running/harness/isolate.py``): it
sees no process but its own, no ``/proc``, and cannot write where its results go. The first run
here plays a student who leaves behind what could outlive a process (files in every writable
folder, a process, a thread) and reaches for the server; the next run looks for all of it. The
first run looks for its own files at its end too: that control proves the search finds them, so a
clean second run means they are gone, not that the search is blind.
"""

import mmap
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.running import runner, sandbox
from autograder.running.harness.guard import TAMPERED_EXIT
from autograder.running.run_reply import exit_code
from transformer_lm.instructor.capped_kinds import CAPPED_CAUSAL, MEMORY_CAP
from warm_runs import plan, printed, run

REPO = Path(__file__).resolve().parents[1]

ISOLATION = sandbox.detect_isolation()

LEAVE = """
import os, subprocess, sys, threading
for folder in ("/tmp", "/scratch", "/dev/shm"):
    with open(f"{folder}/leak.txt", "w") as f:
        f.write("answers of the first student")
os.makedirs("/scratch/locked/deeper")
os.chmod("/scratch/locked", 0)
refused = []
for start in (lambda: subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"]), os.fork,
              lambda: threading.Thread(target=lambda: None).start()):
    try:
        start()
    except PermissionError:
        refused.append(True)
try:
    open("/grader/out/leak.txt", "w")
except OSError:
    refused.append(True)
print("REFUSED", len(refused))
"""

FIND = """
import os
found = [f"/proc: {os.listdir('/proc')}"] if os.listdir("/proc") else []
for folder in ("/tmp", "/scratch", "/dev/shm", "/dev/mqueue"):
    left = sorted(set(os.listdir(folder)) - {".ipython"})
    if left:
        found.append(f"{folder}: {left}")
print("FOUND", found)
"""

REACH = """
import os, resource, threading
own = {os.getpid(), 1} | {thread.native_id for thread in threading.enumerate()}  # 1: the run's own init
reached = []
for pid in range(1, 200):
    if pid in own:
        continue
    for name, reach in (("kill", lambda: os.kill(pid, 0)),
                        ("prlimit", lambda: resource.prlimit(pid, resource.RLIMIT_FSIZE, (1024, 1024))),
                        ("setpriority", lambda: os.setpriority(os.PRIO_PROCESS, pid, 19)),
                        ("affinity", lambda: os.sched_setaffinity(pid, {0}))):
        try:
            reach()
            reached.append((name, pid))
        except OSError:
            pass
try:
    os.setpriority(os.PRIO_USER, os.getuid(), 19)
except OSError:
    pass
resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))  # its own: the next run starts from the server's
os.nice(19)
print("REACHED", reached)
"""


CTYPES = """
import ctypes, _ctypes
target = bytearray(b"grade: 0")
made = ctypes.POINTER(ctypes.c_char)  # a class ctypes made when it was imported
worked = []
for name, attempt in (
        ("memmove", lambda: ctypes.memmove(id(target) + 0, id(target) + 0, 0)),
        ("cast", lambda: ctypes.cast(id(target), ctypes.POINTER(ctypes.c_char))),
        ("a new object", lambda: ctypes.c_long(7)),
        ("an object of a class made before", lambda: made()),
        ("an object of a pointer type made now", lambda: ctypes.POINTER(ctypes.c_double)()),
        ("a union", lambda: type("Pun", (ctypes.Union,), {"_fields_": [("a", ctypes.c_long), ("b", ctypes.py_object)]})()),
        ("a class of its own", lambda: type("Mine", (ctypes.c_long,), {})(5)),
        ("a class with a __new__", lambda: type("New", (ctypes.c_long,), {"__new__": lambda c: ctypes.c_long.__new__(c)})()),
        ("a callback", lambda: ctypes.CFUNCTYPE(ctypes.c_int)(lambda: 0)),
        ("the bytes of a function", lambda: memoryview(ctypes.memset)),
        ("Py_INCREF", lambda: _ctypes.Py_INCREF(target))):
    try:
        if attempt() is not None:
            worked.append(name)
    except (TypeError, AttributeError):
        pass
print("WORKED", worked)
"""
"""Every way ctypes writes memory or calls C without an audit event, tried; in a plain Python each
one works (the control), so an empty list means refused, not missed."""

@pytest.fixture
def worker():
    if ISOLATION.name != "bubblewrap":
        pytest.skip(ISOLATION.detail)
    with runner.Worker(runner.RunSettings(), ISOLATION) as worker:
        yield worker


def test_a_run_finds_nothing_that_the_run_before_it_left(worker):
    errors, output = run(worker, FIND)
    assert errors == [] and printed(output, "FOUND") == []
    errors, output = run(worker, LEAVE, FIND)
    assert errors == [] and printed(output, "REFUSED") == 4, output  # a process, a fork, a thread, the results
    control = printed(output, "FOUND")
    assert len(control) == 3, control  # the three folders
    errors, output = run(worker, FIND)
    assert errors == [] and printed(output, "FOUND") == []


def test_a_run_reaches_neither_the_server_nor_the_runs_after_it(worker):
    """No signal, limit, priority or CPU set reaches outside a run's own pid namespace (where the
    only other process is the run's own init, which holds nothing and ignores signals); what a
    run changes of its own state, the next one does not start from."""
    errors, output = run(worker, REACH)
    assert errors == [] and printed(output, "REACHED") == [], output
    errors, output = run(worker, "import os, resource\nprint('STATE', [resource.getrlimit(resource.RLIMIT_FSIZE)[0], "
                                 "os.getpriority(os.PRIO_PROCESS, 0)])")
    assert errors == [] and printed(output, "STATE") == [runner.RunSettings().file_size_bytes, 0], output
    assert worker.session.alive and worker._served == 2  # the same warm server served both


TOUCH_THE_SHELL = """
import builtins, sys
shell = get_ipython()
LEFT_IN_THE_NAMESPACE = "answers of the first student"
shell.input_transformers_post.append(lambda lines: ["LEFT_BY_A_TRANSFORMER = 1\\n"] + lines)
shell.events.register("pre_run_cell", lambda *args: setattr(builtins, "LEFT_BY_AN_EVENT", 1))
builtins.LEFT_IN_BUILTINS = 1
sys.modules["left_module"] = type(sys)("left_module")
"""
LOOK_AT_THE_SHELL = """
import builtins, sys
shell = get_ipython()
print("SHELL", [sorted([name for name in ("LEFT_IN_THE_NAMESPACE", "LEFT_BY_A_TRANSFORMER") if name in shell.user_ns]
                       + [name for name in ("LEFT_IN_BUILTINS", "LEFT_BY_AN_EVENT") if hasattr(builtins, name)]
                       + [name for name in ("left_module",) if name in sys.modules]),
               len(shell.input_transformers_post), shell.execution_count])
"""
LEFT = ["LEFT_BY_AN_EVENT", "LEFT_BY_A_TRANSFORMER", "LEFT_IN_BUILTINS", "LEFT_IN_THE_NAMESPACE", "left_module"]


def test_a_run_starts_from_the_shell_as_the_server_made_it(worker):
    """The IPython shell is made once, in the server (``harness.run.warm_up``), and each run is a
    fork of it: what one run does to the shell (its namespace, an input transformer, an event
    callback, builtins, a module) is gone in the next, which starts at the same execution count.
    The first run looks for it all in its own second cell: that control proves the search sees it."""
    errors, output = run(worker, "pass", LOOK_AT_THE_SHELL)
    first = printed(output, "SHELL")
    assert errors == [] and first[0] == [], output
    errors, output = run(worker, TOUCH_THE_SHELL, LOOK_AT_THE_SHELL)
    assert errors == [] and printed(output, "SHELL")[0] == LEFT, output
    errors, output = run(worker, "pass", LOOK_AT_THE_SHELL)
    assert errors == [] and printed(output, "SHELL") == first, (first, output)


PIPES = """
import fcntl, os
for fd in (1, 2):
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
    fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, 4096)
print("SHRUNK", [fcntl.fcntl(1, fcntl.F_GETPIPE_SZ), bool(fcntl.fcntl(1, fcntl.F_GETFL) & os.O_NONBLOCK)], flush=True)
"""
"""A run that makes its standard output and error non-blocking and shrinks their pipe: were the
pipe shared, the next run's prints would fail with BlockingIOError once it filled."""


def test_what_a_run_does_to_its_output_dies_with_it(worker):
    errors, output = run(worker, PIPES)
    assert errors == [] and printed(output, "SHRUNK") == [4096, True], output
    chatty = ("import fcntl, os\nfor i in range(2000):\n    print('debug line', i, '.' * 60)\n"
              "print('OUTPUT', [fcntl.fcntl(1, fcntl.F_GETPIPE_SZ) > 4096, bool(fcntl.fcntl(1, fcntl.F_GETFL) & "
              "os.O_NONBLOCK)])")
    errors, output = run(worker, chatty)
    assert errors == [] and printed(output, "OUTPUT") == [True, False], output
    assert worker.session.alive and worker._served == 2   # the server's own descriptors never changed


def test_a_run_that_crashes_or_hangs_costs_only_itself(worker):
    reply, _ = worker.run(plan("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)"), {}, 60, None)
    assert exit_code(reply) == -11
    errors, _ = run(worker, "x = 1")
    assert errors == []
    reply, _ = worker.run(plan("while True: pass"), {}, 2, None)
    assert reply.timed_out and not worker.session.alive
    errors, output = run(worker, "print('fresh', 6 * 7)")
    assert errors == [] and "fresh 42" in output


def test_a_run_sees_its_own_plan_only_and_no_course_code(worker):
    run(worker, "token = 'alpha-one-'")
    errors, output = run(worker, "import os\nprint('LEFT', (('alpha' + '-one-') in open('/grader/in/plan.json').read(), "
                                 "os.listdir('/grader/in/course'), os.listdir('/grader/out')))")
    assert errors == [] and printed(output, "LEFT") == (False, [], []), output


def test_a_server_lost_between_runs_costs_the_next_run_nothing(worker):
    run(worker, "x = 1")
    started = worker.session._started
    started.proc.send_signal(signal.SIGKILL)
    started.proc.wait()
    while os.read(started.out_r, 65536):  # until every process of the sandbox is gone (end of its output)
        pass
    errors, output = run(worker, "print('graded', 6 * 7)")
    assert errors == [] and "graded 42" in output


def test_without_bubblewrap_every_run_gets_a_server_of_its_own():
    """Only a private pid namespace lets the server clean up after a run, so a plain process
    serves one run and the next run starts another."""
    none = sandbox.Isolation("none", "plain subprocess, for the fallback's test")
    with runner.Worker(runner.RunSettings(), none) as worker:
        for _ in range(2):
            errors, output = run(worker, "import os\nprint('pid', os.getpid(), 6 * 7)")
            assert errors == [] and " 42" in output
            assert not worker.session.alive


def test_a_run_names_no_folder_of_the_host(worker):
    """Nothing a run can read names the course folder (where ``make`` puts the environment) or the
    grader's working folders: not the interpreter's paths, the environment, the installed files
    that record where a package came from, nor /proc (a run sees none)."""
    host = [str(REPO), sys.prefix, str(worker.root)]
    errors, output = run(worker, f"""
import os, sys, sysconfig
seen = [sys.prefix, sys.executable, *sys.path, *os.environ.values(), os.getcwd(), *os.listdir("/proc")]
site = sysconfig.get_paths()["purelib"]
for name in os.listdir(site):
    path = os.path.join(site, name, "direct_url.json") if name.endswith(".dist-info") else os.path.join(site, name)
    if name.startswith("__editable__") or name.endswith((".pth", ".dist-info")) and os.path.isfile(path):
        seen.append(open(path, "rb").read().decode("utf-8", "replace"))
print("LEAKS", [h for h in {host!r} if any(h in text for text in seen)])
""")
    assert errors == [] and printed(output, "LEAKS") == [], output


def test_ctypes_makes_calls_and_shows_nothing_in_a_run(worker):
    """ctypes writes memory and calls C without an audit event, so a run disarms it before its
    first cell (``type_objects.disarm_ctypes``); what ctypes does audit (an object at an address) ends
    the run as tampered."""
    control = subprocess.run([sys.executable, "-c", CTYPES], capture_output=True, text=True, check=True).stdout
    assert len(printed(control, "WORKED")) == 11, control
    errors, output = run(worker, CTYPES)
    assert errors == [] and printed(output, "WORKED") == [], output
    reply, _ = worker.run(plan("import ctypes\nctypes.c_long.from_address(id(1))"), {}, 60, None)
    assert exit_code(reply) == TAMPERED_EXIT
    errors, output = run(worker, "print('graded', 6 * 7)")
    assert errors == [] and "graded 42" in output


TILES = f"""
import resource, torch
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(100):
    torch.ones({CAPPED_CAUSAL.block_q}, {CAPPED_CAUSAL.block_k})   # a tile of the capped checks, freed at once
print("FAULTS", resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def test_a_capped_run_serves_a_freed_tile_again_without_faulting_it_in(worker):
    """The sandbox's server loads the grader's allocator of large blocks (autograder/running/kept_blocks.py)
    and a capped run switches it on: 100 tiles made and freed fault in a few pages, not 100 tiles' worth.
    (Without it, each tile under the cap is a fresh mapping: ``tests/test_absence_and_cap.py``.)"""
    assert worker.allocator is not None, "No C compiler built autograder/running/kept_blocks.c: apt-get install gcc"
    reply, read = worker.run({**plan(TILES), "memory_cap": MEMORY_CAP}, {}, 60, None)
    tile_pages = CAPPED_CAUSAL.block_q * CAPPED_CAUSAL.block_k * 4 // mmap.PAGESIZE
    assert printed(reply.output, "FAULTS") < 100 * tile_pages / 10, reply.output
