"""What a run reports about its cells and probes reaches a student only as catalogue text: a run
that finished and ended every step, but filled the ends with words of its own (a cell's or a
probe's error text, an error's kind, a record's bytes, a probe's plain value, notes of what it ran),
gives the feedback pages no word it chose and only texts made of the closed catalogue
(:mod:`autograder.recording.feedback_texts`), and the service only texts of the catalogue
(:mod:`autograder.reading.messages`). It drives the grader's own reading of a finished run, the judge of
every item and the service's ``public`` text, with forged journals made by Hypothesis.
:mod:`tests.test_closed_messages` does the same for runs that died or were stopped."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import notebook_tools as tools
from autograder.reading import messages
from autograder.running import journal, runner
from autograder.reading.assignment import Assignment
from autograder.reading.course import Course
from autograder.commands.demo import make_course
from autograder.recording.feedback_texts import catalogue
from autograder.judging.judge import judge_item
from autograder.reading.preflight import preflight

A = "01_attention_basics"
MARK = "LEAK"
"""What the forging run spells in every text it chooses (a hidden input's shape, say)."""


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """The assignment as grading loads it, and its solution preflighted as a submission."""
    root = tmp_path_factory.mktemp("course")
    make_course(root, A, generate=False)
    assignment = Assignment.load(Course(root), A)
    notebook = next(iter(assignment.items))
    path = tools.REPO_ROOT / "source" / A / f"{notebook}.ipynb"
    return assignment, notebook, path, catalogue(assignment)


chosen = st.one_of(st.just(MARK), st.text(max_size=12).map(lambda text: text + MARK),
                   st.sampled_from([f"ValueError: shape (3, 5, 8) {MARK}", f"{MARK}Error", "KeyError"]))
plain = st.recursive(st.one_of(st.none(), st.integers(-2, 2**40), st.floats(), chosen),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(chosen, inner, max_size=3),
                     max_leaves=6)
ends = st.fixed_dictionaries({}, optional={
    "error": st.one_of(chosen, st.sampled_from(["RuntimeError", "NotImplementedError"])),
    "kind": st.one_of(st.sampled_from(["probe", "todo", "absent", "cell"]), chosen),
    "where": st.one_of(st.lists(st.integers(-1, 40), min_size=2, max_size=2), chosen),
    "cells": st.lists(st.integers(-1, 40), max_size=3), "saved": st.booleans(), "value": plain})
notes = st.fixed_dictionaries({"event": st.just("ran"), "name": st.one_of(st.just("torch.softmax"), chosen),
                               "counts": st.lists(st.integers(-1, 40), max_size=3)})


@st.composite
def journals(draw, plan: dict) -> list[dict]:
    """A finished run's journal that keeps to ``plan``, every end and note of the run's choosing."""
    events = [{"event": "ready", "run": "t", "time": 1.0}]
    for count, (kind, ident) in enumerate(journal.steps(plan), 1):
        key = "index" if kind == "cell" else "probe"
        events.append({"event": f"{kind}_start", key: ident, "count": count})
        events += draw(st.lists(notes, max_size=2)) if kind == "probe" else []
        events.append({**draw(ends), "event": f"{kind}_end", key: ident})
    return [*events, {"event": "done"}]


NO_SHRINKING = [Phase.explicit, Phase.reuse, Phase.generate]
"""A failing example is shown as found: shrinking a journal of every step takes minutes."""


@settings(max_examples=150, deadline=None, phases=NO_SHRINKING,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.data())
def test_a_finished_runs_own_words_reach_no_student(course, data):
    assignment, notebook, path, texts = course
    items = assignment.items[notebook]
    pre = preflight(path, assignment.release[notebook], items)
    prepared = {pid: check for pid, check in assignment.prepared.items()
                if assignment.probe_item[pid] in {item.grade_id for item in items} and pid not in assignment.stand_ins}
    answers = {pid: assignment.answers[assignment.probe_item[pid]] for pid in prepared}
    attempts = runner.Attempts(pre, prepared, answers, None, {}, {})
    records = data.draw(st.lists(st.binary(max_size=64) | st.just(MARK.encode()), min_size=1, max_size=3))
    reading = journal.read(data.draw(journals(attempts.plan)), attempts.plan)
    assert reading.done and not reading.tampered, reading.tampered
    attempts.record(reading, lambda _path: records[hash(_path) % len(records)])
    names, earlier = messages.course_names(assignment), {}
    for item in items:
        result = earlier[item.grade_id] = judge_item(item, notebook, assignment, pre, attempts.result, earlier, [])
        told = [result.message, result.hint or "", result.mistake or "", *pre.flags]
        assert not any(MARK in text for text in told), (item.grade_id, told)
        assert texts.holds(result.message, [cell.source for cell in pre.cells]), (item.grade_id, result.message)
        public = messages.public(result.status, result.message, names)
        assert messages.conforms(public, messages.grammar(names)), (item.grade_id, result.status, public)
