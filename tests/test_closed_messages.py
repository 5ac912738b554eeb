"""Every word a student reads of a hidden run before the deadline comes from the closed catalogue
of :mod:`autograder.reading.messages`: a run that forges its report (events of its own, a ``tampered`` or
``garbled`` note with words of its choice, an exit by any status or signal) gets only catalogue
text back, and no word it chose, in the item's text, the instructor's flags (which the feedback
pages show) or what the service shows. Before the catalogue, the grader quoted a ``tampered``
note's words and the names of the events a run wrote, 300 characters of them per check."""

from __future__ import annotations

import ast
import re

from hypothesis import given, settings
from hypothesis import strategies as st

import notebook_tools as tools
from autograder.reading import messages
from autograder.running import journal
from autograder.reading.results import STATUSES
from autograder.running.run_reply import ending, probe_message
from autograder.running.sandbox import Reply
from autograder.service.shown import public_message

PLAN = {"skip_cells": [], "skip_probes": [], "cells": [{"index": 0, "probes": ["own.0"]}, {"index": 1, "probes": []}],
        "stages": [["late.0"]]}
MARK = "LEAK"
"""What the forging run spells in every text it chooses (a hidden input's shape, say)."""
NAMES = {"own", "late", "softmax"}
CATALOGUE = messages.grammar(NAMES)

chosen = st.one_of(st.just(MARK), st.text(min_size=1, max_size=20).map(lambda text: text + MARK),
                   st.sampled_from([f"shape (3, 5, 8) {MARK}", f"SIG{MARK}", f"{MARK}Error"]))
names = st.one_of(st.sampled_from(sorted(journal.EVENTS)), chosen)
values = st.one_of(st.none(), st.integers(-3, 3), st.sampled_from([0, 1, "own.0", "late.0"]), chosen,
                   st.lists(st.integers(0, 3), max_size=3))
events = st.fixed_dictionaries({"event": names}, optional={
    key: values for key in ("index", "probe", "what", "why", "error", "kind", "count", "saved", "name", "counts")})
honest = [{"event": "cell_start", "index": 0, "count": 1}, {"event": "cell_end", "index": 0, "error": None},
          {"event": "probe_start", "probe": "own.0"}]
statuses = st.one_of(st.integers(0, 2**16 - 1), st.sampled_from([40 << 8, 40, 9, 11, 6, 0x7f, 0x137f]))


def told(status: str, message: str) -> str:
    """What the service shows of an item of ``status`` with ``message`` (its worker's ``public``)."""
    return public_message({"status": status, "message": message,
                           "public": messages.public(status, message, NAMES)})


@settings(max_examples=400, deadline=None)
@given(st.integers(0, len(honest)), st.lists(events, max_size=6), statuses,
       st.sampled_from([None, "", "memory", "x y memory"]), st.booleans(), st.booleans())
def test_a_forged_report_and_any_exit_get_only_catalogue_text(prefix, forged, status, tail, timed_out, fired):
    reading = journal.read([{"event": "ready", "run": "t", "time": 1.0}, *honest[:prefix], *forged], PLAN)
    answer = None if tail is None else f"{status} 0 {tail}".strip()
    reply = Reply(text=answer, output="", output_truncated=False, timed_out=timed_out)
    kind, message, tampering = ending(reading, reply, fired, 30, 2**31)
    assert messages.conforms(message, CATALOGUE), message
    for flag in (tampering, *reading.refused):
        assert MARK not in flag and not re.search(r"[^\x20-\x7e]", flag), flag
    for text in (message, "Your answer cell: " + message, message + " (before the notebook ran)"):
        assert told(kind, text) == (text if kind in messages.STATUS_SENTENCES else
                                    "Your code failed on a hidden check. Run the visible checks to see it happen.")


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(STATUSES), chosen, st.sampled_from([*messages.OUTCOMES, *messages.HIDDEN.values()]),
       st.sampled_from(["", messages.ON_COURSE_CODE]))
def test_any_text_a_run_could_have_made_is_shown_only_as_the_catalogue_has_it(status, words, template, prefix):
    """Every status, any template with forged words in its slots, behind the course-code note or not."""
    forged = messages.SLOT.sub(lambda _: words, prefix + template)
    shown = told(status, forged)
    assert MARK not in shown and messages.conforms(shown, CATALOGUE), shown


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(STATUSES), st.text(max_size=40), chosen)
def test_any_text_at_all_of_any_status_is_shown_as_catalogue_text(status, text, words):
    shown = told(status, text + words)
    assert MARK not in shown and messages.conforms(shown, CATALOGUE), shown


def probe_texts() -> set[str]:
    """Every message a probe raises ``ProbeError`` with, in the probes' sources, each formatted value
    as ``{}``."""
    found = set()
    for path in (tools.REPO_ROOT / "transformer_lm" / "sandboxed").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "ProbeError" and node.args:
                text = node.args[0]
                parts = text.values if isinstance(text, ast.JoinedStr) else [text]
                found.add("".join(p.value if isinstance(p, ast.Constant) else "{}" for p in parts))
    return found


def test_the_catalogue_holds_every_text_a_probe_raises():
    assert probe_texts() == {messages.SLOT.sub("{}", text) for text in messages.PROBES}


CALLS = {"own.0": {"objects": {"cls": "MultiheadedSelfAttention"}, "tensor_keys": ["state/q_proj.weight", "x"]}}


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(messages.PROBES), st.one_of(chosen, st.sampled_from(["3", "(2, 3)", "q_proj.weight"])))
def test_a_probe_message_is_kept_only_as_the_catalogue_has_it(template, words):
    """A run can send any text as its probe's message (before the catalogue, every word of the
    probes' own sources and any number went through, in any order)."""
    told = probe_message(messages.SLOT.sub(lambda _: words, template), CALLS)
    assert MARK not in told
    assert told == messages.PROBE_FALLBACK or messages.conforms(told, messages.probe_grammar({"q_proj.weight", "x"}))
    real = "The module's parameter q_proj.weight has shape (4, 5), expected (4, 4)."
    assert probe_message(real, CALLS) == real
    assert probe_message("The module's parameter x has shape (3, 5, 8) of the hidden input", CALLS) == \
        messages.PROBE_FALLBACK
