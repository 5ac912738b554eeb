"""Runs students' notebook code and the probes of each graded item, inside the sandbox.

    python harness.py PLAN.json INPUTS.safetensors OUT_DIR [--isolated] [--wipe DIR ...]

This file is copied into the sandbox on its own: it imports only the standard library,
torch, safetensors, IPython and ``transformer_lm/sandboxed`` (the probes and how a call travels,
:func:`transformer_lm.sandboxed.probes.call_probe`), never the grader, the hidden checks or the
reference. It judges nothing.

It is a warm server (see :class:`autograder.sandbox.Session`): it imports what notebooks use
once, then for each ``run TOKEN`` line on its standard input forks a fresh process that reads the
plan and inputs the trusted side has just written, and answers with that process's wait
status. Starting Python and importing torch is most of the cost of grading a submission, and
this pays it once per sandbox instead of once per submission.

Submissions that share a sandbox must not reach each other. The server itself never reads a
plan or runs student code, so a forked process holds nothing of another submission, and it
cannot be traced or read by student code (it is not dumpable). Before each run it empties the
writable folders named by ``--wipe``; after each run, with ``--isolated`` (only in a private pid
namespace), it kills every other process, removes System V IPC objects and clears the user
keyrings, and if any of that fails it exits rather than serve again. Without ``--isolated`` it
serves one run.

For each code cell of the plan the forked process writes a
``cell_start`` line to ``OUT_DIR/journal.jsonl``, runs the cell in an IPython shell (so
magics work as in Jupyter), writes ``cell_end``; after the answer cell of an item it runs
that item's probe calls and saves each record to ``OUT_DIR/<probe id>.safetensors``.
The trusted side reads the journal to know what finished, and where a run that died
(timeout, memory, segfault, ``os._exit``) was at that moment.

After the last cell come the plan's ``late`` probe calls, each with the course's own code
standing in for some of the student's answers (:class:`CourseCode`): an item that builds on a
wrong earlier answer is judged by those, so that one mistake costs points once. The course's
code is made only then, when every record of the student's own code is written.
"""

import argparse
import contextlib
import ctypes
import json
import os
import re
import shutil
import signal
import sys
import time
import traceback
import types

import torch
from IPython.core.interactiveshell import InteractiveShell
from safetensors.torch import load_file, save_file

import transformer_lm
from transformer_lm.sandboxed import probes

CELL_FILE = re.compile(r"<ipython-input-(\d+)-")
"""How IPython names a cell's code: by the execution count it ran under."""
MAX_MESSAGE = 2000
MAX_VALUE = 20000
PR_SET_DUMPABLE = 4
KEYCTL = {"x86_64": 250, "aarch64": 219}.get(os.uname().machine)
"""The keyctl system call's number (glibc has no wrapper for it)."""
KEYCTL_JOIN_SESSION_KEYRING, KEYCTL_CLEAR = 1, 7
KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING = -4, -5
IPC_RMID = 0
LEFTOVER_SECONDS = 5.0


class Journal:
    """Appends one JSON object per line and flushes at once, so a crash loses nothing."""

    def __init__(self, path: str):
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._dumps, self._write, self._time = json.dumps, os.write, time.time

    def log(self, event: str, **fields) -> None:
        line = self._dumps({"event": event, "time": self._time(), **fields}, default=str) + "\n"
        self._write(self._fd, line.encode("utf-8", "replace"))


def describe(error: BaseException) -> str:
    """``Type: message`` and where in the student's cells it was raised, bounded.

    Only frames of notebook cells are named: the harness and library internals mean
    nothing to a student and are nobody else's business.
    """
    if isinstance(error, probes.ProbeError):
        return str(error)[:MAX_MESSAGE]
    text = "".join(traceback.format_exception_only(type(error), error)).strip()
    cells = [f for f in traceback.extract_tb(error.__traceback__) if f.filename.startswith("<ipython-input")]
    if cells:
        frame = cells[-1]
        text += f" (in {frame.name}, line {frame.lineno} of its cell: {(frame.line or '').strip()})"
    return text[:MAX_MESSAGE]


def run_probe(call: dict, namespace: dict, tensors: dict[str, torch.Tensor], pid: str):
    """Calls the planned probe ``pid`` on the student's objects, with its own tensors (those of
    the call ``tensors_of`` names, when it makes the same check again)."""
    owner = call.get("tensors_of", pid)
    own = {name: tensors[probes.tensor_key(owner, name)] for name in call["tensor_keys"]}
    return probes.call_probe(call, namespace, own)


class CourseCode:
    """The course's reference (``transformer_lm.reference``, sent as text: it is not importable
    here) and its stand-ins for students' answers, in the assignment's API
    (``<checks_dir>/stand_ins/<assignment>.py``), both compiled under
    :data:`~transformer_lm.sandboxed.probes.COURSE_CODE_FILE`."""

    def __init__(self, code: dict):
        reference = types.ModuleType("transformer_lm.reference")
        reference.__file__ = probes.COURSE_CODE_FILE
        sys.modules[reference.__name__] = reference  # dataclasses look their module up there
        exec(compile(code["reference"], probes.COURSE_CODE_FILE, "exec"), reference.__dict__)
        transformer_lm.reference = reference
        self.stand_ins = compile(code["stand_ins"], probes.COURSE_CODE_FILE, "exec")
        self.names = set(code["names"])

    @contextlib.contextmanager
    def standing_in(self, namespace: dict, names: list[str]):
        """``namespace`` with the course's objects under ``names`` while the block runs. The
        stand-ins run in a copy of the namespace, so that the names they look up (a class they
        build, a function they call) are the student's own, except those stood in for."""
        scope = dict(namespace)
        exec(self.stand_ins, scope)
        for name in self.names - set(names):
            if name in namespace:
                scope[name] = namespace[name]
            else:
                scope.pop(name, None)
        saved = {name: namespace[name] for name in names if name in namespace}
        namespace.update({name: scope[name] for name in names})
        try:
            yield
        finally:
            for name in names:
                if name in saved:
                    namespace[name] = saved[name]
                else:
                    namespace.pop(name, None)


def traced(seen: dict) -> dict[str, list[list[int]]]:
    """A trace as JSON: each watched name that ran, with the cell stacks it ran from."""
    return {name: [list(stack) for stack in stacks] for name, stacks in seen.items()}


def run(plan_path: str, inputs_path: str, out_dir: str, token: str) -> None:
    """Runs one submission's plan, in a process of its own; never returns. ``token`` names the
    run in its journal's first line."""
    with open(plan_path) as f:
        plan = json.load(f)
    tensors = load_file(inputs_path) if os.path.getsize(inputs_path) else {}
    journal = Journal(os.path.join(out_dir, "journal.jsonl"))
    save, dumps = save_file, json.dumps
    shell = InteractiveShell.instance()
    journal.log("ready", run=token)
    cells_by_count: dict[int, int] = {}

    def cell_of(frame) -> int | None:
        """The plan's index of the cell whose code ``frame`` runs (compiled under
        ``<ipython-input-N-...>``), or the course's code's."""
        filename = frame.f_code.co_filename
        if filename == probes.COURSE_CODE_FILE:
            return probes.COURSE_CODE_CELL
        match = CELL_FILE.match(filename)
        return cells_by_count.get(int(match.group(1))) if match else None

    def probe(pid: str, standing_in=contextlib.nullcontext) -> None:
        """Runs the planned call ``pid`` and journals its record, value or error."""
        journal.log("probe_start", probe=pid)
        ran: dict = {}
        try:
            with standing_in(), probes.trace_calls(plan["watch"].get(pid, ()), cell_of) as ran:
                value = run_probe(plan["calls"][pid], shell.user_ns, tensors, pid)
            record = probes.as_record(value)
            if record is not None:
                save(record, os.path.join(out_dir, f"{pid}.safetensors"))
                journal.log("probe_end", probe=pid, saved=True, ran=traced(ran))
            else:
                text = dumps(value, default=str)
                journal.log("probe_end", probe=pid, value=value if len(text) <= MAX_VALUE else None, ran=traced(ran))
        except BaseException as error:  # noqa: BLE001 - anything a student object raises is a result
            kind = "todo" if isinstance(error, NotImplementedError) else "error"
            journal.log("probe_end", probe=pid, error=describe(error), kind=kind, ran=traced(ran))

    for cell in plan["cells"]:
        if cell["index"] not in plan["skip_cells"]:
            journal.log("cell_start", index=cell["index"])
            cells_by_count[shell.execution_count] = cell["index"]
            result = shell.run_cell(cell["source"], store_history=True)
            error = result.error_before_exec or result.error_in_exec
            journal.log("cell_end", index=cell["index"], error=describe(error) if error else None)
        for pid in cell["probes"]:
            if pid not in plan["skip_probes"]:
                probe(pid)
    course: list[CourseCode] = []  # made at the first late call, inside it: a failure is that call's error

    def standing_in(names: list[str]):
        if not course:
            course.append(CourseCode(plan["course_code"]))
        return course[0].standing_in(shell.user_ns, names)

    for pid in plan.get("late", ()):
        if pid not in plan["skip_probes"]:
            probe(pid, lambda names=plan["calls"][pid]["stand_ins"]: standing_in(names))
    journal.log("done")
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown: student atexit hooks and threads cannot change the outcome


class _Tiny(torch.nn.Module):
    """A small attention-like module for :func:`warm_up`."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        scores = self.linear(x) @ x.transpose(-2, -1) / 2.0  # (B, T, T)
        mask = torch.triu(torch.ones(x.shape[1], x.shape[1], dtype=torch.bool), diagonal=1)
        return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ x  # (B, T, 4)


def warm_up() -> None:
    """Imports what the course's notebooks use and probes a small module once, traced, so that
    every forked run starts with torch's lazy set-up done (a probe's first call alone imports
    sympy, and the first traced call sets up Python dispatch)."""
    import matplotlib.pyplot  # noqa: F401
    import numpy  # noqa: F401

    from transformer_lm.sandboxed import test_values, viz  # noqa: F401

    with probes.trace_calls({"softmax", "aten::_softmax"}, lambda frame: None):  # its first use costs 0.4 s
        probes.probe_module(_Tiny, init={}, state={}, inputs={"x": torch.ones(2, 3, 4)}, grad_output=torch.ones(2, 3, 4))


def wipe(folder: str, keep: set[str]) -> None:
    """Empties ``folder`` of what runs wrote there, whatever permissions they left on it (it
    belongs to this uid, so its rights can be taken back). ``keep`` names what the folder held
    before any run (the folders bubblewrap made under ``/tmp`` to mount a virtual environment
    that lives there, say): those are not this uid's, and runs cannot change them."""
    for entry in os.scandir(folder):
        if entry.name in keep:
            continue
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
    if set(os.listdir(folder)) - keep:
        raise RuntimeError(f"{folder} could not be emptied")


def end_leftovers() -> None:
    """Kills every process of this pid namespace but pid 1 (the sandbox's init) and this one,
    and waits until none of them can run any more."""
    me = os.getpid()
    deadline = time.monotonic() + LEFTOVER_SECONDS
    while time.monotonic() < deadline:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass
        if not [pid for pid in os.listdir("/proc") if pid.isdigit() and int(pid) not in (1, me) and running(pid)]:
            return
        time.sleep(0.005)
    raise RuntimeError("processes of a run could not be ended")


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
        libc.syscall(KEYCTL, KEYCTL_CLEAR, keyring)


def serve(plan_path: str, inputs_path: str, out_dir: str, isolated: bool, folders: list[str]) -> None:
    """Answers each ``run`` request with the wait status of a forked run and whether it serves
    another (``more`` or ``last``); see the module docstring."""
    reply_fd = int(os.environ.pop("SANDBOX_REPLY_FD"))
    libc = ctypes.CDLL(None, use_errno=True)
    isolated = isolated and KEYCTL is not None
    before = {folder: set(os.listdir(folder)) for folder in folders}  # before warming up writes caches
    environment = dict(os.environ)
    warm_up()
    os.environ.clear()  # what warming up set (torch's first traced call sets TORCHINDUCTOR_CACHE_DIR) is not the runs'
    os.environ.update(environment)
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    requests = os.fdopen(0, "rb", buffering=0)
    while len(request := requests.readline().decode("ascii", "replace").split()) == 2 and request[0] == "run":
        for folder in folders:
            wipe(folder, before[folder])
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.close(reply_fd)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)
            os.setsid()
            libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
            if KEYCTL is not None:
                libc.syscall(KEYCTL, KEYCTL_JOIN_SESSION_KEYRING, None)  # a session keyring of its own
            try:
                run(plan_path, inputs_path, out_dir, request[1])
            finally:
                os._exit(70)  # only if the harness itself failed; never back into this loop
        _, status = os.waitpid(pid, 0)
        if isolated:
            end_leftovers()
            clear_ipc(libc)
            clear_keys(libc)
        else:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os.write(reply_fd, f"{status} {'more' if isolated else 'last'}\n".encode())
        if not isolated:
            return


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("plan")
    parser.add_argument("inputs")
    parser.add_argument("out")
    parser.add_argument("--isolated", action="store_true", help="in a private pid namespace: serve many runs")
    parser.add_argument("--wipe", action="append", default=[], help="a folder to empty before each run")
    args = parser.parse_args()
    serve(args.plan, args.inputs, args.out, args.isolated, args.wipe)


if __name__ == "__main__":
    main()
