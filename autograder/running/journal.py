"""Reading what a run reported: its journal, held to the plan it was given.

The server writes a run's journal (:mod:`autograder.running.harness.serve`), but what is in it came from
the run's process, where student code runs too and could write events of its own. So the journal
is read as a claim, checked step by step against the plan: the cells and probes must start and
end in the plan's order, each once, with nothing else between them but the notes of what a probe
ran and of the windows the server timed in it. A journal that breaks the order, a ``garbled`` note
from the server or a ``tampered`` note from the run's guard makes the step it happened in ``tampered``.

A run counts only when it finished cleanly (``done``, exit status 0, nothing tampered). A run
that died could have written the end of a step that never ended, so nothing it reported is kept,
except which step it died in; the runner runs the notebook again without that step.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field

from autograder.running.harness.refusals import REFUSED

MAX_JOURNAL_BYTES = 4 * 2**20
MAX_STACKS = 20
"""Distinct cell stacks kept per name a probe ran: enough to tell who called it."""
COURSE_CODE = -1
"""What a note records for a frame of the course's code (its cell is the course's)."""
EVENTS = frozenset({"ready", "cell_start", "cell_end", "probe_start", "probe_end", "ran", "clock", "clocked",
                    "refused", "tampered", "garbled", "done"})
"""The events the harness and the server write: any other name in a journal is the run's own, and
no text is made of it (a name is the run's to choose, and could carry a hidden input out)."""


class Garbled(str):
    """The reader's own note that a journal cannot be read on, with why: a ``garbled`` event the run
    wrote itself is a string from JSON, never one of these, so its words are never taken."""


def parse(data: bytes) -> list[dict]:
    """The journal's events. Only the server writes the journal, each line whole with one write, and
    the server acts on each event it writes (it releases the course's code on a probe's end): a
    whole line that cannot be read back, or a journal longer than :data:`MAX_JOURNAL_BYTES`, is one
    the reader would see differently from the server, so it ends the events with a ``garbled`` note,
    which makes the step it came in ``tampered``. A last line without its newline is one being
    written while it is read, and waits for the next reading."""
    events = []
    if len(data) > MAX_JOURNAL_BYTES:
        return [*parse(data[:data.rfind(b"\n", 0, MAX_JOURNAL_BYTES) + 1]),
                {"event": Garbled(f"the run reported more than {MAX_JOURNAL_BYTES // 2**20} MiB")}]
    whole = data[:data.rfind(b"\n") + 1].decode("utf-8", "replace")
    for number, line in enumerate(whole.split("\n")[:-1], 1):
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):
            event = None
        if not isinstance(event, dict) or not isinstance(event.get("event"), str):
            return [*events, {"event": Garbled(f"line {number} of the run's journal cannot be read")}]
        events.append(event)
    return events


def steps(plan: dict) -> Iterator[tuple[str, object]]:
    """The steps the plan runs, in order: ``("cell", index)`` and ``("probe", probe id)``."""
    skip_cells, skip_probes = set(plan["skip_cells"]), set(plan["skip_probes"])
    for cell in plan["cells"]:
        if cell["index"] not in skip_cells:
            yield "cell", cell["index"]
        yield from (("probe", pid) for pid in cell["probes"] if pid not in skip_probes)
    for stage in plan.get("stages", ()):
        yield from (("probe", pid) for pid in stage if pid not in skip_probes)


MAX_REFUSED = 20
"""Refusals kept from one run: enough to tell the instructor what the code tried."""


@dataclass
class Reading:
    """What a run's journal says, as far as it keeps to the plan."""

    ended: list[tuple[tuple[str, object], dict]] = field(default_factory=list)
    """Each step that started and ended, with its end event."""
    ran: dict[str, dict[str, list[tuple[int, ...]]]] = field(default_factory=dict)
    """For each probe, each watched name it ran, with the cells on the stack (innermost first)."""
    open_step: tuple[str, object] | None = None
    """The step that started and did not end."""
    step_started: float = 0.0
    """When the open step started (the server's clock)."""
    last_time: float = 0.0
    """When the last event came."""
    counts: dict[int, int] = field(default_factory=dict)
    """Which cell (plan index) ran under each IPython execution count."""
    done: bool = False
    tampered: str = ""
    """Why the journal cannot be believed, when it cannot, in the grader's own words (for the
    instructor's flag: the run chose none of them)."""
    guard: bool = False
    """Whether it was the run's guard that reported tampering (the run's own code changed what the
    grader relies on), rather than a journal that broke the plan."""
    refused: list[str] = field(default_factory=list)
    """What the run's code tried and the sandbox refused (audit events: ``os.fork``, ``mmap.__new__``)."""

    @property
    def last_step(self) -> tuple[str, object] | None:
        return self.open_step or (self.ended[-1][0] if self.ended else None)


def read(events: list[dict], plan: dict) -> Reading:
    """Holds ``events`` (a run's journal, from its ``ready`` line, which the server wrote) to ``plan``."""
    reading, expected = Reading(), steps(plan)
    counts = reading.counts
    if not events:
        return reading
    reading.last_time = events[0]["time"] if isinstance(events[0].get("time"), float) else 0.0
    events = events[1:]
    kinds = {"cell": ("cell_start", "cell_end", "index"), "probe": ("probe_start", "probe_end", "probe")}
    for event in events:
        name = event["event"]
        reading.last_time = event["time"] if isinstance(event.get("time"), float) else reading.last_time
        if isinstance(name, Garbled):
            reading.tampered = str(name)
            return reading
        if name in ("tampered", "garbled"):
            reading.tampered = "the run's guard reported that its code changed what the grader relies on" if \
                name == "tampered" else "the run wrote a note that only the grader writes"
            reading.guard = name == "tampered"
            return reading
        if name == "refused":
            _note_refused(reading, event.get("what"))
            continue
        step = reading.open_step
        if step is None:
            following = next(expected, None)
            if name == "done" and following is None:
                reading.done = True
                continue
            start = kinds[following[0]][0] if following else None
            if following is None or name != start or event.get(kinds[following[0]][2]) != following[1]:
                reading.tampered = f"the run reported {_named(name)} where the plan runs {following or 'nothing more'}"
                return reading
            reading.open_step, reading.step_started = following, reading.last_time
            if name == "cell_start" and isinstance(event.get("count"), int):
                counts[event["count"]] = following[1]
            continue
        _, end, key = kinds[step[0]]
        if name == "ran" and step[0] == "probe":
            _note(reading.ran.setdefault(step[1], {}), event, counts)
        elif name in ("clock", "clocked") and step[0] == "probe" and event.get("probe") == step[1]:
            continue   # the server times the window (harness.clock) and keeps its own figures
        elif name == end and event.get(key) == step[1]:
            reading.ended.append((step, event))
            reading.open_step = None
        else:
            reading.tampered = f"the run reported {_named(name)} while {step[0]} {step[1]} ran"
            return reading
    return reading


def _note_refused(reading: Reading, what) -> None:
    """Keeps what a run was refused, named only when it is one of the grader's own names."""
    if len(reading.refused) < MAX_REFUSED:
        reading.refused.append(what if isinstance(what, str) and what in REFUSED else
                               "an operation a grading run may not make")


def _named(name: str) -> str:
    """An event's name, as a text may give it: only the harness's own names are spelled out."""
    return name if name in EVENTS else "an event the harness never writes"


def _note(ran: dict[str, list[tuple[int, ...]]], event: dict, counts: dict[int, int]) -> None:
    """Adds a ``ran`` note (a watched name, the execution counts of the cells on the stack) as the
    cells' plan indexes."""
    name, found = event.get("name"), event.get("counts")
    if not isinstance(name, str) or not isinstance(found, list):
        return
    stack = tuple(COURSE_CODE if c == COURSE_CODE else counts[c] for c in found
                  if isinstance(c, int) and (c == COURSE_CODE or c in counts))
    stacks = ran.setdefault(name, [])
    if stack not in stacks and len(stacks) < MAX_STACKS:
        stacks.append(stack)
