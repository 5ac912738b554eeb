"""Submissions that share a warm sandbox (one ``runner.Worker``) cannot reach each other.

The first run plays a student who leaves everything behind that could outlive a process: a
background process, files in every writable folder, System V IPC objects, a POSIX message
queue and a key in the user keyring. The next run, on the same server, looks for all of it.
The first run looks for its own leftovers too, at its end: that control proves the search
finds them, so a clean second run means they are gone, not that the search is blind.
"""

import signal
import textwrap

import pytest

from autograder import runner, sandbox

ISOLATION = sandbox.detect_isolation()

LEAVE = """
import ctypes, os, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
subprocess.Popen([sys.executable, "-c", "import os, time; os.setsid(); time.sleep(120)"])
for folder in ("/tmp", "/scratch", "/dev/shm", "/grader/out"):
    with open(f"{folder}/leak.txt", "w") as f:
        f.write("answers of the first student")
os.makedirs("/scratch/locked/deeper")
os.chmod("/scratch/locked", 0)
assert libc.shmget(4242, 4096, 0o1600) >= 0
assert libc.msgget(4243, 0o1600) >= 0
assert libc.semget(4244, 1, 0o1600) >= 0
assert libc.mq_open(b"/leak", os.O_CREAT | os.O_RDWR, 0o600, None) >= 0
key = libc.syscall(248, b"user", b"leak", b"secret", 6, -4)  # add_key(..., KEY_SPEC_USER_KEYRING)
assert key > 0, ctypes.get_errno()
"""

FIND = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
found = []
others = [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, os.getpid(), os.getppid())]
if others:
    found.append(f"processes {others}")
for folder in ("/tmp", "/scratch", "/dev/shm", "/grader/out", "/dev/mqueue"):
    left = sorted(set(os.listdir(folder)) - {"journal.jsonl", ".ipython"})
    if left:
        found.append(f"{folder}: {left}")
for name, ident in (("shm", libc.shmget(4242, 0, 0)), ("msg", libc.msgget(4243, 0)), ("sem", libc.semget(4244, 0, 0))):
    if ident >= 0:
        found.append(f"System V {name}")
if libc.mq_open(b"/leak", os.O_RDONLY) >= 0:
    found.append("message queue")
if libc.syscall(250, 10, -4, b"user", b"leak", 0) > 0:  # keyctl(KEYCTL_SEARCH, KEY_SPEC_USER_KEYRING, ...)
    found.append("key")
print("FOUND", found)
"""

SERVER = """
import os
server = os.getppid()
print("SERVER", server)
for path in (f"/proc/{server}/mem", f"/proc/{server}/environ"):
    try:
        open(path, "rb").read(1)
        print("READ", path)
    except OSError:
        pass
try:
    os.listdir(f"/proc/{server}/fd")
    print("READ fd")
except OSError:
    pass
"""


def plan(*sources):
    return {"cells": [{"index": i, "source": textwrap.dedent(s), "probes": []} for i, s in enumerate(sources)],
            "calls": {}, "skip_cells": [], "skip_probes": []}


def run(worker, *sources):
    """Runs the cells; returns their errors and what they printed."""
    reply, read = worker.run(plan(*sources), {}, 60, None)
    events = worker.events(read)
    errors = [e["error"] for e in events if e["event"] == "cell_end" and e.get("error")]
    assert any(e["event"] == "done" for e in events), (reply, errors)
    return errors, reply.output


def found(output):
    line = next(line for line in output.splitlines() if line.startswith("FOUND"))
    return eval(line[len("FOUND "):])  # a list literal printed by FIND


@pytest.fixture
def worker():
    if ISOLATION.name != "bubblewrap":
        pytest.skip(ISOLATION.detail)
    with runner.Worker(runner.RunSettings(), ISOLATION) as worker:
        yield worker


def test_a_run_finds_nothing_that_the_run_before_it_left(worker):
    errors, output = run(worker, FIND)
    assert errors == []
    fresh = found(output)  # what a fresh sandbox holds: bubblewrap's folders for a venv under /tmp, say
    errors, output = run(worker, LEAVE, FIND)
    assert errors == []
    control = found(output)
    assert len(control) == 11, control  # a process, 5 folders, 3 System V objects, a queue, a key
    errors, output = run(worker, FIND)
    assert errors == [] and found(output) == fresh


def test_runs_share_the_server_but_cannot_read_or_trace_it(worker):
    outputs = [run(worker, SERVER)[1] for _ in range(2)]
    servers = [line for output in outputs for line in output.splitlines() if line.startswith("SERVER")]
    assert len(servers) == 2 and servers[0] == servers[1], outputs  # one warm server served both
    assert "READ" not in "".join(outputs), outputs


def test_a_run_that_crashes_or_hangs_costs_only_itself(worker):
    reply, _ = worker.run(plan("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)"), {}, 60, None)
    assert runner._exit_code(reply) == -11
    errors, _ = run(worker, "x = 1")
    assert errors == []
    reply, _ = worker.run(plan("while True: pass"), {}, 2, None)
    assert reply.timed_out and not worker.session.alive
    errors, output = run(worker, "print('fresh', 6 * 7)")
    assert errors == [] and "fresh 42" in output


def test_a_run_sees_its_own_plan_only(worker):
    run(worker, "token = 'alpha-one-'")
    errors, output = run(worker, "print('LEFT', ('alpha' + '-one-') in open('/grader/in/plan.json').read())")
    assert errors == [] and "LEFT False" in output, output


def test_a_server_lost_between_runs_costs_the_next_run_nothing(worker):
    run(worker, "x = 1")
    server = worker.session._started.proc
    server.send_signal(signal.SIGKILL)
    server.wait()
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
