"""What a run's reply says, read as untrusted data: its exit status and how it died, the probes'
records (loaded without pickle, within a size limit), and probe messages, kept only where they
are texts of the closed catalogue (:mod:`autograder.reading.messages`)."""

from __future__ import annotations

import os
import signal

import torch
from safetensors.torch import load

from autograder.reading import messages
from autograder.running import journal, sandbox
from autograder.running.harness.guard import TAMPERED_EXIT
from autograder.running.harness.report import RUN_LOST_ITS_REPORT
from autograder.reading.messages import DEATH, ERRORS, OUTCOME, TAMPERING, render

MAX_RECORD_BYTES = 16 * 2**20
CRASHES = frozenset({signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT, signal.SIGSYS,
                     signal.SIGTRAP})
"""The signals of a fault in the process's own code (the kernel's, or an abort): told as a crash."""


def probe_message(error: str, calls: dict) -> str:
    """A probe's message as a student may read it: one of the probes' own texts of the catalogue
    (:data:`autograder.reading.messages.PROBES`), its names those of the plan's calls (the objects they call,
    the parameters they load), or else a sentence of the catalogue's. The run's process sent the
    message, so it could be any text: a student's class or parameter can be given any name at run
    time, and a name could carry a hidden input out."""
    names = {str(name) for call in calls.values() for name in (*call["objects"].values(), *call["tensor_keys"])}
    names |= {piece for name in list(names) for piece in (name.split("/")[-1], *name.replace("/", ".").split("."))}
    return error if messages.conforms(error, messages.probe_grammar(names)) else messages.PROBE_FALLBACK


def load_record(data: bytes) -> tuple[dict[str, torch.Tensor] | None, str]:
    """Loads a probe record without pickle, refusing oversized or non-float data."""
    if not data:
        return None, ERRORS["no_record"]
    if len(data) > MAX_RECORD_BYTES:
        return None, ERRORS["record_too_large"]
    try:
        record = load(data)
    except Exception:  # noqa: BLE001 - a damaged file is a result
        return None, ERRORS["unreadable_record"]
    return record, ""


def death(reply: sandbox.Reply, watchdog_fired: bool, cell_seconds: float, memory_bytes: int) -> tuple[str, str]:
    """The status and words for a run that did not finish, under its limits of time (a cell's) and
    memory (all its processes')."""
    if watchdog_fired or reply.timed_out:
        return "timeout", render(DEATH["too_long"], seconds=f"{cell_seconds:.0f}")
    if (reply.text or "").split()[2:] == ["memory"]:
        return "killed", render(DEATH["memory"], gib=f"{memory_bytes / 2**30:g}")
    code = exit_code(reply)
    if code is None:
        return "killed", DEATH["lost"]
    if code < 0:  # which signal, or which exit code, is the run's choice: only the kind of ending is told
        return "killed", DEATH["crashed"] if -code in CRASHES else DEATH["killed"]
    return "error", DEATH["exited"]


def exit_code(reply: sandbox.Reply) -> int | None:
    """The run's exit code (negative: the signal that ended it), from the harness's answer."""
    try:
        return os.waitstatus_to_exitcode(int((reply.text or "").split()[0]))
    except (ValueError, IndexError):
        return None


def ending(reading: journal.Reading, reply: sandbox.Reply, fired: bool, cell_seconds: float,
           memory_bytes: int) -> tuple[str, str, str]:
    """The status and text of a run that did not finish cleanly (under its limits of time, a
    cell's, and memory), and, where it was stopped as tampered, the instructor's words for why:
    both made by the grader alone, never of the run's words (:mod:`autograder.reading.messages`)."""
    code = exit_code(reply)
    if not (reading.tampered or code in (TAMPERED_EXIT, RUN_LOST_ITS_REPORT)):
        return (*death(reply, fired, cell_seconds, memory_bytes), "")
    plan, changed, lost = TAMPERING
    if reading.tampered:
        why = changed if reading.guard else plan
    else:
        why = changed if code == TAMPERED_EXIT else lost
    return "tampered", render(OUTCOME["stopped"], why=why), reading.tampered or why
