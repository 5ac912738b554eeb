"""The grading service's queue and limits, on a real SQLite file (no Hub: tests/test_service_hub.py
runs the whole service). Limits must hold exactly when many processes ask at once, the queue
must be fair, nothing a student sent may be lost when a worker or the service dies, and no
stream of requests may grow the file past its bound. Also the intake, which reads any bytes sent."""

from __future__ import annotations

import json
import multiprocessing
import os
import sqlite3
import time
from datetime import datetime, timedelta, timezone

import pytest

import notebook_tools as tools
from autograder.reading.course import Course
from autograder.reading.errors import GradingError
from autograder.service import supervisor
from autograder.service.intake import MAX_FILENAME, body_limit, read_post, read_sent
from autograder.service.policy import Policies, Policy
from autograder.service.schema import SCHEMA
from autograder.service.store import (KEPT_UNCOUNTED, UNCOUNTED_ROW_BYTES, Store, TooManyRefused, fair_order)

OPEN = Policy(open=True, per_hour=3, in_all=5)
NB = b'{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'
A, NOTEBOOK = "06_modern_attention", "modern_attention"
RELEASE = (tools.REPO_ROOT / "release" / A / f"{NOTEBOOK}.ipynb").read_bytes()


def submit(store, user, policy=OPEN, max_waiting=100, now=None, assignment="06_modern_attention", max_refused=1000):
    return store.submit(user, assignment, "modern_attention", "modern_attention.ipynb", NB, policy, max_waiting,
                        max_refused, now)


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


def test_a_request_the_grader_began_costs_a_check_when_it_then_waits_too_long(tmp_path):
    """A notebook that kills its worker goes back to the queue; were it then to expire, the check
    would cost nothing (and each try would restart a sandbox for free). Before the fix it expired."""
    store, one = Store(tmp_path / "q.db"), Policy(open=True, per_hour=1, in_all=1)
    request = submit(store, "alice", policy=one)
    store.claim("w1")
    store.give_back({"w1"}, 3)
    [late] = store.expire(lambda assignment: 60.0, now=time.time() + 61)
    assert (late.id, late.attempts, late.content) == (request.id, 1, NB)  # for the supervisor to keep
    failed = store._select("id = ?", (request.id,), content=True)[0]
    assert failed.state == "failed" and "began this check 1 time(s) without finishing" in failed.message
    assert "counts as one of your checks" in failed.message and failed.content == NB
    assert store.usage("alice", A, time.time())[:2] == (1, 1)
    assert submit(store, "alice", policy=one).message == "You have used all 1 checks of this assignment."


def test_expiry_counts_only_the_time_a_request_waited_in_the_queue(tmp_path):
    """A request that was graded for long (a worker that then died) is not late for that time:
    its 5 s in the queue, then 10 s after it came back, are within a minute. Before the fix it was
    measured from when it was sent, 1,000 s before, and expired."""
    store = Store(tmp_path / "q.db")
    sent = time.time() - 1000
    request = submit(store, "alice", now=sent)
    store.claim("w1", now=sent + 5)
    store.give_back({"w1"}, 3)
    assert store.expire(lambda assignment: 60.0, now=time.time() + 10) == []
    back = store.get(request.id)
    assert back.state == "queued" and 14 < back.time_queued(time.time() + 10) < 16
    assert store.claim("w2").id == request.id


def test_a_store_file_of_the_former_version_gains_the_queue_times(tmp_path):
    """A course that updates keeps its queue: the new columns are added, and a waiting request's time
    in the queue counts from when it was sent."""
    old = sqlite3.connect(tmp_path / "q.db")
    old.executescript(SCHEMA.replace(",\n    queued_since REAL,\n    queued_wait REAL NOT NULL DEFAULT 0", ""))
    old.execute("INSERT INTO requests (id, user, assignment, filename, submitted, state) "
                "VALUES ('r1', 'alice', ?, 'a.ipynb', ?, 'queued')", (A, time.time() - 120))
    old.commit()
    assert "queued_since" not in {row[1] for row in old.execute("PRAGMA table_info(requests)")}
    old.close()
    store = Store(tmp_path / "q.db")
    assert [r.id for r in store.expire(lambda assignment: 60.0)] == ["r1"]
    assert store.get("r1").state == "expired"


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
    assert failed.state == "failed" and "failed 3 times" in failed.message
    assert "counts as one of your checks" in failed.message


def test_a_notebook_that_makes_the_grader_fail_costs_a_check_and_is_kept_for_the_instructor(tmp_path):
    """Else a student with one check left could keep the workers busy without end."""
    store, one = Store(tmp_path / "q.db"), Policy(open=True, per_hour=1, in_all=1)
    request = submit(store, "alice", policy=one)
    for attempt in (1, 2):
        store.claim(f"w{attempt}")
        supervisor.give_back(tmp_path, store, {f"w{attempt}"}, 2, "the grader raised an error")
    assert store.get(request.id).state == "failed"
    assert store.usage("alice", A, time.time())[:2] == (1, 1)
    assert submit(store, "alice", policy=one).message == "You have used all 1 checks of this assignment."
    kept = tmp_path / ".grading" / "check_failures" / f"{request.id}.ipynb"
    assert kept.read_bytes() == NB
    assert store._select("id = ?", (request.id,), content=True)[0].content == NB


def test_a_graded_or_expired_request_keeps_no_notebook_and_only_what_a_student_may_see(tmp_path):
    store = Store(tmp_path / "q.db")
    graded, late = submit(store, "alice"), submit(store, "bob")
    item = {"grade_id": "g", "notebook": NOTEBOOK, "score": 0, "max_score": 1, "status": "error",
            "message": "raised ValueError: " + "x" * 10**6, "hint": "", "mistake": None, "deduction": "",
            "answer": "def f(): ..." * 10**5}
    store.finish(store.claim("w1"), "w1", {"score": 0, "max_score": 1, "items": [item], "notes": ["n" * 10**6] * 99})
    store.expire(lambda assignment: 0, now=time.time() + 1)
    rows = {r.id: r for r in store._select("1", content=True)}
    assert (rows[graded.id].state, rows[late.id].state) == ("done", "expired")
    assert rows[graded.id].content is None and rows[late.id].content is None
    kept = json.loads(rows[graded.id].result)
    assert "answer" not in kept["items"][0] and len(kept["items"][0]["message"]) == 1000
    assert len(kept["notes"]) == 20 and all(len(note) == 600 for note in kept["notes"])


def test_refusals_have_a_limit_of_their_own_past_which_nothing_is_stored(tmp_path):
    store, start = Store(tmp_path / "q.db"), 1_000_000.0
    for i in range(3):
        store.refuse("mallory", "essay.ipynb", 10, "This is not a notebook.", 3, now=start + i)
    with pytest.raises(TooManyRefused) as refused:
        store.refuse("mallory", "essay.ipynb", 10, "This is not a notebook.", 3, now=start + 10)
    assert refused.value.message.startswith("This is not a notebook. (This request was not recorded: 3 of your")
    assert "until 14:46 UTC" in refused.value.message  # an hour after the first of the three
    with pytest.raises(TooManyRefused):  # refusals for a limit count too
        submit(store, "mallory", policy=Policy(), now=start + 11, max_refused=3)
    assert len(store.of_user("mallory")) == 3
    assert submit(store, "mallory", now=start + 12, max_refused=3).state == "queued"  # a good notebook is taken
    assert store.refuse("bob", "essay.ipynb", 10, "No.", 3, now=start + 13).state == "refused"  # per student
    assert store.refuse("mallory", "essay.ipynb", 10, "No.", 3, now=start + 3600.5).state == "refused"


def file_size(store: Store) -> int:
    """The SQLite file's size with its write-ahead log written back into it."""
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return os.path.getsize(store.path)


def test_no_stream_of_requests_grows_the_file_past_its_bound_per_student(tmp_path):
    """2,000 refused requests with a megabyte of file name and message each, in four-byte characters,
    spread over days so that the hourly limit does not stop them, and 200 that expire: the file
    grows by at most the stated bound (refused and expired kept: 50 each, 5 KiB each)."""
    store, start, huge = Store(tmp_path / "q.db"), 1_000_000.0, "😀" * 2**20
    before = file_size(store)
    for i in range(2000):
        store.refuse("mallory", huge, 2**20, huge, 20, now=start + 200 * i)
    for i in range(200):
        store.submit("mallory", A, NOTEBOOK, huge, b"x" * 10**5, Policy(open=True, per_hour=10**4, in_all=10**4),
                     10**4, 20)
        store.expire(lambda assignment: -1)
    growth = file_size(store) - before
    print(f"\nThe file grew by {growth} bytes for 2,200 requests of one student")
    assert growth <= 2 * KEPT_UNCOUNTED * UNCOUNTED_ROW_BYTES
    kept = store.of_user("mallory")
    assert [r.state for r in kept].count("refused") == KEPT_UNCOUNTED == [r.state for r in kept].count("expired")
    assert all(len(r.filename) == MAX_FILENAME and len(r.message) <= 600 for r in kept)
    assert kept[-1].submitted == start + 200 * 1950  # the latest are kept


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


def test_the_intake_reads_what_a_student_sends_into_a_notebook_of_the_course_or_a_reason():
    course, limit = Course(tools.REPO_ROOT), 2**20
    taken = read_sent(course, "my copy (2).ipynb", RELEASE, limit)
    assert (taken.status, taken.assignment, taken.notebook, taken.content) == (202, A, NOTEBOOK, RELEASE)
    nested = read_post(course, "application/json", b"[" * 200 + b"]" * 200, limit)
    assert nested.status == 400 and "nested more than 64 levels deep" in nested.message
    inner = read_post(course, "application/json", json.dumps({"notebook": "[" * 200 + "]" * 200}).encode(), limit)
    assert inner.status == 400 and "nested more than 64 levels deep" in inner.message
    as_object = read_post(course, "", json.dumps({"filename": "C:\\Users\\me\\" + "a" * 2**20,
                                                  "notebook": json.loads(RELEASE)}).encode(), limit)
    assert as_object.status == 202 and as_object.filename == "a" * MAX_FILENAME
    large = read_sent(course, NOTEBOOK, RELEASE + b" " * limit, limit)
    assert large.status == 413 and "checks take notebooks up to 1 MiB" in large.message
    foreign = read_sent(course, "essay.ipynb", NB, limit)
    assert foreign.status == 400 and "not a notebook of this course's assignments" in foreign.message
    form = read_post(course, "multipart/form-data; boundary=b", b"--b\r\nContent-Disposition: form-data; name=\"f\"; "
                     b"filename=\"nb.ipynb\"\r\n\r\n" + RELEASE + b"\r\n--b--\r\n", limit)
    assert (form.status, form.filename) == (202, "nb.ipynb")
    assert "form has no notebook file" in read_post(course, "application/x-www-form-urlencoded", b"a=1", limit).message
    assert body_limit(limit) > 4 * limit
