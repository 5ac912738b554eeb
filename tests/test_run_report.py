"""What a run reports, read as the trusted side reads it: every line of the journal is read back or the
step it came in is tampered, an event too deep to read back is refused where it arrives, and the
course's code is given to a run only on probe ends that the trusted reader counts too."""

from __future__ import annotations

import json
import os

from hypothesis import example, given, settings
from hypothesis import strategies as st

from autograder.running import journal
from autograder.running.harness import report
from autograder.running.harness.serve import Gate
from autograder.running.run_reply import death
from autograder.running.sandbox import Reply

PLAN = {"skip_cells": [], "skip_probes": [], "cells": [{"index": 0, "probes": ["own.0"]}], "stages": [["late.0"]]}


def lines(*events) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in events)


def test_a_journal_line_that_cannot_be_read_makes_its_step_tampered():
    data = lines({"event": "ready", "run": "t"}, {"event": "cell_start", "index": 0}) + b"[" * 5000 + b"\n"
    reading = journal.read(journal.parse(data + lines({"event": "cell_end", "index": 0, "error": None})), PLAN)
    assert reading.tampered == "line 3 of the run's journal cannot be read"
    assert reading.last_step == ("cell", 0)


def test_a_line_still_being_written_is_no_accusation():
    data = lines({"event": "ready", "run": "t"}, {"event": "cell_start", "index": 0}) + b'{"event": "cell_e'
    reading = journal.read(journal.parse(data), PLAN)
    assert (reading.tampered, reading.open_step) == ("", ("cell", 0))


def test_a_journal_past_its_size_is_tampered():
    note = {"event": "ran", "name": "x" * 1000, "counts": [1]}
    data = lines({"event": "ready", "run": "t"}, {"event": "cell_start", "index": 0}, {"event": "cell_end", "index": 0},
                 {"event": "probe_start", "probe": "own.0"}, *[note] * 5000)
    reading = journal.read(journal.parse(data), PLAN)
    assert "more than 4 MiB" in reading.tampered and reading.last_step == ("probe", "own.0")


def collected(*payloads: bytes) -> list[dict]:
    read, write = os.pipe()
    seen = []
    collector = report.Collector(read, "/nonexistent", seen.append)
    for payload in payloads:
        os.write(write, report.HEADER.pack(report.EVENT, len(payload)) + payload)
    os.close(write)
    while collector.read():
        pass
    os.close(read)
    return seen


def test_an_event_nested_too_deep_to_read_back_breaks_the_report_where_it_arrives():
    deep = {"event": "probe_end", "probe": "own.0", "pad": json.loads("[" * 200 + "]" * 200)}
    seen = collected(json.dumps({"event": "probe_start", "probe": "own.0"}).encode(), json.dumps(deep).encode())
    assert seen == [{"event": "probe_start", "probe": "own.0"},
                    {"event": "garbled", "why": "an event nested more than 32 levels deep"}]
    shallow = {"event": "probe_end", "probe": "own.0", "value": [[[1, 2], [3]], {"a": [1.5]}]}
    assert collected(json.dumps(shallow).encode()) == [shallow]


def gate(tmp_path):
    path = tmp_path / "stages.json"
    path.write_text(json.dumps({"own": ["own.0", "own.1"], "stages": [{"pids": ["late.0"], "code": "CODE"}]}))
    read, write = os.pipe()
    os.set_blocking(read, False)
    return Gate(str(path), write), read


def code_given(read: int) -> bytes:
    try:
        return os.read(read, 1 << 16)
    except BlockingIOError:
        return b""


def test_the_course_code_comes_only_after_the_own_probes_ended_in_order(tmp_path):
    the_gate, read = gate(tmp_path)
    for event in ({"event": "ready"}, {"event": "cell_start", "index": 0}, {"event": "cell_end", "index": 0},
                  {"event": "probe_start", "probe": "own.0"}, {"event": "ran", "name": "x"},
                  {"event": "probe_end", "probe": "own.0"}, {"event": "probe_start", "probe": "own.1"}):
        the_gate.seen(event)
    assert code_given(read) == b""
    the_gate.seen({"event": "probe_end", "probe": "own.1"})
    assert b"CODE" in code_given(read)


def test_forged_probe_ends_bring_the_course_code_no_sooner(tmp_path):
    for forged in ([{"event": "probe_end", "probe": "own.0"}, {"event": "probe_end", "probe": "own.1"}],
                   [{"event": "cell_start", "index": 0}, {"event": "probe_start", "probe": "own.0"},
                    {"event": "probe_end", "probe": "own.0"}, {"event": "probe_start", "probe": "own.0"},
                    {"event": "probe_end", "probe": "own.0"}, {"event": "probe_start", "probe": "own.1"},
                    {"event": "probe_end", "probe": "own.1"}]):
        the_gate, read = gate(tmp_path)
        for event in forged:
            the_gate.seen(event)
        assert code_given(read) == b"", forged


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@example(status=40)  # os.kill(os.getpid(), 40): a real-time signal, which Python's Signals does not name
@given(status=st.integers(min_value=0, max_value=2**16 - 1))
def test_every_exit_and_signal_gives_a_reason(status):
    """Whatever status a run's reply carries, known or not, the death has a status and a reason."""
    reply = Reply(f"{status} last", "", False, False)
    state, why = death(reply, False, 10, 2**30)
    assert state in ("killed", "error") and why.startswith("The process "), (status, why)
