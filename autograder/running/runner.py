"""The run step: a submission's code and its probes, in the sandbox, surviving its faults.

The runner writes a plan (cells to run, probe calls after each answer cell) and the hidden
inputs, starts :mod:`autograder.running.harness` in the sandbox, and reads back the journal and
the probe records. When a run dies (a cell loops, exhausts memory, segfaults, calls
``os._exit``), the journal says which cell or probe was running; that one gets the status
(``timeout``, ``killed``, ``error``) and the run starts again without it, so one broken
cell never costs the items that do not depend on it.
"""

from __future__ import annotations

import json
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import save_file

import transformer_lm
from transformer_lm import forbidding
from autograder.running import clocked, journal, kept_blocks, sandbox
from autograder.running.outcome import ProbeOutcome
from autograder.reading.preflight import Preflight
from autograder.running.run_plan import plan_of
from autograder.reading.messages import BEFORE_RUN, DEATH, ERRORS, IN_ANSWER_CELL, own_line, render
from autograder.running.run_reply import ending, exit_code, probe_message
from transformer_lm.judging import is_builtin_exception
from transformer_lm.prepared import Prepared

HARNESS = Path(__file__).with_name("harness")
"""The package that runs inside the sandbox (copied there as ``harness``)."""
# What student code may import from the course package: its empty ``__init__.py`` and the folder
# ``transformer_lm/sandboxed/`` (probes, public test values, plots). Never the reference or the checks.
SANDBOX_MODULES = ("__init__.py", "sandboxed")
MOUNTS = {"in": "/grader/in", "lib": "/grader/lib", "out": "/grader/out", "scratch": "/scratch"}
"""Where the sandbox shows the worker's folders; ``read`` takes these paths in every mode."""
ANSWER_SECONDS = 5.0
"""How long the harness may take to answer once a run has written ``done``."""


@dataclass(frozen=True)
class RunSettings:
    """Limits of one submission's run. ``cell_seconds`` bounds each cell and each probe."""

    cell_seconds: float = 30.0
    total_seconds: float = 240.0
    memory_bytes: int = 4 * 2**30
    processes: int = 64
    file_size_bytes: int = 64 * 2**20
    output_bytes: int = 256 * 2**10
    max_attempts: int = 6


@dataclass
class RunResult:
    """The outcomes of all probe calls, the cells that failed, what the run printed, why it was
    stopped as tampered (each time it was), and what its code tried that the sandbox refused."""

    outcomes: dict[str, ProbeOutcome] = field(default_factory=dict)
    cell_problems: dict[int, str] = field(default_factory=dict)
    output: str = ""
    attempts: int = 0
    tampering: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    def merge(self, other: RunResult) -> None:
        """Adds what another run of the same notebook found (its probes are others)."""
        self.outcomes.update(other.outcomes)
        for index, problem in other.cell_problems.items():
            self.cell_problems.setdefault(index, problem)
        self.output += other.output
        self.attempts += other.attempts
        self.tampering += other.tampering
        self.refused += other.refused


@dataclass(frozen=True)
class RunLimits:
    """What a run takes away before the notebook's first cell: the forbidden calls' kernels and
    re-implementations (``absent``, see :func:`autograder.reading.forbidden.absent_from_run`), and memory
    beyond ``memory_cap`` bytes more than it then holds (0: no cap beyond the settings')."""

    absent: dict = field(default_factory=dict)
    memory_cap: int = 0


def sandbox_library(folder: Path) -> Path:
    """``folder``, made to hold only the student-visible modules of ``transformer_lm``."""
    package = Path(transformer_lm.__file__).parent
    target = folder / "transformer_lm"
    target.mkdir(parents=True)
    for name in SANDBOX_MODULES:
        source = package / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, target / name)
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return folder


class Worker:
    """A warm sandbox for one grading thread, and the folders it shares with it.

    The sandbox runs :mod:`autograder.running.harness` as a server: for each run the worker writes the
    plan and hidden inputs into ``in/`` (bound read-only at ``/grader/in``), asks for a run, and
    reads the journal and probe records back from the sandbox's tmpfs. A sandbox that died or
    was stopped is replaced by a fresh one at the next run. Without bubblewrap, paths are host
    paths and each run gets a fresh server (see the harness: only a private pid namespace lets
    it clean up between runs).
    """

    def __init__(self, settings: RunSettings, isolation: sandbox.Isolation,
                 course_figures: clocked.CourseFigures | None = None):
        self.settings, self.isolation = settings, isolation
        self.course_figures = course_figures or clocked.CourseFigures()   # shared by a class's workers
        self.root = Path(tempfile.mkdtemp(prefix="grader-"))
        self.root.chmod(0o755)  # the sandbox runs as nobody: what it reads must be readable by others
        self.library = sandbox_library(self.root / "lib")
        self.inputs, out, scratch = self.root / "in", self.root / "out", self.root / "scratch"
        for folder in (self.inputs, out, scratch):
            folder.mkdir(mode=0o755)
        self.course = self.inputs / "course"  # the stages' course code: the server reads it, runs cannot see it
        self.course.mkdir(mode=0o755)
        shutil.copytree(HARNESS, self.inputs / "harness", ignore=shutil.ignore_patterns("__pycache__"))
        for path in (self.inputs / "harness").rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        self.allocator = kept_blocks.library()
        if self.allocator is not None:
            shutil.copy(self.allocator, self.inputs / kept_blocks.NAME)
        self.sandboxed = isolation.name == "bubblewrap"
        self._host = {"in": str(self.inputs), "lib": str(self.library), "out": str(out), "scratch": str(scratch)}
        self.paths = MOUNTS if self.sandboxed else self._host  # as the harness sees them
        self.session: sandbox.Session | None = None
        self._served = 0  # runs the current session has served
        self._token = ""  # names the current run in its journal

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> sandbox.Session:
        paths, settings = self.paths, self.settings
        if not self.sandboxed:  # a sandbox's folders start empty; these host folders are reused
            for name in ("out", "scratch"):
                shutil.rmtree(self._host[name])
                Path(self._host[name]).mkdir(mode=0o755)
        limits = sandbox.Limits(memory_bytes=settings.memory_bytes, processes=settings.processes,
                                file_size_bytes=settings.file_size_bytes, output_bytes=settings.output_bytes)
        preload = [] if self.allocator is None else ["env", f"LD_PRELOAD={paths['in']}/{kept_blocks.NAME}"]
        argv = [*preload, "python", "-m", "harness.serve", f"{paths['in']}/plan.json", f"{paths['in']}/inputs.safetensors",
                paths["out"], "--wipe", paths["out"], "--memory", str(settings.memory_bytes),
                "--scratch-bytes", str(limits.scratch_bytes), "--scratch-inodes", str(limits.scratch_inodes),
                *(f"--module={module}" for module in forbidding.family_modules())]
        if self.sandboxed:
            argv += ["--isolated", "--scratch", paths["scratch"], "--scratch", "/tmp", "--scratch", "/dev/shm"]
        return sandbox.Session(
            argv,
            readonly={self._host[name]: MOUNTS[name] for name in ("in", "lib")},
            writable={self._host[name]: MOUNTS[name] for name in ("out", "scratch")},
            limits=limits,
            env={"PYTHONPATH": f"{paths['lib']}:{paths['in']}", "MPLBACKEND": "Agg", "HOME": paths["scratch"], "OMP_NUM_THREADS": "1",
                 "MKL_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0"},
            cwd=paths["scratch"], isolation=self.isolation)

    def run(self, plan: dict, tensors: dict[str, torch.Tensor], seconds: float, watch,
            stages: dict | None = None) -> tuple[sandbox.Reply, Callable[[str], bytes]]:
        """Runs ``plan`` once; returns the harness's answer and a reader of the run's files,
        which stays valid until the next run. ``stages`` (see :meth:`Attempts.stages`) goes
        where only the server reads it."""
        if self.session is not None and not self.session.alive:
            self.session.close()
            self.session = None
        if self.session is None:
            self.session, self._served = self._start(), 0
        (self.inputs / "plan.json").write_text(json.dumps(plan))
        if tensors:
            save_file(tensors, str(self.inputs / "inputs.safetensors"))
        else:
            (self.inputs / "inputs.safetensors").write_bytes(b"")
        (self.course / "stages.json").write_text(json.dumps(stages or {"own": [], "stages": []}))
        for path in (self.inputs / "plan.json", self.inputs / "inputs.safetensors", self.course / "stages.json"):
            path.chmod(0o644)
        self._token = secrets.token_hex(8)
        reply = self.session.request(f"run {self._token}", seconds, watch)
        if reply.text is None and self._served and not self.events(self.session.read):
            # A server that ran earlier submissions failed before this one began (say, it could
            # not clean up after the last): that is no fault of this submission; try a fresh one.
            self.session.close()
            self.session, self._served = self._start(), 0
            reply = self.session.request(f"run {self._token}", seconds, watch)
        self._served += 1
        if reply.text is not None and reply.text.split()[-1] != "more":
            self.session.stop()  # the harness serves no further run; the next one starts a fresh sandbox
        return reply, self.session.read

    def events(self, read: Callable[[str], bytes]) -> list[dict]:
        """The journal of the current run, read with ``read``; empty until that run has begun
        (a journal that an earlier run left, because cleaning up failed, is not this run's)."""
        events = journal.parse(read(f"{MOUNTS['out']}/journal.jsonl"))
        if events and events[0]["event"] == "ready" and events[0].get("run") == self._token:
            return events
        return []

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None
        shutil.rmtree(self.root, ignore_errors=True)


def run_submission(pre: Preflight, prepared: dict[str, Prepared], probe_cells: dict[str, str],
                   worker: Worker, watch: dict[str, list[str]] | None = None,
                   stand_ins: dict[str, list[str]] | None = None, course_code: dict[str, dict] | None = None,
                   limits: RunLimits = RunLimits()) -> RunResult:
    """Runs one notebook's code and probe calls in the worker's sandbox.

    ``prepared`` maps a probe id to its prepared check; ``probe_cells`` maps a probe id to
    the grade_id of the answer cell after which it runs; ``watch`` maps a probe id to the
    torch functions and ATen operators whose calls its trace records (forbidden ones).
    ``stand_ins`` maps a probe id to the names the course's code stands in for during it, and
    ``course_code`` maps it to that code: those probes run after the last cell, one stage of
    probes with the same code after another, each stage's code given to the run only once every
    probe before it has ended (see :class:`Stages`). ``limits`` says what the run takes away before
    the first cell. A run that dies is run again without the cell or probe that killed it, as long
    as attempts and total time remain.
    """
    settings = worker.settings
    attempts = Attempts(pre, prepared, probe_cells, worker, stand_ins or {}, course_code or {})
    attempts.plan.update(watch=watch or {}, absent=limits.absent, memory_cap=limits.memory_cap)
    result = attempts.result
    deadline = time.monotonic() + settings.total_seconds
    for attempt in range(settings.max_attempts):
        remaining = deadline - time.monotonic()
        if remaining <= 1 or all(pid in result.outcomes for pid in prepared):
            break
        result.attempts = attempt + 1
        if not attempts.run_once(remaining):
            break
    out_of_attempts = time.monotonic() < deadline - 1 and result.attempts == settings.max_attempts
    unreached = render(DEATH["out_of_attempts"], attempts=result.attempts) if out_of_attempts else DEATH["out_of_time"]
    for pid in prepared:
        result.outcomes.setdefault(pid, ProbeOutcome("timeout", unreached))
    return result


def _watchdog(worker: Worker, plan: dict, fired: list[tuple[str, object]]) -> Callable[[Callable[[str], bytes]], str | None]:
    """A ``watch`` for :meth:`Worker.run`. It stops the run when one cell or probe has been going
    for too long (and appends that step to ``fired``), when the run stays as long between two
    steps (the grader's own work there is quick: a run that reported a step's end and went on
    inside it is stuck there), when the run ended and the harness does not answer, or as soon as
    the run's report leaves the plan (tampered: waiting on would only wait for what the server
    will never release, up to the run's whole time): the journal, read live from the sandbox's
    tmpfs, says which step and since when."""

    def watch(read):
        events = worker.events(read)
        reading = journal.read(events, plan)
        waited = time.time() - (reading.step_started if reading.open_step else reading.last_time)
        if not events:
            return None
        if reading.tampered:
            return "report off the plan"
        if reading.open_step and waited > worker.settings.cell_seconds:
            fired.append(reading.open_step)
            return "cell time limit"
        if reading.done and waited > ANSWER_SECONDS:
            return "no answer after the run"
        if not reading.done and not reading.open_step and waited > worker.settings.cell_seconds:
            return "stuck between two steps"
        return None

    return watch


class Attempts:
    """The runs of one submission: the plan, which loses each cell or probe that killed a run, and
    the result gathered over all runs."""

    def __init__(self, pre: Preflight, prepared: dict[str, Prepared], probe_cells: dict[str, str],
                 worker: Worker, stand_ins: dict[str, list[str]], course_code: dict[str, dict]):
        self.worker, self.prepared, self.course_code = worker, prepared, course_code
        self.cells = pre.code_cells
        self.plan, self.tensors = plan_of(pre, prepared, probe_cells, stand_ins, course_code)
        self.timed = clocked.write_inputs(worker, prepared)
        self.owner = {pid: probe_cells[pid] for pid in prepared}
        self.result = RunResult()

    def run_once(self, seconds: float) -> bool:
        """Runs the plan once, for at most ``seconds``, and records what it found; True when the
        run did not finish cleanly and may be run again without the step it stopped in."""
        fired = []
        reply, read = self.worker.run(self.plan, self.tensors, seconds, _watchdog(self.worker, self.plan, fired),
                                      self.stages())
        self.result.output += reply.output
        reading = journal.read(self.worker.events(read), self.plan)
        self.result.refused += reading.refused
        if reading.done and exit_code(reply) == 0 and not reading.tampered:
            self.record(reading, read)
            return False
        limits = self.worker.settings
        status, message, tampering = ending(reading, reply, bool(fired), limits.cell_seconds, limits.memory_bytes)
        self.result.tampering += [tampering] if tampering else []
        return self._blame(reading.last_step, status, message)

    def stages(self) -> dict:
        """What the server gives the run of the course's code, and when: each stage's code once the
        probes before it (``own``, then the stage before) have ended."""
        skip = set(self.plan["skip_probes"])
        own = [pid for cell in self.plan["cells"] for pid in cell["probes"] if pid not in skip]
        return {"own": own, "stages": [{"pids": [pid for pid in stage if pid not in skip],
                                        "code": self.course_code[stage[0]]} for stage in self.plan["stages"]],
                "clocked": {pid: files for pid, files in self.timed.items() if pid not in skip}}

    def record(self, reading: journal.Reading, read: Callable[[str], bytes]) -> None:
        """Takes the cells' errors and the probes' outcomes (and records) from a run that finished."""
        result = self.result
        for (kind, ident), event in reading.ended:
            if kind == "cell":
                if event.get("error"):
                    result.cell_problems[ident] = self._message(event, reading)
                continue
            if event.get("error"):
                status = {"todo": "todo", "absent": "forbidden"}.get(event.get("kind"), "error")
                outcome = ProbeOutcome(status, self._message(event, reading),
                                       exception=event["error"] if event.get("kind") == "error" else "")
                if status == "forbidden" and isinstance(event.get("cells"), list):
                    outcome.absent_from = tuple(reading.counts[c] for c in event["cells"][:64]
                                                if isinstance(c, int) and c in reading.counts)
            elif event.get("saved"):
                record, problem = clocked.saved_record(ident, self.timed, lambda name: read(f"{MOUNTS['out']}/{name}"))
                outcome = ProbeOutcome("ok", record=record) if record is not None else ProbeOutcome("error", problem)
            else:
                outcome = ProbeOutcome("ok", value=event.get("value"))
            outcome.ran = reading.ran.get(ident, {})
            result.outcomes[ident] = outcome

    def _message(self, event: dict, reading: journal.Reading) -> str:
        """The words for an error a run reported, with no text the student's code made at run time:
        a probe's own message where the catalogue holds it (:func:`probe_message`), or the exception's
        type and the line of the submitted cell it was raised on."""
        if event.get("kind") == "probe":
            return probe_message(str(event["error"])[:2000], self.plan["calls"])
        text = render(ERRORS["cell_error"], exception=event["error"]) if is_builtin_exception(event["error"]) \
            else ERRORS["other_error"]
        index, where = self._cell_of(event, reading), event.get("where")
        cell = next((c for c in self.cells if c.index == index), None)
        lines = cell.source.splitlines() if cell else []
        if lines and isinstance(where[1], int) and 0 < where[1] <= len(lines):
            text += render(ERRORS["error_line"], line=where[1], code=own_line(lines[where[1] - 1]))
        return text

    @staticmethod
    def _cell_of(event: dict, reading: journal.Reading) -> int | None:
        """The plan index of the cell an error was raised in (its ``where``: an execution count and a
        line), or None when the run did not say, or said what no cell of the run was."""
        where = event.get("where")
        if isinstance(where, list) and len(where) == 2 and isinstance(where[0], int):
            return reading.counts.get(where[0])
        return None

    def _blame(self, step: tuple[str, object] | None, status: str, message: str) -> bool:
        """Gives a death's ``status`` and ``message`` to ``step``, the cell or probe the run was in
        (or had ended last), and takes it out of the plan; a dead answer cell takes the probes that
        check it along. False when the run died before its first step: nothing to skip, so nothing
        to retry."""
        result = self.result
        if step is None:
            for pid in self.prepared:
                result.outcomes.setdefault(pid, ProbeOutcome(status, message + BEFORE_RUN))
            return False
        kind, ident = step
        if kind == "probe":
            result.outcomes[ident] = ProbeOutcome(status, message)
        else:
            result.cell_problems[ident] = f"{status}: {message}"
            self.plan["skip_cells"].append(ident)
            gid = next((c.grade_id for c in self.cells if c.index == ident and c.role == "answer"), None)
            for pid in self.prepared:
                if gid is not None and self.owner[pid] == gid:
                    result.outcomes.setdefault(pid, ProbeOutcome(status, IN_ANSWER_CELL + message))
        self.plan["skip_probes"] = sorted(result.outcomes)
        return True
