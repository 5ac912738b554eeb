"""Timed checks on the trusted side: their windows' inputs for the server, their records and the
server's figures back, and the figures of the course's code on the same inputs, to compare with.

Why here: the server reads a run's CPU clock around each window of a timed call
(:mod:`autograder.running.harness.clock`), and only the trusted side may turn those readings into a
verdict. What a timed call costs depends on the machine and its load, so a figure means something
only beside the course's own on the same inputs, in the same sandbox: the course's code runs the
same windows in a run of its own (it holds no student code), once per class (:class:`CourseFigures`),
and its figures join every record of that check.
"""

from __future__ import annotations

import json
import math
import threading

import torch
from safetensors.torch import save_file

from autograder.running import journal
from autograder.running.harness.clock import FIGURES
from autograder.running.run_reply import exit_code, load_record
from transformer_lm.prepared import Clocked, Prepared
from transformer_lm.timed_judges import paired_ratio

FOLDER = "clocked"
"""Where, in the folder that only the server reads, the windows' inputs wait."""
REFERENCE = "+reference"
"""The suffix of a timed probe's id when the course's code makes its calls."""
REFERENCE_SECONDS = 120.0
"""How long the course's timed calls may take together."""


def reference_windows(clocked: Clocked) -> list[dict]:
    """The keyword arguments of the course's windows: those of the answer's windows they reuse."""
    return [clocked.windows[window] for window in clocked.reference]


def write_inputs(worker, prepared: dict[str, Prepared]) -> dict[str, list[str]]:
    """Writes the inputs of the windows of each timed probe of ``prepared`` where only the
    ``worker``'s server reads them, once: they are the same for every submission. Returns each
    timed probe's files, window by window."""
    files = {}
    for pid, prep in prepared.items():
        if prep.clocked is None:
            continue
        folder = worker.course / FOLDER
        folder.mkdir(mode=0o755, exist_ok=True)
        files[pid] = [f"{pid}.{window}.safetensors" for window in range(len(prep.clocked.windows))]
        for window, name in enumerate(files[pid]):
            if not (folder / name).exists():
                save_file({key: t.contiguous() for key, t in prep.clocked.inputs(window).items()}, str(folder / name))
                (folder / name).chmod(0o644)
    return files


def saved_record(pid: str, timed: dict[str, list[str]], read) -> tuple[dict[str, torch.Tensor] | None, str]:
    """The record a probe saved, read with ``read`` from the results folder: a timed probe's
    (``timed`` holds their windows' inputs, :func:`timed_record`) or any other's."""
    return timed_record(pid, len(timed[pid]), read) if pid in timed else load_record(read(f"{pid}.safetensors"))


def timed_record(pid: str, windows: int, read) -> tuple[dict[str, torch.Tensor] | None, str]:
    """A timed probe's record, read with ``read`` from the results folder: each window's record under
    ``w<window>.``, and the server's figure of the window, in seconds (NaN where it counted for
    nothing), as ``clock.w<window>``; or None and why it could not be read."""
    figures = _figures(read).get(pid, [])
    record = {}
    for window in range(windows):
        found, problem = load_record(read(f"{pid}.{window}.safetensors"))
        if found is None:
            return None, problem
        record.update({f"w{window}.{name}": tensor for name, tensor in found.items()})
        figure = figures[window] if window < len(figures) and isinstance(figures[window], int) else None
        record[f"clock.w{window}"] = torch.tensor(math.nan if figure is None else figure / 1e9, dtype=torch.float64)
    return record, ""


def _figures(read) -> dict:
    """The server's figures (:data:`~autograder.running.harness.clock.FIGURES`), or none."""
    try:
        figures = json.loads(read(FIGURES) or b"{}")
    except ValueError:
        return {}
    return figures if isinstance(figures, dict) else {}


def with_reference(record: dict[str, torch.Tensor], own: float) -> dict[str, torch.Tensor]:
    """``record`` with the course's figure beside it (``reference.own``: its
    :func:`~transformer_lm.timed_judges.paired_ratio`)."""
    return {**record, "reference.own": torch.tensor(own, dtype=torch.float64)}


class CourseFigures:
    """The course's figures of one class's timed checks, each made once, in the sandbox of a worker
    that needs it, and shared by the class's other workers.

    Why once per class: the figure is a ratio of CPU times of calls made one after the other in
    one process (:func:`~transformer_lm.timed_judges.paired_ratio`), which the sandboxes of one
    machine and one set of limits share; made again in each worker's sandbox, it cost each
    worker about six seconds of assignment 05's grading. Why one check at a time: a worker that
    needs figures another is making makes the next one meanwhile, rather than wait for both. A
    figure that could not be made (NaN) is tried again at the next need."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._figures: dict[tuple, float] = {}
        self._making: set[tuple] = set()

    def of(self, worker, prepared: dict[str, Prepared], code: dict, limits, out: str) -> dict[str, float]:
        """The figures of ``prepared``'s timed probes under ``limits`` (see :func:`reference_figures`)."""
        key = (json.dumps(limits.absent, sort_keys=True), limits.memory_cap)
        tried: set[str] = set()
        with self._changed:
            while True:
                missing = [pid for pid in prepared
                           if pid not in tried and not self._figures.get((pid, *key), math.nan) > 0]
                if not missing:
                    return {pid: self._figures.get((pid, *key), math.nan) for pid in prepared}
                free = [pid for pid in missing if (pid, *key) not in self._making]
                if not free:
                    self._changed.wait()
                    continue
                pid = free[0]
                tried.add(pid)
                self._making.add((pid, *key))
                self._changed.release()
                try:
                    made = reference_figures(worker, {pid: prepared[pid]}, code, limits, out)[pid]
                finally:
                    self._changed.acquire()
                    self._making.discard((pid, *key))
                    self._changed.notify_all()
                self._figures[(pid, *key)] = made


def reference_figures(worker, prepared: dict[str, Prepared], code: dict, limits,
                      out: str) -> dict[str, float]:
    """For each timed probe of ``prepared``, the course's ratio of its causal windows' CPU time to its
    windows' without the mask (:func:`~transformer_lm.timed_judges.paired_ratio`; NaN when a window did not count), from a run of the course's
    code (``code``, standing in for each check's ``stands_in``) in the worker's sandbox, under the
    ``limits`` of the answers' runs (what they take out of PyTorch, the memory cap and its
    allocator); ``out`` is the results folder as the worker reads it."""
    names = {pid + REFERENCE: prep for pid, prep in prepared.items()}
    calls = {name: {**prep.call.plan(), "untraced": True, "windows": reference_windows(prep.clocked),
                    "stand_ins": [prep.clocked.stands_in]} for name, prep in names.items()}
    plan = {"cells": [], "calls": calls, "skip_cells": [], "skip_probes": [], "late": list(names),
            "stages": [list(names)], "watch": {}, "absent": limits.absent, "memory_cap": limits.memory_cap}
    files = write_inputs(worker, prepared)
    stages = {"own": [], "stages": [{"pids": list(names), "code": code}],
              "clocked": {pid + REFERENCE: [files[pid][window] for window in prep.clocked.reference]
                          for pid, prep in prepared.items()}}
    reply, read = worker.run(plan, {}, REFERENCE_SECONDS, lambda _: None, stages)
    reading = journal.read(worker.events(read), plan)
    clean = reading.done and exit_code(reply) == 0 and not reading.tampered
    found = _figures(lambda name: read(f"{out}/{name}")) if clean else {}
    figures = {}
    for pid, prep in prepared.items():
        seconds = found.get(pid + REFERENCE, [])
        causal = [prep.clocked.windows[window]["causal"] for window in prep.clocked.reference]
        counted = len(seconds) == len(causal) and all(isinstance(s, int) for s in seconds)
        figures[pid] = paired_ratio(seconds, causal) if counted else math.nan
    return figures
