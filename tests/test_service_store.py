"""The grading service's queue and limits, on a real SQLite file (no Hub: tests/test_service_hub.py
runs the whole service). Limits must hold exactly when many processes ask at once, the queue
must be fair, and nothing a student sent may be lost when a worker or the service dies."""

from __future__ import annotations

import multiprocessing
import time
from datetime import datetime, timedelta, timezone

import pytest

from autograder.errors import GradingError
from autograder.service.policy import Policies, Policy
from autograder.service.store import Store, fair_order

OPEN = Policy(open=True, per_hour=3, in_all=5)
NB = b'{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'


def submit(store, user, policy=OPEN, max_waiting=100, now=None, assignment="06_modern_attention"):
    return store.submit(user, assignment, "modern_attention", "modern_attention.ipynb", NB, policy, max_waiting, now)


def test_the_hour_and_the_whole_limit_count_only_what_is_not_refused(tmp_path):
    store, start = Store(tmp_path / "q.db"), 1_000_000.0
    states = [submit(store, "alice", now=start + i).state for i in range(4)]
    assert states == ["queued"] * 3 + ["refused"]
    refused = store.of_user("alice")[0]
    assert "3 checks of the last hour" in refused.message and "frees up in 60 minute(s)" in refused.message
    # An hour after the first, one check is free again; the refused one never counted.
    assert submit(store, "alice", now=start + 3600.5).state == "queued"
    assert submit(store, "alice", now=start + 3601.5).state == "queued"
    assert submit(store, "alice", now=start + 9000).message == "You have used all 5 checks of this assignment."
    assert submit(store, "bob", now=start + 9000).state == "queued"  # limits are per student
    assert submit(store, "alice", now=start + 9000, assignment="05_efficient_attention").state == "queued"


def test_requests_the_service_could_not_answer_cost_nothing(tmp_path):
    store, start = Store(tmp_path / "q.db"), time.time()
    for i in range(3):
        submit(store, "alice", now=start + i)
    store.expire(lambda assignment: 1.0, now=start + 10)
    assert [r.state for r in store.of_user("alice")] == ["expired"] * 3
    assert "waited more than 0.0166667 minutes" in store.of_user("alice")[0].message
    assert "not counted against your checks" in store.of_user("alice")[0].message
    assert submit(store, "alice", now=start + 11).state == "queued"


def _submit_many(path, user, count, results):
    store = Store(path)
    for _ in range(count):
        results.put((user, submit(store, user, policy=Policy(open=True, per_hour=7, in_all=40)).state))


def test_the_limit_holds_exactly_when_processes_ask_at_once(tmp_path):
    """Three processes per student, ten requests each, all at once: exactly 7 per student pass."""
    path, results = tmp_path / "q.db", multiprocessing.Queue()
    Store(path).close()
    processes = [multiprocessing.Process(target=_submit_many, args=(path, user, 10, results))
                 for user in ("alice", "bob") for _ in range(3)]
    for process in processes:
        process.start()
    answers = [results.get(timeout=60) for _ in range(60)]
    for process in processes:
        process.join()
    for user in ("alice", "bob"):
        states = [state for who, state in answers if who == user]
        assert states.count("queued") == 7 and states.count("refused") == 23


def test_one_student_cannot_fill_the_queue(tmp_path):
    store = Store(tmp_path / "q.db")
    assert [submit(store, "alice", max_waiting=2).state for _ in range(3)] == ["queued", "queued", "refused"]
    assert "You already have 2 check(s) waiting" in store.of_user("alice")[0].message
    store.claim("w1")
    assert submit(store, "alice", max_waiting=2).state == "refused"  # being graded still counts as waiting


def test_the_queue_serves_students_in_rounds_and_shows_each_place(tmp_path):
    store, start = Store(tmp_path / "q.db"), time.time()
    sent = [submit(store, user, now=start + i) for i, user in enumerate(["alice", "alice", "alice", "bob", "carol",
                                                                         "bob"])]
    assert [store.place(r) for r in sent] == [1, 4, 6, 2, 3, 5]
    order, places = [], []
    while (request := store.claim("w1")) is not None:
        order.append(request.user)
        store.finish(request, "w1", {"score": 0, "max_score": 0, "items": []})
        places.append(store.place(store.get(sent[-1].id)))
    assert order == ["alice", "bob", "carol", "alice", "bob", "alice"]
    assert places == [4, 3, 2, 1, None, None]  # bob's second: a place that only improves
    # A student with nothing waiting joins the round served now, behind those already in it.
    late = [submit(store, user, policy=Policy(open=True, per_hour=9, in_all=9)) for user in ("alice", "alice", "dan")]
    assert [store.place(r) for r in late] == [1, 3, 2]
    assert store.place(store.get(sent[0].id)) is None


def test_a_student_being_graded_waits_behind_the_others_first_requests(tmp_path):
    store = Store(tmp_path / "q.db")
    submit(store, "alice")
    assert store.claim("w1").user == "alice"
    second, bob = submit(store, "alice"), submit(store, "bob")
    assert (store.place(second), store.place(bob)) == (2, 1)
    assert [r.user for r in fair_order([second, bob])] == ["bob", "alice"]


def test_a_dead_workers_request_is_retried_then_answered_as_failed(tmp_path):
    store = Store(tmp_path / "q.db")
    request = submit(store, "alice")
    for attempt in (1, 2):
        claimed = store.claim(f"w{attempt}")
        assert (claimed.id, claimed.attempts, claimed.content) == (request.id, attempt, NB)
        assert store.give_back({f"w{attempt}"}, 3)[0].id == request.id
        assert store.get(request.id).state == "queued" and store.place(store.get(request.id)) == 1
    store.claim("w3")
    store.give_back({"w3"}, 3)
    failed = store.get(request.id)
    assert failed.state == "failed" and "failed 3 times" in failed.message and "not counted" in failed.message


def test_a_result_from_a_worker_that_lost_its_request_is_dropped(tmp_path):
    store = Store(tmp_path / "q.db")
    submit(store, "alice")
    old = store.claim("old-life")
    store.give_back(None, 3)  # what the service does when it starts
    new = store.claim("new-life")
    assert not store.finish(old, "old-life", {"score": 1, "max_score": 1, "items": []})
    assert store.finish(new, "new-life", {"score": 2, "max_score": 2, "items": []})
    assert store.get(new.id).score == 2


def test_closed_assignments_and_deadlines_refuse_with_their_reason(tmp_path):
    store = Store(tmp_path / "q.db")
    assert "not open" in submit(store, "alice", policy=Policy()).message
    past = datetime.now(timezone.utc) - timedelta(minutes=1)
    closed = submit(store, "alice", policy=Policy(open=True, deadline=past))
    assert closed.state == "refused" and "closed at its deadline" in closed.message
    assert submit(store, "alice", policy=Policy(open=True, deadline=past + timedelta(hours=1))).state == "queued"


def test_the_instructors_settings_are_checked_and_read_again_when_they_change(tmp_path):
    config = tmp_path / "nbgrader_config.py"
    config.write_text('c = get_config()\nc.CheckService.assignments = {"a": {"open": True, "show": "status"}}\n')
    policies = Policies(tmp_path)
    assert policies.for_assignment("a").show == "status" and not policies.for_assignment("b").open
    config.write_text('c = get_config()\nc.CheckService.assignments = {"a": {"open": False}}\n')
    time.sleep(0.01)
    config.touch()
    assert not policies.for_assignment("a").open
    for settings, message in [({"opne": True}, "unknown settings ['opne']"), ({"show": "all"}, "'status' or 'hint'"),
                              ({"deadline": "2026-12-04 17:00"}, "has no UTC offset"),
                              ({"deadline": "Friday"}, "ISO 8601"), ({"per_hour": -1}, "0 or more")]:
        with pytest.raises(GradingError, match=message.replace("[", r"\[").replace("]", r"\]")):
            Policy.parse("a", settings)
