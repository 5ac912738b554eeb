"""The run step: a submission's code and its probes, in the sandbox, surviving its faults.

The runner writes a plan (cells to run, probe calls after each answer cell) and the hidden
inputs, starts :mod:`autograder.harness` in the sandbox, and reads back the journal and
the probe records. When a run dies (a cell loops, exhausts memory, segfaults, calls
``os._exit``), the journal says which cell or probe was running; that one gets the status
(``timeout``, ``killed``, ``error``) and the run starts again without it, so one broken
cell never costs the items that do not depend on it.
"""

from __future__ import annotations

import json
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

import transformer_lm
from autograder import sandbox
from autograder.preflight import Preflight
from autograder.spec import Prepared

HARNESS = Path(__file__).with_name("harness.py")
# What student code may import from the course package: probes (called by the harness),
# the public test values and the plotting helpers. Never the reference or the checks.
SANDBOX_MODULES = ("__init__.py", "probes.py", "test_values.py", "viz.py", "data")
MAX_RECORD_BYTES = 16 * 2**20
MAX_JOURNAL_BYTES = 4 * 2**20


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
class ProbeOutcome:
    """What became of one probe call: ``ok`` (with its record or value), ``todo``, ``error``,
    ``timeout`` or ``killed``, with a message for the student."""

    status: str
    message: str = ""
    record: dict[str, torch.Tensor] | None = None
    value: object = None


@dataclass
class RunResult:
    """The outcomes of all probe calls, the cells that failed, and what the run printed."""

    outcomes: dict[str, ProbeOutcome] = field(default_factory=dict)
    cell_problems: dict[int, str] = field(default_factory=dict)
    output: str = ""
    attempts: int = 0


def sandbox_library(cache: Path) -> Path:
    """A folder holding only the student-visible modules of ``transformer_lm``."""
    package = Path(transformer_lm.__file__).parent
    target = cache / "transformer_lm"
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for name in SANDBOX_MODULES:
        source = package / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, target / name)
    for path in [cache, *cache.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return cache


def _parse_journal(data: bytes) -> list[dict]:
    """The journal's events; unreadable lines (a crash mid-write, forged junk) are skipped."""
    events = []
    for line in data[:MAX_JOURNAL_BYTES].decode("utf-8", "replace").splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(event, dict) and isinstance(event.get("event"), str):
            events.append(event)
    return events


def _read_journal(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with path.open("rb") as f:
        return _parse_journal(f.read(MAX_JOURNAL_BYTES))


def _running(events: list[dict]) -> tuple[str, object, float] | None:
    """The cell or probe that started and has not ended: ``(kind, id, start time)``."""
    open_step = None
    for event in events:
        kind = event["event"]
        if kind == "cell_start":
            open_step = ("cell", event.get("index"), event.get("time", 0.0))
        elif kind == "probe_start":
            open_step = ("probe", event.get("probe"), event.get("time", 0.0))
        elif kind in ("cell_end", "probe_end", "done"):
            open_step = None
    return open_step


def _load_record(path: Path) -> tuple[dict[str, torch.Tensor] | None, str]:
    """Loads a probe record without pickle, refusing oversized or non-float data."""
    if not path.exists():
        return None, "the probe said it saved a record, but there is none"
    if path.stat().st_size > MAX_RECORD_BYTES:
        return None, "the output is far larger than the task asks for"
    try:
        record = load_file(str(path))
    except Exception as error:  # noqa: BLE001 - a damaged file is a result
        return None, f"the record could not be read ({type(error).__name__})"
    return record, ""


def _death(result: sandbox.SandboxResult, watchdog_fired: bool, settings: RunSettings) -> tuple[str, str]:
    """The status and words for a run that did not finish."""
    if watchdog_fired or result.timed_out:
        return "timeout", (f"It ran for more than {settings.cell_seconds:.0f} s and was stopped "
                           "(an endless loop, or far too slow).")
    if result.signal is not None:
        name = signal.Signals(result.signal).name if result.signal in signal.valid_signals() else str(result.signal)
        why = {"SIGSEGV": "a segmentation fault", "SIGKILL": "out of memory or killed",
               "SIGABRT": "an abort"}.get(name, f"signal {name}")
        return "killed", f"The process was killed ({why})."
    return "error", f"The process exited (code {result.returncode}) before finishing, e.g. by os._exit or sys.exit."


def run_submission(pre: Preflight, prepared: dict[str, Prepared], probe_cells: dict[str, str],
                   workdir: Path, library: Path, settings: RunSettings, isolation: sandbox.Isolation) -> RunResult:
    """Runs one notebook's code and probe calls in the sandbox.

    ``prepared`` maps a probe id to its prepared check; ``probe_cells`` maps a probe id to
    the grade_id of the answer cell after which it runs.
    """
    run_cells = [c for c in pre.cells if c.cell_type == "code"]
    answer_index = {c.grade_id: c.index for c in run_cells if c.role == "answer"}
    plan = {"cells": [], "calls": {}, "skip_cells": [], "skip_probes": []}
    for cell in run_cells:
        runs = cell.role in ("answer", "readonly", "other") and not cell.skip
        probes_here = [pid for pid, gid in probe_cells.items() if answer_index.get(gid) == cell.index]
        if runs or probes_here:
            plan["cells"].append({"index": cell.index, "source": cell.source if runs else "", "probes": probes_here})
            if not runs:
                plan["skip_cells"].append(cell.index)
    tensors = {}
    for pid, prep in prepared.items():
        call = prep.call
        plan["calls"][pid] = {"probe": call.probe, "objects": call.objects, "arguments": call.arguments,
                              "tensor_keys": list(call.tensors)}
        tensors.update({f"{pid}::{name}": t.contiguous() for name, t in call.tensors.items()})

    workdir.chmod(0o755)  # the sandbox runs as nobody: what it reads must be readable by others
    inputs = workdir / "in"
    inputs.mkdir(mode=0o755, parents=True, exist_ok=True)
    shutil.copy2(HARNESS, inputs / "harness.py")
    if tensors:
        save_file(tensors, str(inputs / "inputs.safetensors"))
    else:
        (inputs / "inputs.safetensors").touch()

    result = RunResult()
    owner = {pid: probe_cells[pid] for pid in prepared}
    deadline = time.monotonic() + settings.total_seconds
    for attempt in range(settings.max_attempts):
        remaining = deadline - time.monotonic()
        if remaining <= 1 or all(pid in result.outcomes for pid in prepared):
            break
        result.attempts = attempt + 1
        (inputs / "plan.json").write_text(json.dumps(plan))
        for path in inputs.iterdir():
            path.chmod(0o644)
        out, scratch = workdir / f"out{attempt}", workdir / f"scratch{attempt}"
        out.mkdir()
        scratch.mkdir()
        journal = out / "journal.jsonl"
        fired = []

        def watch(read, fired=fired):
            """Stops the run when one cell or probe has been going for too long: the journal,
            read live from the sandbox's tmpfs, says which one and since when."""
            step = _running(_parse_journal(read("/grader/out/journal.jsonl")))
            if step and time.time() - step[2] > settings.cell_seconds:
                fired.append(step)
                return "cell time limit"
            return None

        run = sandbox.run_sandboxed(
            ["python", "/grader/in/harness.py", "/grader/in/plan.json", "/grader/in/inputs.safetensors", "/grader/out"],
            readonly={str(inputs): "/grader/in", str(library): "/grader/lib"},
            writable={str(out): "/grader/out", str(scratch): "/scratch"},
            limits=sandbox.Limits(wall_seconds=remaining, memory_bytes=settings.memory_bytes,
                                  processes=settings.processes, file_size_bytes=settings.file_size_bytes,
                                  output_bytes=settings.output_bytes),
            env={"PYTHONPATH": "/grader/lib", "MPLBACKEND": "Agg", "HOME": "/scratch", "OMP_NUM_THREADS": "1",
                 "MKL_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0"},
            cwd="/scratch", isolation=isolation, watch=watch,
        )
        result.output += run.output
        events = _read_journal(journal)
        for event in events:
            if event["event"] == "cell_end" and event.get("error"):
                result.cell_problems[event.get("index")] = str(event["error"])[:2000]
            if event["event"] != "probe_end" or event.get("probe") not in prepared:
                continue
            pid = event["probe"]
            if event.get("error"):
                status = "todo" if event.get("kind") == "todo" else "error"
                result.outcomes[pid] = ProbeOutcome(status, str(event["error"])[:2000])
            elif event.get("saved"):
                record, problem = _load_record(out / f"{pid}.safetensors")
                result.outcomes[pid] = ProbeOutcome("ok", record=record) if record is not None \
                    else ProbeOutcome("error", problem)
            else:
                result.outcomes[pid] = ProbeOutcome("ok", value=event.get("value"))
        plan["skip_probes"] = sorted(result.outcomes)
        if any(e["event"] == "done" for e in events):
            break
        status, message = _death(run, bool(fired), settings)
        step = _running(events)
        if step is None:
            # Died before the first cell, or between steps: nothing to skip, so nothing to retry.
            for pid in prepared:
                result.outcomes.setdefault(pid, ProbeOutcome(status, message + " (before the notebook ran)"))
            break
        kind, ident, _ = step
        if kind == "probe":
            result.outcomes[ident] = ProbeOutcome(status, message)
        else:
            result.cell_problems[ident] = f"{status}: {message}"
            plan["skip_cells"].append(ident)
            gid = next((c.grade_id for c in run_cells if c.index == ident and c.role == "answer"), None)
            for pid in prepared:
                if gid is not None and owner[pid] == gid:
                    result.outcomes.setdefault(pid, ProbeOutcome(status, "Your answer cell: " + message))
        plan["skip_probes"] = sorted(result.outcomes)
    for pid in prepared:
        result.outcomes.setdefault(pid, ProbeOutcome("timeout", "The notebook used up its total time before this check ran."))
    return result
