"""The warm server: one sandbox, many runs, none of which can reach another.

    python -m harness.serve PLAN.json INPUTS.safetensors OUT_DIR [--isolated] [--wipe DIR ...]
                            [--scratch DIR ...] --scratch-bytes BYTES --scratch-inodes COUNT
                            [--memory BYTES]

It imports what notebooks use once, then for each ``run TOKEN`` line on its standard input
starts a run (:mod:`harness.run`) in namespaces of its own (:mod:`harness.isolate`), writes what
the run reports into ``OUT_DIR`` (:mod:`harness.report`), watches the run's memory and CPU, and
answers with the run's wait status, ``more`` or ``last``, and ``memory`` when it stopped the run
for holding too much. Starting Python and importing torch is most of the cost of grading a
submission, and this pays it once per sandbox instead of once per submission.

Every run is forked from a template (:mod:`harness.template`), made once the server has warmed
up and before it reads any request: the template never holds a plan, the course's code, a record,
a report or a run's output, so a run starts with nothing of another submission and nothing of the
course's code but what its pipe hands it when released. The server never reads a plan or runs
student code; neither it nor the template can be traced or read (they are not dumpable), and no
run can name them (they are not in the runs' pid namespace). The token of a run stays here: the journal's first line, which names
the run, is the server's. Before each run it empties its own folders named by ``--wipe``. With
``--isolated``, each run gets an empty tmpfs of its own at each ``--scratch`` folder, bounded in
size and in files, which dies with the run (:class:`harness.isolate.Scratch`): nothing a run wrote
is left for the server to wipe in the next run's time. After each run, with ``--isolated`` (only
in a private pid namespace), it kills every other process, removes System V IPC objects, clears the user keyrings and checks its own state (its
limits, priority, CPU set and the flags and sizes of its standard descriptors); if any of that
fails, it serves no further run. Without ``--isolated`` it serves one run. A run's standard output
and error are a pipe of its own, which the server reads and passes on to its own output: what a
run does to them (made non-blocking, shrunk) dies with it, and no run shares a descriptor with the
next.
"""

import argparse
import json
import os
import select
import shutil
import signal
import sys
import time

from . import clock, isolate, report, run
from .template import Template

PR_SET_DUMPABLE = 4
KEYCTL_CLEAR = 7
KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING = -4, -5
IPC_RMID = 0
LEFTOVER_SECONDS = 5.0
CHECK_SECONDS = 0.05
"""How often the server looks at a run's memory and CPU."""
OUTPUT_BYTES = 2**20
"""What a run prints that the server passes on to its own output (the sandbox's, which the worker
keeps the start of); the rest is dropped."""


def wipe(folder: str) -> None:
    """Empties ``folder``, the server's own (where it writes a run's results), whatever
    permissions are on what it holds (it belongs to this uid, so its rights can be taken back)."""
    for entry in os.scandir(folder):
        if entry.is_dir(follow_symlinks=False):
            os.chmod(entry.path, 0o700)
            for parent, names, _ in os.walk(entry.path):
                for name in names:
                    path = os.path.join(parent, name)
                    if not os.path.islink(path):
                        os.chmod(path, 0o700)
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)
    if os.listdir(folder):
        raise RuntimeError(f"{folder} could not be emptied")


def end_leftovers(template: int) -> None:
    """Kills every process of this pid namespace but pid 1 (the sandbox's init), this one and the
    ``template`` runs are forked from, and waits until none of them can run any more."""
    spared = (1, os.getpid(), template)
    deadline = time.monotonic() + LEFTOVER_SECONDS
    while time.monotonic() < deadline:
        for pid in _others(spared):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass
        if not [pid for pid in _others(spared) if running(str(pid))]:
            return
        time.sleep(0.005)
    raise RuntimeError("processes of a run could not be ended")


def _others(spared: tuple[int, ...]) -> list[int]:
    """The processes of this pid namespace but ``spared``."""
    return [int(pid) for pid in os.listdir("/proc") if pid.isdigit() and int(pid) not in spared]


def running(pid: str) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def clear_ipc(libc) -> None:
    """Removes the System V shared memory, message queues and semaphores a run left behind:
    they outlive processes, and the next submission must not find them."""
    removers = {"shm": lambda ident: libc.shmctl(ident, IPC_RMID, None),
                "msg": lambda ident: libc.msgctl(ident, IPC_RMID, None),
                "sem": lambda ident: libc.semctl(ident, 0, IPC_RMID)}
    for kind, remove in removers.items():
        with open(f"/proc/sysvipc/{kind}") as f:
            idents = [int(line.split()[1]) for line in f.readlines()[1:] if line.strip()]
        for ident in idents:
            remove(ident)
        with open(f"/proc/sysvipc/{kind}") as f:
            if len([line for line in f if line.strip()]) > 1:
                raise RuntimeError(f"System V {kind} objects could not be removed")


def clear_keys(libc) -> None:
    """Empties the user keyrings, which outlive processes. Where keyctl is refused (a
    container's seccomp profile), student code cannot add keys either."""
    for keyring in (KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING):
        libc.syscall(isolate.KEYCTL, KEYCTL_CLEAR, keyring)


class Gate:
    """Gives the run each stage of the course's code (``<in>/course/stages.json``, which the run
    cannot see) only once every probe before that stage has ended: the student's own probes before
    the first stage, each stage's probes before the next.

    A probe has ended only as the trusted reader of the journal (:mod:`autograder.running.journal`) would
    count it: started, then ended with nothing between but notes of what it ran, once. An event out
    of that order is one the reader reads as tampering, and the gate gives nothing more, so forged
    ends of probes that never ran bring the course's code no sooner."""

    def __init__(self, path: str, fd: int):
        with open(path) as f:
            data = json.load(f)
        self.fd, self.stages, self.waiting = fd, data["stages"], set(data["own"])
        self.clocked: dict[str, list[str]] = data.get("clocked", {})
        """The timed probes and the file of each of their windows' inputs (:mod:`harness.clock`)."""
        self.open_probe, self.ended, self.shut = None, set(), False
        self.pending: list[memoryview] = []
        """Released course code (and timed windows' inputs) that the pipe has not taken yet: the
        server never waits for the run to read, and never sizes the pipe (the kernel's per-user quota
        on pipe sizes, which any process of the same uid can exhaust, could refuse that)."""
        os.set_blocking(fd, False)
        self._release()

    def seen(self, event: dict) -> None:
        name, pid = event["event"], event.get("probe")
        if self.shut or name in ("ready", "ran", "refused", "clock", "clocked"):
            return
        if name == "probe_start" and self.open_probe is None and isinstance(pid, str) and pid not in self.ended:
            self.open_probe = pid
        elif name == "probe_end" and pid is not None and pid == self.open_probe:
            self.open_probe = None
            self.ended.add(pid)
            self._release()
        elif name.startswith("probe_") or self.open_probe is not None or name in ("tampered", "garbled"):
            self.shut = True

    def _release(self) -> None:
        while self.waiting <= self.ended and self.stages:
            stage = self.stages.pop(0)
            self.pending.append(memoryview(report.frame(stage["code"])))
            self.waiting = set(stage["pids"])
        self.flush()

    def send(self, data: bytes) -> None:
        """Sends the run ``data`` after what it has not taken yet."""
        self.pending.append(memoryview(data))
        self.flush()

    def flush(self) -> None:
        """Writes as much of :attr:`pending` as the pipe takes now, never copying what still waits (a
        timed window's inputs are megabytes); drops it once the run is gone."""
        while self.pending:
            try:
                written = os.write(self.fd, self.pending[0])
            except BlockingIOError:
                return
            except BrokenPipeError:
                self.pending.clear()
                return
            if written < len(self.pending[0]):
                self.pending[0] = self.pending[0][written:]
                return
            self.pending.pop(0)


def run_starter(libc: isolate.Libc, paths: tuple[str, str, str], isolated: bool, state: isolate.State,
                scratch: isolate.Scratch):
    """What the template does for each run (:class:`~harness.template.Template`): given the run's
    report pipe, the pipe of the course's code, its status pipe and its output, it forks the process
    that starts the run (in namespaces of its own when ``isolated``) and returns its pid."""
    plan_path, inputs_path, out_dir = paths
    start = isolate.start_run if isolated else isolate.start_plain_run

    def starter(descriptors: list[int]) -> int:
        report_w, course_r, status_w, output_w = descriptors
        return start(libc, lambda: run.run(plan_path, inputs_path, report_w, course_r), state,
                     (isolate.HIDDEN + (out_dir, course_dir(plan_path)), scratch), (report_w, course_r), status_w,
                     output_w)
    return starter


def course_dir(plan_path: str) -> str:
    """Where the course's code for a run waits, which only the server reads."""
    return os.path.join(os.path.dirname(plan_path), "course")


def one_run(template: Template, paths: tuple[str, str, str], token: str, isolated: bool,
            memory_bytes: int) -> tuple[int, str]:
    """Has the template start a run, writes what it reports, watches it until it ends; returns its
    wait status and why the server stopped it (``"memory"``, or ``""``)."""
    plan_path, _, out_dir = paths
    course = course_dir(plan_path)
    journal_fd = os.open(os.path.join(out_dir, "journal.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND,
                         0o600)
    report_r, report_w = os.pipe()
    status_r, status_w = os.pipe()
    course_r, course_w = os.pipe()
    output_r, output_w = os.pipe()   # the run's own stdout and stderr, passed on by the server
    gate = Gate(os.path.join(course, "stages.json"), course_w)
    timed: list[clock.Clock] = []   # made once the run has started: it reads the run's clock
    collector = None

    def journal(event: dict) -> None:
        line = json.dumps({**event, "time": time.time()}, default=str) + "\n"
        os.write(journal_fd, line.encode("utf-8", "replace"))
        gate.seen(event)
        for found in timed:
            found.seen(event, gate.open_probe, collector.written)

    journal({"event": "ready", "run": token})
    helper = template.start((report_w, course_r, status_w, output_w))
    for fd in (report_w, status_w, course_r, output_w):
        os.close(fd)
    os.set_blocking(report_r, False)
    os.set_blocking(output_r, False)
    watch = isolate.Watch(memory_bytes, helper, template.pid) if isolated else None
    collector = report.Collector(report_r, out_dir, journal)
    if gate.clocked:
        timed.append(clock.Clock(os.path.join(course, "clocked"), gate.clocked, gate.send,
                                 watch.run_pid if watch is not None else lambda: helper))
    helper_status = _follow(helper, template.status, collector, gate, output_r, watch)
    for found in timed:
        found.write(out_dir)
    data = os.read(status_r, 64) if isolated else str(helper_status).encode()
    for fd in (report_r, status_r, course_w, journal_fd, output_r):
        os.close(fd)
    stopped = "memory" if watch is not None and watch.exceeded else ""
    return (int(data) if data else signal.SIGKILL), stopped


def _follow(helper: int, ended, collector: report.Collector, gate: Gate, output_r: int,
            watch: isolate.Watch | None) -> int:
    """Reads the run's report and output, gives it the course's code it may have, and watches its
    memory until the report is closed and ``helper`` (the process that started it) has ended;
    returns the helper's wait status, which ``ended()`` gives once it has."""
    pidfd = os.pidfd_open(helper)
    reading, output, passed, helper_status, next_check = True, True, [0], None, time.monotonic()
    while reading or helper_status is None:
        readers = [pidfd] + ([collector.fd] if reading else []) + ([output_r] if output else [])
        ready, writable, _ = select.select(readers, [gate.fd] if gate.pending else [], [], CHECK_SECONDS)
        if writable:
            gate.flush()
        if collector.fd in ready:
            reading = collector.read()
        if output_r in ready:
            output = _pass_on(output_r, passed)
        if pidfd in ready and helper_status is None:
            helper_status = ended()
        if watch is not None and helper_status is None and time.monotonic() >= next_check:
            watch.check()
            next_check = time.monotonic() + CHECK_SECONDS
    os.close(pidfd)
    return helper_status


def _pass_on(fd: int, passed: list[int]) -> bool:
    """Reads what a run printed and writes it to the server's own output, up to
    :data:`OUTPUT_BYTES` a run (``passed`` counts them), dropping the rest; False once every
    writer has closed the pipe."""
    try:
        data = os.read(fd, 2**16)
    except BlockingIOError:
        return True
    kept = data[:max(0, OUTPUT_BYTES - passed[0])]
    passed[0] += len(kept)
    if kept:
        sys.stdout.buffer.write(kept)
        sys.stdout.flush()
    return bool(data)


def serve(paths: tuple[str, str, str], isolated: bool, wiped: list[str], scratch: isolate.Scratch,
          memory_bytes: int, modules: list[str]) -> None:
    """Answers each ``run`` request with a run's wait status and whether it serves another;
    see the module docstring."""
    reply_fd = int(os.environ.pop("SANDBOX_REPLY_FD"))
    os.environ.pop("LD_PRELOAD", None)  # the allocator of capped runs, loaded already (runner.Worker); not the runs'
    libc = isolate.Libc()
    isolated = isolated and isolate.KEYCTL is not None
    environment = dict(os.environ)
    run.warm_up(modules)
    os.environ.clear()  # what warming up set (torch's first traced call sets TORCHINDUCTOR_CACHE_DIR) is not the runs'
    os.environ.update(environment)
    libc.prctl(PR_SET_DUMPABLE, 0)
    state = isolate.State.now()
    template = Template(run_starter(libc, paths, isolated, state, scratch))   # before any request is read
    requests = os.fdopen(0, "rb", buffering=0)
    while len(request := requests.readline().decode("ascii", "replace").split()) == 2 and request[0] == "run":
        for folder in wiped:
            wipe(folder)
        sys.stdout.flush()
        sys.stderr.flush()
        status, stopped = one_run(template, paths, request[1], isolated, memory_bytes)
        more = False
        if isolated:
            end_leftovers(template.pid)
            clear_ipc(libc.raw)
            clear_keys(libc.raw)
            more = not state.changes(isolate.State.now())
        os.write(reply_fd, f"{status} {'more' if more else 'last'} {stopped}".strip().encode() + b"\n")
        if not more:
            return


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("plan")
    parser.add_argument("inputs")
    parser.add_argument("out")
    parser.add_argument("--isolated", action="store_true", help="in a private pid namespace: serve many runs")
    parser.add_argument("--wipe", action="append", default=[], help="a folder of the server's to empty before each run")
    parser.add_argument("--scratch", action="append", default=[],
                        help="with --isolated, a folder where each run gets an empty tmpfs of its own")
    parser.add_argument("--scratch-bytes", type=int, required=True, help="the size of each run's tmpfs")
    parser.add_argument("--scratch-inodes", type=int, required=True, help="the files and folders each run's tmpfs holds")
    parser.add_argument("--memory", type=int, default=4 * 2**30, help="bytes a run's processes may hold together")
    parser.add_argument("--module", action="append", default=[],
                        help="a module of torch to import before the server indexes torch (one an item may take out)")
    args = parser.parse_args()
    scratch = isolate.Scratch(tuple(args.scratch), args.scratch_bytes, args.scratch_inodes)
    serve((args.plan, args.inputs, args.out), args.isolated, args.wipe, scratch, args.memory, args.module)


if __name__ == "__main__":
    main()
