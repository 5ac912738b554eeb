"""The grading service in a real JupyterHub: security, a class checking at once, crashes, restarts,
a hostile crowd at its front door, and the roster.

One Hub serves the whole module (:mod:`hub_tools`: configurable-http-proxy from npm, dummy logins,
local spawner, the service lines of docs/service.md). Students send assignment 06's notebook as their
JupyterLab server does (a Hub token) or from a browser session (the Hub's OAuth cookie). Each
test sets the policy it needs by rewriting the course's ``nbgrader_config.py``, which the service
reads again when it changes. A student's browser in JupyterLab is in
``test_a_student_checks_the_notebook_from_jupyterlab_and_only_they_see_it``.

Artefacts in ``artifacts/service/``: the Hub's log and ``load.json`` (the load test's times).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest
import requests

import browser_tools
import hub_tools
import notebook_tools as tools
from autograder.running import sandbox
from autograder.reading import messages
from autograder.reading.cells import grade_id
from autograder.recording.record import nbgrader_env
from autograder.service.roster import FRESH_SECONDS
from autograder.service.store import KEPT_UNCOUNTED, UNCOUNTED_ROW_BYTES, Store
from autograder.service.web import PER_PAGE

A, NB = "06_modern_attention", "modern_attention.ipynb"
ARTIFACTS = tools.REPO_ROOT / "artifacts" / "service"
SOLUTION = tools.read(tools.REPO_ROOT / "source" / A / NB)
RELEASE = tools.read(tools.REPO_ROOT / "release" / A / NB)
ANSWER_S = 180  # the longest a test waits for one answer on this shared machine
ALL_AT_ONCE = {"max_sending": 20}  # for tests of another limit than the bodies one student sends at once
BODY_SECONDS = 15  # how long the module's service lets a body take (read when it starts)


def settings(max_attempts: int = 3, service: dict | None = None, **policy) -> str:
    """The course's ``c.CheckService`` lines: ``policy`` for the assignment, ``service`` for the rest.
    ``body_seconds`` is always written: the service reads it when it starts, and a test that kills
    the service starts it again from these lines."""
    service = {"body_seconds": BODY_SECONDS, **(service or {})}
    policy = {"open": True, "per_hour": 100, "in_all": 1000, "show": "hint", **policy}
    return (f"c.CheckService.assignments = {{{A!r}: {policy!r}}}\nc.CheckService.workers = 2\n"
            f"c.CheckService.max_waiting = 20\nc.CheckService.max_notebook_mb = 1\n"
            f"c.CheckService.max_refused_per_hour = 20\nc.CheckService.max_attempts = {max_attempts}\n"
            + "".join(f"c.CheckService.{name} = {value!r}\n" for name, value in service.items()))


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    if sandbox.detect_isolation().name != "bubblewrap":
        pytest.skip(f"needs bubblewrap: {sandbox.detect_isolation().detail}")
    folder = tmp_path_factory.mktemp("hub")
    course = hub_tools.make_course(folder / "course", A, settings())
    running = hub_tools.start_hub(folder / "hub", course)
    try:
        yield running
    finally:
        hub_tools.stop_hub(running)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / "jupyterhub.log").write_text(running.log.read_text())


def set_policy(hub, max_attempts: int = 3, service: dict | None = None, **policy) -> None:
    config = hub.course / "nbgrader_config.py"
    text = config.read_text()
    config.write_text(text[:text.index("c.CheckService.assignments")] + settings(max_attempts, service, **policy))


def answer_of(grade_id: str) -> str:
    return tools.cell_by_grade_id(SOLUTION, grade_id).source


def send(hub, token: str, notebook, filename: str = NB) -> requests.Response:
    return requests.post(f"{hub.service}api/requests", json={"filename": filename, "notebook": notebook},
                         headers={"Authorization": f"token {token}"}, timeout=60)


def answered(hub, token: str, request_id: str, seconds: float = ANSWER_S) -> dict:
    """The request once it is answered (no longer queued or running)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            view = requests.get(f"{hub.service}api/requests/{request_id}", timeout=60,
                                headers={"Authorization": f"token {token}"}).json()
        except (requests.RequestException, ValueError):  # the service is restarting: the proxy answers 503
            view = {"state": "unreachable"}
        if view["state"] not in ("queued", "running", "unreachable") or time.monotonic() > deadline:
            return view
        time.sleep(0.2)


def rows(hub) -> list[dict]:
    """Every request as the course's SQLite file holds it (what the instructor's admin page shows)."""
    with sqlite3.connect(hub.course / "check_requests.db") as db:
        db.row_factory = sqlite3.Row
        return [dict(r) for r in db.execute("SELECT seq, id, user, state, attempts, worker, submitted, started, "
                                            "finished, message, score FROM requests ORDER BY seq")]


def database_used(hub) -> int:
    """The bytes of the course's SQLite file in use, its write-ahead log written back into it: what
    the file would grow by were no page free (notebooks dropped earlier leave free pages)."""
    with sqlite3.connect(hub.course / "check_requests.db") as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        (pages,), (free,), (size,) = (db.execute(f"PRAGMA {name}").fetchone()
                                      for name in ("page_count", "freelist_count", "page_size"))
    return (pages - free) * size


def login(hub, user: str) -> requests.Session:
    """A browser-like session of ``user``, logged in to the Hub and to the service (OAuth)."""
    session = requests.Session()
    page = session.get(hub.service, timeout=60)  # the service sends a stranger to the Hub's login
    xsrf = re.search(r'name="_xsrf" value="([^"]+)"', page.text).group(1)
    done = session.post(page.url, data={"username": user, "password": "any", "_xsrf": xsrf}, timeout=60)
    assert done.url == hub.service and done.status_code == 200, (done.url, done.status_code)
    return session


def test_a_student_sees_only_their_own_requests_and_the_admin_sees_all(hub):
    alice, bob = hub.token_for("alice"), hub.token_for("bob")
    sent = send(hub, alice, SOLUTION)
    assert sent.status_code == 202, sent.text
    mine = answered(hub, alice, sent.json()["id"])
    assert (mine["state"], mine["score"], mine["max_score"]) == ("done", 10, 10)
    others = requests.get(f"{hub.service}api/requests/{mine['id']}", headers={"Authorization": f"token {bob}"},
                          timeout=60)
    assert others.status_code == 404 and "No such check request of yours" in others.json()["message"]
    assert requests.get(f"{hub.service}api/requests/{'x' * 16}", headers={"Authorization": f"token {alice}"},
                        timeout=60).status_code == 404

    browser_bob = login(hub, "bob")
    assert browser_bob.get(f"{hub.service}requests/{mine['id']}", timeout=60).status_code == 404
    assert mine["id"] not in browser_bob.get(hub.service, timeout=60).text
    assert browser_bob.get(f"{hub.service}admin", timeout=60).status_code == 403
    teacher = login(hub, hub_tools.ADMIN)
    admin_page = teacher.get(f"{hub.service}admin", timeout=60)
    assert admin_page.status_code == 200 and "alice" in admin_page.text and "10 / 10" in admin_page.text
    assert teacher.get(f"{hub.service}requests/{mine['id']}", timeout=60).status_code == 200
    # Without the Hub's word, nothing: no token, or a made-up one.
    assert requests.get(f"{hub.service}api/requests/{mine['id']}", timeout=60, allow_redirects=False).status_code \
        in (302, 403)
    # A made-up token is refused from the headers, before the body is read. The body is a small one: a
    # notebook's hundred kilobytes can still be on their way through the Hub's proxy when the 403 closes
    # the connection, and the proxy then answers 503 for it (seen once, on a loaded machine).
    assert send(hub, "0" * 32, {"cells": []}).status_code == 403


def test_a_browsers_post_needs_the_hubs_xsrf_token(hub):
    session = login(hub, "alice")
    upload = {"notebook": (NB, json.dumps(SOLUTION).encode(), "application/json")}
    refused = session.post(f"{hub.service}api/requests", files=upload, timeout=60, allow_redirects=False)
    assert refused.status_code == 403
    home = session.get(hub.service, timeout=60).text
    xsrf = re.search(r'name="_xsrf" value="([^"]+)"', home).group(1)
    taken = session.post(f"{hub.service}api/requests", files=upload, data={"_xsrf": xsrf}, timeout=60,
                         allow_redirects=False)
    assert taken.status_code == 303 and "/requests/" in taken.headers["Location"]
    request_id = taken.headers["Location"].rsplit("/", 1)[1]
    assert answered(hub, hub.token_for("alice"), request_id)["score"] == 10


def test_a_notebook_too_large_or_not_a_notebook_gets_a_clear_answer(hub):
    token, before = hub.token_for("alice"), len(rows(hub))
    big = tools.replace_solution(RELEASE, "apply_rope", "x = 1  # " + "y" * (2 * 2**20))
    too_large = send(hub, token, big)
    assert too_large.status_code == 413 and "checks take notebooks up to 1 MiB" in too_large.json()["message"]
    not_json = send(hub, token, "{ this is not JSON")
    assert not_json.status_code == 400 and "grader can read (line 1, column 3" in not_json.json()["message"]
    foreign = send(hub, token, {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, "essay.ipynb")
    assert foreign.status_code == 400 and "not a notebook of this course's assignments" in foreign.json()["message"]
    odd = send(hub, token, {"cells": [{"metadata": None}, {"metadata": {"nbgrader": 3}}, 7], "nbformat": 4}, "odd.ipynb")
    assert odd.status_code == 400 and "not a notebook of this course's assignments" in odd.json()["message"]
    garbled = requests.post(f"{hub.service}api/requests", data=b"\x00\x01", timeout=60,
                            headers={"Authorization": f"token {token}"})
    assert garbled.status_code == 400 and "Send JSON" in garbled.json()["message"]
    # Renamed, it is still recognised by its graded cells; refused ones were recorded, costing no check.
    renamed = send(hub, token, SOLUTION, "my copy (2).ipynb")
    assert renamed.status_code == 202 and renamed.json()["assignment"] == A
    recorded = rows(hub)[before:]
    assert [r["state"] for r in recorded[:5]] == ["refused"] * 5 and len(recorded) == 6
    assert answered(hub, token, renamed.json()["id"])["score"] == 10


def test_bodies_too_large_or_too_deep_get_their_status_and_a_message_through_the_proxy(hub):
    """Through configurable-http-proxy: never a 500, nor a connection cut that the proxy answers 503."""
    token, before = hub.token_for("bob"), len(rows(hub))
    headers = {"Authorization": f"token {token}"}
    nested = requests.post(f"{hub.service}api/requests", data=b"[" * 200 + b"]" * 200, headers=headers, timeout=60)
    assert nested.status_code == 400 and "nested more than 64 levels deep" in nested.json()["message"]
    read = send(hub, token, tools.replace_solution(RELEASE, "apply_rope", "x = 1  # " + "y" * (3 * 2**20 + 2**19)))
    assert read.status_code == 413 and "The notebook is 3.6 MiB; checks take notebooks up to 1 MiB" in \
        read.json()["message"]
    thrown_away = requests.post(f"{hub.service}api/requests", data=b"x" * 12 * 2**20, headers=headers, timeout=60)
    assert thrown_away.status_code == 413 and "12.0 MiB; checks take notebooks up to 1 MiB" in \
        thrown_away.json()["message"]
    assert [(r["user"], r["state"]) for r in rows(hub)[before:]] == [("bob", "refused")] * 3  # in bob's limit
    # A browser's form too large to read has no XSRF token to read either: a page says why, nothing is stored.
    session = login(hub, "bob")
    xsrf = re.search(r'name="_xsrf" value="([^"]+)"', session.get(hub.service, timeout=60).text).group(1)
    form = session.post(f"{hub.service}api/requests", files={"notebook": (NB, b"x" * 12 * 2**20)},
                        data={"_xsrf": xsrf}, timeout=60, allow_redirects=False)
    assert form.status_code == 413 and "checks take notebooks up to 1 MiB" in form.text and "<html>" in form.text
    assert len(rows(hub)) == before + 3


LEAK_BY_NAME = '''def kv_cache_bytes(n_layers, n_kv_heads, head_dim, seq_len, batch=1, dtype=torch.bfloat16):
    raise type("LE" + f"AK{n_layers}x{seq_len}Error", (ValueError,), {})("LE" + f"AK {head_dim}")
'''


def test_a_malformed_notebook_is_checked_and_no_hidden_input_shows_through_an_exception(hub):
    """Two attacks of the review, through the Hub. An answer cell whose metadata is a list (which
    once crashed the worker, and took the class down with it) is checked like any other: its cell
    id says which answer it is. An answer that raises an exception named after its hidden input
    shows only ValueError, on the API, on the result's page and in the database; the text its code
    made is nowhere (the code spells LEAK in two halves: a message may quote its line)."""
    token = hub.token_for("mallory")
    malformed = json.loads(nbformat.writes(SOLUTION))
    cell = next(c for c in malformed["cells"] if grade_id(c) == "apply_rope")
    cell["metadata"] = [1, 2]
    sent = send(hub, token, malformed)
    assert sent.status_code == 202, sent.text
    view = answered(hub, token, sent.json()["id"])
    assert (view["state"], view["score"]) == ("done", 10), view
    leak = send(hub, token, tools.replace_solution(SOLUTION, "kv_cache_bytes", LEAK_BY_NAME))
    view = answered(hub, token, leak.json()["id"])
    item = next(i for i in view["items"] if i["grade_id"] == "kv_cache_bytes")
    assert item["status"] == "error" and "ValueError" in item["message"], item
    page = requests.get(f"{hub.service}requests/{leak.json()['id']}", timeout=60,
                        headers={"Authorization": f"token {token}"}).text
    with sqlite3.connect(hub.course / "check_requests.db") as db:
        (stored,) = db.execute("SELECT result FROM requests WHERE id = ?", (leak.json()["id"],)).fetchone()
    assert not any("LEAK" in text for text in (json.dumps(view), page, stored))


def test_sixty_requests_from_three_students_at_once(hub):
    """Every request is answered; the hour's limit holds exactly; the times go to the closing note.
    Each student may send all 20 at once here (``max_sending``): the limit under test is the hour's."""
    set_policy(hub, per_hour=5, service=ALL_AT_ONCE)
    users = ("carol", "dan", "erin")
    tokens = {user: hub.token_for(user) for user in users}

    def one(user):
        started = time.monotonic()
        sent = send(hub, tokens[user], SOLUTION)
        view = answered(hub, tokens[user], sent.json()["id"])
        places.append(sent.json()["place"]) if sent.status_code == 202 else None
        return user, sent.status_code, view, time.monotonic() - started

    places = []
    with ThreadPoolExecutor(max_workers=60) as pool:
        results = list(pool.map(one, [user for user in users for _ in range(20)]))
    for user in users:
        mine = [r for r in results if r[0] == user]
        graded = [view for _, code, view, _ in mine if code == 202]
        refused = [view for _, code, view, _ in mine if code == 429]
        assert len(graded) == 5 and len(refused) == 15, [(code, view["state"]) for _, code, view, _ in mine]
        assert all(view["state"] == "done" and view["score"] == 10 for view in graded)
        assert all("5 checks of the last hour" in view["message"] for view in refused)
    assert len(places) == 15 and all(place >= 1 for place in places)  # each taken request was told its place
    times = sorted(seconds for *_, seconds in results)
    graded_times = sorted(seconds for _, code, _, seconds in results if code == 202)
    summary = {"requests": len(results), "graded": len(graded_times),
               "median_s": statistics.median(times), "p95_s": times[int(0.95 * len(times)) - 1],
               "graded_median_s": statistics.median(graded_times),
               "graded_p95_s": graded_times[int(0.95 * len(graded_times)) - 1], "workers": 2}
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "load.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"\nLoad: {json.dumps(summary)}")


def slow(seconds: float) -> dict:
    """The solution, with an answer cell that takes ``seconds`` to run: a request that stays
    in a worker long enough to be caught there."""
    return tools.replace_solution(SOLUTION, "apply_rope", f"import time\ntime.sleep({seconds})\n" + answer_of("apply_rope"))


def test_a_crashed_worker_costs_only_its_request_which_is_retried(hub):
    set_policy(hub)
    alice, bob = hub.token_for("alice"), hub.token_for("bob")
    victim = send(hub, alice, slow(6)).json()
    deadline = time.monotonic() + ANSWER_S
    while (row := next(r for r in rows(hub) if r["id"] == victim["id"]))["state"] != "running":
        assert time.monotonic() < deadline and row["state"] == "queued", row
        time.sleep(0.1)
    bystander = send(hub, bob, SOLUTION).json()
    pids = subprocess.run(["pgrep", "-f", f"name {row['worker']} --parent"], capture_output=True,
                          text=True).stdout.split()
    assert len(pids) == 1, pids
    os.kill(int(pids[0]), signal.SIGKILL)
    retried, other = answered(hub, alice, victim["id"]), answered(hub, bob, bystander["id"])
    assert (retried["state"], retried["score"]) == ("done", 10) and (other["state"], other["score"]) == ("done", 10)
    attempts = {r["id"]: r["attempts"] for r in rows(hub)}
    assert (attempts[victim["id"]], attempts[bystander["id"]]) == (2, 1)


def test_a_request_that_waits_too_long_is_answered_not_dropped(hub):
    set_policy(hub, max_wait_minutes=0.05)  # 3 s
    tokens = [hub.token_for(user) for user in ("alice", "bob", "carol")]
    sent = [send(hub, token, slow(5)).json()["id"] for token in tokens]  # two workers: the third waits
    views = [answered(hub, token, request_id) for token, request_id in zip(tokens, sent)]
    assert sorted(v["state"] for v in views) == ["done", "done", "expired"]
    expired = next(v for v in views if v["state"] == "expired")
    assert "waited more than 0.05 minutes" in expired["message"] and "not counted" in expired["message"]


def test_the_exporter_sends_as_the_student_and_links_the_check(hub, monkeypatch):
    """``jupyter nbconvert --to check_with_grader`` (and JupyterLab's menu) go through the exporter."""
    from nbconvert.exporters.base import get_exporter

    set_policy(hub)
    exporter = get_exporter("check_with_grader")()
    monkeypatch.delenv("COURSE_CHECK_URL", raising=False)
    page, _ = exporter.from_notebook_node(nbformat.from_dict(SOLUTION), {"metadata": {"name": "modern_attention"}})
    assert "Checks are not set up here" in page
    monkeypatch.setenv("COURSE_CHECK_URL", hub.service)
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", hub.token_for("alice"))
    page, _ = exporter.from_notebook_node(nbformat.from_dict(SOLUTION), {"metadata": {"name": "modern_attention"}})
    request_id = re.search(r"/services/autograder/requests/([\w-]+)", page).group(1)
    assert answered(hub, hub.token_for("alice"), request_id)["score"] == 10


def worker_of(hub, request_id: str, attempt: int) -> str:
    """The pid of the worker grading ``request_id`` on its ``attempt``-th try, once it is."""
    deadline = time.monotonic() + ANSWER_S
    while True:
        row = next(r for r in rows(hub) if r["id"] == request_id)
        if row["state"] == "running" and row["attempts"] == attempt:
            pids = subprocess.run(["pgrep", "-f", f"name {row['worker']} --parent"], capture_output=True,
                                  text=True).stdout.split()
            assert len(pids) == 1, pids
            return pids[0]
        assert time.monotonic() < deadline and row["state"] in ("queued", "running"), row
        time.sleep(0.1)


def test_a_request_the_grader_fails_on_every_time_counts_and_its_notebook_is_kept(hub):
    """Its worker killed on each of its two tries: answered as failed, counted as a check, logged
    with its id and student, and its notebook kept in .grading/check_failures/."""
    set_policy(hub, max_attempts=2)
    erin, store = hub.token_for("erin"), Store(hub.course / "check_requests.db")
    counted = store.usage("erin", A, time.time())[1]
    victim = send(hub, erin, slow(6)).json()
    for attempt in (1, 2):
        os.kill(int(worker_of(hub, victim["id"], attempt)), signal.SIGKILL)
    failed = answered(hub, erin, victim["id"])
    assert failed["state"] == "failed" and "failed 2 times" in failed["message"]
    assert "counts as one of your checks" in failed["message"]
    assert store.usage("erin", A, time.time())[1] == counted + 1
    kept = hub.course / ".grading" / "check_failures" / f"{victim['id']}.ipynb"
    assert json.loads(kept.read_bytes()) == slow(6)
    assert f"Request {victim['id']} of erin ({A}): its worker" in hub.log.read_text()
    set_policy(hub)  # the next test kills the service, whose workers come back with it


def stat(pid: str) -> str:
    """What /proc says of process ``pid`` (its name and state first), for a failure's message."""
    try:
        return Path(f"/proc/{pid}/stat").read_text()[:80]
    except OSError:
        return f"{pid}: gone"


def running(pid: str) -> bool:
    """Whether process ``pid`` still runs: a killed one is dead once it is a zombie, whenever the
    process that adopted it (init, on a busy machine slowly) gets round to reaping it."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_requests_waiting_when_the_service_is_killed_are_answered_after_it_comes_back(hub):
    set_policy(hub)
    tokens = {user: hub.token_for(user) for user in ("alice", "bob", "carol")}
    sent = [(user, send(hub, token, slow(2)).json()["id"]) for user, token in tokens.items() for _ in range(2)]
    before = {r["id"]: r["state"] for r in rows(hub)}
    assert sum(before[i] == "queued" for _, i in sent) >= 3  # two workers: most of them wait
    service = hub.service_pid()
    # Only the grading workers carry PR_SET_PDEATHSIG; the service's other children (the intake's
    # fork server, multiprocessing's resource tracker) leave in their own time, once their pipe closes.
    workers = subprocess.run(["pgrep", "-P", str(service), "-f", "autograder.service.worker"],
                             capture_output=True, text=True).stdout.split()
    assert len(workers) == 2
    os.kill(service, signal.SIGKILL)
    deadline = time.monotonic() + 20
    while any(running(pid) for pid in workers):  # the workers die with the service
        assert time.monotonic() < deadline, f"workers outlived the service: {[stat(pid) for pid in workers]}"
        time.sleep(0.1)
    # The Hub polls its services (every 30 s) and starts a dead one again.
    views = [answered(hub, tokens[user], request_id, seconds=ANSWER_S + 60) for user, request_id in sent]
    assert [(v["state"], v["score"]) for v in views] == [("done", 10)] * 6
    assert hub.service_pid() != service


WINDOW_OFF_BY_ONE = '''def sliding_window_mask(query_len, key_len, window):
    query_index = torch.arange(key_len - query_len, key_len).unsqueeze(-1)
    key_index = torch.arange(key_len)
    return (key_index <= query_index) & (key_index > query_index - window - 1)
'''


def log_in(page, hub, user: str) -> None:
    """The Hub's login form, as a student fills it in (the dummy authenticator takes any password)."""
    page.locator("#username_input").fill(user)
    page.locator("#password_input").fill("any")
    page.locator("#login_submit").click()


def test_a_student_checks_the_notebook_from_jupyterlab_and_only_they_see_it(hub):
    """alice has written apply_rope earlier; in JupyterLab she writes sliding_window_mask with the
    window one key too wide and checks it from the File menu: apply_rope passes, the window fails
    with its mistake named. bob cannot open her result."""
    set_policy(hub)
    folder = hub.home("alice") / A
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(tools.replace_solution(RELEASE, "apply_rope", answer_of("apply_rope")), folder / NB)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with browser_tools.chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        # The Hub starts alice's JupyterLab, and the grader's result page waits for a worker, on a
        # busy machine: the limit is the context's, so that the page the check opens has it too.
        page.context.set_default_timeout(120_000)
        try:
            page.goto(f"{hub.url}/hub/login")
            log_in(page, hub, "alice")
            page.wait_for_url("**/user/alice/lab**")
            page.goto(f"{hub.url}/user/alice/lab/tree/{A}/{NB}")
            cell = page.locator(".jp-Cell", has_text="def sliding_window_mask")
            cell.locator(".cm-content").click()
            page.keyboard.press("Control+a")
            page.keyboard.insert_text(WINDOW_OFF_BY_ONE)
            with page.context.expect_page() as opened:  # the toolbar's button saves, then opens the check
                page.locator(".jp-NotebookPanel-toolbar").get_by_text("Check with the grader", exact=True).click()
            result = opened.value
            failed = result.locator("#item-sliding_window_mask.failed")
            failed.wait_for()  # the page reloads itself until the answer is there
            assert "Mistake: the sliding window off by one." in failed.inner_text()
            assert result.locator("#item-apply_rope.passed").count() == 1
            assert "Not written yet" in result.locator("#item-kv_cache_bytes.failed").inner_text()
            assert "query_len=" not in result.content()  # the check's hidden sizes stay hidden
            result.screenshot(path=ARTIFACTS / "check.png", full_page=True)
            mine = result.url
            assert "/services/autograder/requests/" in mine
        except BaseException:
            for number, shown in enumerate(page.context.pages):
                shown.screenshot(path=ARTIFACTS / f"failure-{number}.png")
            raise
    saved = tools.read(folder / NB)  # the button saved the notebook before it was checked
    window = tools.cell_by_grade_id(saved, "sliding_window_mask")
    assert "".join(window["source"]).strip() == WINDOW_OFF_BY_ONE.strip()

    with browser_tools.chromium() as browser:
        page = browser.new_page()
        page.goto(hub.service)
        log_in(page, hub, "bob")
        page.wait_for_url(hub.service)
        assert mine.rsplit("/", 1)[1] not in page.content()
        refused = page.goto(mine)
        assert refused.status == 404 and "No such check request of yours" in page.content()


def test_a_flood_of_refused_requests_is_bounded_in_the_database_and_the_admin_pages(hub):
    """mallory sends 100 non-notebooks with a megabyte of file name each, twenty at a time: 20 are
    refused and recorded (her limit of refusals), the rest answered 429 and not stored. The file's
    pages in use grow by less than the bound docs/service.md states for a student, and the admin's
    pages, each bounded, show every request. All twenty may be in flight at once (``max_sending``):
    the limit under test is the refusals'."""
    set_policy(hub, service=ALL_AT_ONCE)
    token, before, used = hub.token_for("mallory"), len(rows(hub)), database_used(hub)
    essay = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    with ThreadPoolExecutor(max_workers=20) as pool:
        answers = list(pool.map(lambda i: send(hub, token, essay, f"{i}-" + "x" * 2**20), range(100)))
    codes = [a.status_code for a in answers]
    assert (codes.count(400), codes.count(429)) == (20, 80), codes
    not_recorded = "This request was not recorded: 20 of your requests were refused in the last hour"
    assert all(not_recorded in a.json()["message"] and "id" not in a.json() for a in answers if a.status_code == 429)
    store = Store(hub.course / "check_requests.db")
    flood = rows(hub)[before:]
    assert len(flood) == 20 and all(len(store.get(r["id"]).filename) == 120 for r in flood)
    growth = database_used(hub) - used
    print(f"\nThe database's pages in use grew by {growth} bytes for mallory's 100 requests")
    assert growth <= 2 * KEPT_UNCOUNTED * UNCOUNTED_ROW_BYTES
    teacher, shown, number = login(hub, hub_tools.ADMIN), [], 1
    while True:
        page = teacher.get(f"{hub.service}admin?page={number}", timeout=60)
        assert page.status_code == 200 and len(page.content) < PER_PAGE * 4096
        shown += re.findall(r'<a href="[^"]*/requests/([\w-]+)">', page.text)
        if "older &rarr;" not in page.text:
            break
        number += 1
    every = [r["id"] for r in reversed(rows(hub))]
    assert shown == every and number == -(-len(every) // PER_PAGE)
    assert teacher.get(f"{hub.service}admin?page=x", timeout=60).status_code == 404


def test_the_service_page_gives_the_hub_lines_the_tests_run():
    """The service's page of the documentation (docs/service.md, which the README links to) shows
    the lines of docs/jupyterhub_config.py after its two comment lines."""
    page = (tools.REPO_ROOT / "docs" / "service.md").read_text()
    lines = hub_tools.HUB_CONFIG.read_text().split("\n", 2)[2]
    assert f"```python\n{lines}```" in page

# --------------------------------------------------------------------------------------
# The front door (issue 46): no byte of a POST's body is read before the Hub has said who sent
# it; a body goes to a file under a cap and is read in a child process bounded in time and
# memory; only the course's roster gets checks; no page may be framed.
# --------------------------------------------------------------------------------------

MiB = 2**20
DOOR = {"max_notebook_mb": 5, "max_refused_per_hour": 1000}
"""The door's tests take notebooks up to 5 MiB, so that a body of up to 21 MiB is read, and record
every refusal (mallory's earlier ones, in this module, count in the same hour)."""
STRANGERS = 12
BOMB = ('{"filename": "bomb.ipynb", "notebook": {"nbformat": 4, "metadata": {}, "cells": ['
        + ",".join(["[" * 60 + "]" * 60] * (20 * MiB // 121)) + "]}}").encode()
"""20 MiB of JSON: a notebook whose cells are lists of empty lists, 60 deep (a gigabyte to parse)."""


def rss(pid: int) -> int:
    """The resident memory of process ``pid``, in bytes."""
    with open(f"/proc/{pid}/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def stalled_stranger(port: int, first: int, token: str = "") -> tuple[socket.socket, bytes]:
    """A client (without a token, unless ``token``): the headers of a 20 MiB POST and the body's
    ``first`` bytes, what it is answered within 3 s, then 4 MiB more of the body, and a stall (the
    socket is left open)."""
    conn = socket.create_connection(("127.0.0.1", port), timeout=10)
    auth = f"Authorization: token {token}\r\n" if token else ""
    conn.sendall(f"POST /services/autograder/api/requests HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}"
                 f"Content-Type: application/json\r\nContent-Length: {20 * MiB}\r\n\r\n".encode() + b"[" * first)
    conn.settimeout(3)
    try:
        answer = conn.recv(65536)
    except (TimeoutError, ConnectionResetError):
        answer = b""
    try:
        conn.settimeout(5)
        conn.sendall(b"[" * (4 * MiB))
    except OSError:
        pass  # the connection was closed: what the service does
    return conn, answer


def test_stalled_strangers_and_a_bomb_leave_pages_quick_and_memory_flat(hub):
    """Twelve strangers: six at the service's own port (which students' servers reach) are answered
    403 on their headers alone; six through the Hub's proxy, which sends the headers on with the
    body's first bytes, are answered at once too (403, or the proxy's 503 when the service's close of
    the unread connection reaches it first). mallory's bomb is refused and counted. Meanwhile bob's
    page answers in under a second each time, and the service's memory, the strangers still
    connected, is within 64 MiB of where it was."""
    set_policy(hub, service=DOOR)
    bob, mallory = hub.token_for("bob"), hub.token_for("mallory")
    warm = send(hub, bob, SOLUTION)
    assert warm.status_code == 202, warm.text
    answered(hub, bob, warm.json()["id"])

    def page() -> requests.Response:
        return requests.get(hub.service, headers={"Authorization": f"token {bob}"}, timeout=60)

    assert all(page().status_code == 200 for _ in range(5))
    service, before = hub.service_pid(), len(rows(hub))
    start = rss(service)
    proxy_port = int(hub.url.rsplit(":", 1)[1])
    with ThreadPoolExecutor(max_workers=STRANGERS + 1) as pool:
        bomb = pool.submit(requests.post, f"{hub.service}api/requests", data=BOMB, timeout=300,
                           headers={"Authorization": f"token {mallory}", "Content-Type": "application/json"})
        strangers = [pool.submit(stalled_stranger, *door) for door in [(hub.service_port, 0), (proxy_port, 65536)]
                     * (STRANGERS // 2)]
        waits = []
        while not bomb.done() or len(waits) < 10:
            started = time.monotonic()
            assert page().status_code == 200
            waits.append(time.monotonic() - started)
            time.sleep(0.2)
        refused, connections = bomb.result(), [s.result() for s in strangers]
        memory = rss(service)
        for conn, _ in connections:
            conn.close()
    print(f"\nbob's page, {len(waits)} times while the bomb was read: longest {max(waits):.3f} s; the service's "
          f"memory {start / MiB:.0f} MiB before, {memory / MiB:.0f} MiB with the strangers connected")
    assert max(waits) < 1.0, waits
    assert memory - start < 64 * MiB
    answers = [answer[:12].decode() for _, answer in connections]
    assert answers[::2] == ["HTTP/1.1 403"] * (STRANGERS // 2), answers
    assert set(answers[1::2]) <= {"HTTP/1.1 403", "HTTP/1.1 503"}, answers
    assert refused.status_code in (413, 422) and "Reading this notebook took" in refused.json()["message"], \
        refused.text[:300]
    assert [(r["user"], r["state"]) for r in rows(hub)[before:]] == [("mallory", "refused")]  # in her limit


@pytest.mark.parametrize("bounds, status, said", [
    ({"read_seconds": 1, "read_memory_mb": 4096}, 422, "took longer than 1 s"),
    ({"read_seconds": 600, "read_memory_mb": 64}, 413, "took more than 64 MiB of memory"),
])
def test_a_bomb_past_a_bound_of_its_reading_is_refused_and_counts(hub, bounds, status, said):
    set_policy(hub, service={**DOOR, **bounds})
    before = len(rows(hub))
    refused = requests.post(f"{hub.service}api/requests", data=BOMB, timeout=300,
                            headers={"Authorization": f"token {hub.token_for('mallory')}"})
    message = refused.json()["message"]
    assert refused.status_code == status and said in message and "save it again" in message, message
    recorded = rows(hub)[before:]
    assert [(r["user"], r["state"]) for r in recorded] == [("mallory", "refused")] and said in recorded[0]["message"]
    set_policy(hub, service=DOOR)


def test_only_the_roster_gets_checks_and_one_added_gets_in_without_a_restart(hub):
    """oscar, a Hub user off the course's roster, gets 403 with what to ask; alice, on it, gets her
    quota; the admin keeps the admin page. Once the instructor runs ``nbgrader db student add
    oscar``, oscar's check is taken, within the roster's refresh, by the same service."""
    set_policy(hub, service=DOOR)
    outsider, before, service = hub_tools.OUTSIDER, len(rows(hub)), hub.service_pid()
    oscar, alice = hub.token_for(outsider), hub.token_for("alice")
    add = f"nbgrader db student add {outsider}"
    refused = send(hub, oscar, {"cells": []})  # a small body: refused from the headers (see below)
    assert refused.status_code == 403 and add in refused.json()["message"], refused.text
    home = requests.get(hub.service, headers={"Authorization": f"token {oscar}"}, timeout=60)
    assert home.status_code == 403 and add in home.text and "roster" in home.text
    assert len(rows(hub)) == before  # nothing recorded of him
    mine = requests.get(hub.service, headers={"Authorization": f"token {alice}"}, timeout=60)
    assert mine.status_code == 200 and " of 100" in mine.text and "roster" not in mine.text  # her quota
    teacher = login(hub, hub_tools.ADMIN)
    assert teacher.get(f"{hub.service}admin", timeout=60).status_code == 200
    assert "nbgrader db student add teacher" in teacher.get(hub.service, timeout=60).text

    subprocess.run([sys.executable, "-m", "nbgrader", "db", "student", "add", outsider], cwd=hub.course,
                   env=nbgrader_env(), check=True, capture_output=True)
    # Asked by the home page, which has no body: a refused POST's 100 KB may still be on its way through
    # the Hub's proxy when the service answers from the headers, and the proxy may answer 503 in its
    # place (docs/service.md).
    deadline = time.monotonic() + FRESH_SECONDS + 30
    while (home := requests.get(hub.service, headers={"Authorization": f"token {oscar}"}, timeout=60)
           ).status_code == 403:
        assert time.monotonic() < deadline, home.text
        time.sleep(0.5)
    assert home.status_code == 200 and "roster" not in home.text, home.text
    taken = send(hub, oscar, SOLUTION)
    assert taken.status_code == 202, taken.text
    assert answered(hub, oscar, taken.json()["id"])["score"] == 10
    assert hub.service_pid() == service


def test_no_page_of_the_service_may_be_framed(hub):
    """Every answer says so twice (CSP's frame-ancestors for today's browsers, X-Frame-Options for
    older ones): the admin's page, a student's pages, the API, and the errors."""
    set_policy(hub, service=DOOR)
    token = hub.token_for("alice")
    alice = {"Authorization": f"token {token}"}
    sent = send(hub, token, SOLUTION).json()
    teacher = login(hub, hub_tools.ADMIN)
    answers = {"admin page": teacher.get(f"{hub.service}admin", timeout=60),
               "home page": requests.get(hub.service, headers=alice, timeout=60),
               "request page": requests.get(f"{hub.service}requests/{sent['id']}", headers=alice, timeout=60),
               "API": requests.get(f"{hub.service}api/requests/{sent['id']}", headers=alice, timeout=60),
               "error": requests.get(f"{hub.service}requests/{'x' * 16}", headers=alice, timeout=60),
               "stranger's POST": requests.post(f"{hub.service}api/requests", data=b"{}", timeout=60)}
    assert answers["admin page"].status_code == 200 and "Every request" in answers["admin page"].text
    for name, answer in answers.items():
        assert answer.headers.get("X-Frame-Options") == "DENY", name
        assert "frame-ancestors 'none'" in answer.headers.get("Content-Security-Policy", ""), name
    answered(hub, token, sent["id"])


SIGNAL_40 = "import os\nos.kill(os.getpid(), 40)\n"


def test_a_run_killed_by_a_signal_python_does_not_name_is_answered_in_one_try_with_why(hub):
    """An answer that kills its run with a real-time signal: before 6da56f0 the grader itself raised
    ('40 is not a valid Signals'), so the request was tried three times, each time in a fresh
    sandbox, and failed. Now its item is killed, the reason told from the catalogue, in one try."""
    set_policy(hub)
    token = hub.token_for("dan")
    sent = send(hub, token, tools.replace_solution(SOLUTION, "kv_cache_bytes", SIGNAL_40)).json()
    view = answered(hub, token, sent["id"])
    item = next(i for i in view["items"] if i["grade_id"] == "kv_cache_bytes")
    assert (view["state"], item["status"]) == ("done", "killed"), view
    assert item["message"] == "Your answer cell: " + messages.DEATH["killed"], item
    assert next(r for r in rows(hub) if r["id"] == sent["id"])["attempts"] == 1


def test_a_request_whose_worker_died_costs_a_check_and_waits_only_its_time_in_the_queue(hub):
    """A request that had been in a worker longer than the queue allows when its worker died: before
    the fix, expiry counted from when it was sent, so it expired at once, which costs no check (a
    notebook that kills its worker would be checked for free, a fresh sandbox each time). Now it
    goes back to the queue for its own time there, is graded again, and counts."""
    set_policy(hub, max_wait_minutes=0.05)  # 3 s in the queue
    dan, store = hub.token_for("dan"), Store(hub.course / "check_requests.db")
    counted = store.usage("dan", A, time.time())[1]
    victim = send(hub, dan, slow(8)).json()
    pid = worker_of(hub, victim["id"], 1)
    time.sleep(4)  # in its worker, past the 3 s a request may wait in the queue
    os.kill(int(pid), signal.SIGKILL)
    view = answered(hub, dan, victim["id"])
    assert view["state"] in ("done", "failed") and store.usage("dan", A, time.time())[1] == counted + 1, view
    set_policy(hub)


FORGED_REPORT = '''def kv_cache_bytes(n_layers, n_kv_heads, head_dim, seq_len, batch=1, dtype=torch.bfloat16):
    import json, os, stat, struct
    note = json.dumps({"event": "tampered", "what": "LE" + f"AK {n_layers}x{head_dim}x{seq_len}"}).encode()
    for fd in range(3, 64):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, struct.pack(">cI", b"E", len(note)) + note)
        except OSError:
            pass
    return 0
'''


def test_a_forged_report_shows_the_student_no_word_of_it(hub):
    """The first attack of issue 46: an answer that writes a forged ``tampered`` note onto its run's
    report pipe, spelling the hidden inputs it was called with. Before the catalogue, its words were
    the item's text, shown before the deadline word for word. Now the item is tampered, with one of
    the catalogue's reasons, and no word of the note is on the API or the page."""
    set_policy(hub)
    token = hub.token_for("mallory")
    sent = send(hub, token, tools.replace_solution(SOLUTION, "kv_cache_bytes", FORGED_REPORT)).json()
    view = answered(hub, token, sent["id"])
    item = next(i for i in view["items"] if i["grade_id"] == "kv_cache_bytes")
    assert item["status"] == "tampered" and item["message"].startswith("The grader stopped the run: "), item
    page = requests.get(f"{hub.service}requests/{sent['id']}", timeout=60,
                        headers={"Authorization": f"token {token}"}).text
    assert not any("LEAK" in text for text in (json.dumps(view), page))


def closed(conn: socket.socket, seconds: float) -> bool:
    """Whether the service closes ``conn`` within ``seconds`` (a stalled body, past its time)."""
    conn.settimeout(seconds)
    try:
        while conn.recv(65536):
            pass
    except TimeoutError:
        return False
    except OSError:
        pass
    return True


def test_a_student_sends_two_notebooks_at_once_at_most_and_a_stalled_body_is_cut(hub):
    """A student's third body at once is answered 429 on its headers, none of it read: each open
    body holds a file of up to 21 MiB. A body that stalls is closed past the service's time for one
    (``body_seconds``), which frees its place. Before, bob's stalled bodies had no bound in number
    or time: each kept its file and connection as long as he kept it open."""
    set_policy(hub, service=DOOR)
    bob = hub.token_for("bob")
    stalled = [stalled_stranger(hub.service_port, 0, bob) for _ in range(2)]
    third, answer = stalled_stranger(hub.service_port, 0, bob)
    assert answer.startswith(b"HTTP/1.1 429") and b"already sending 2 notebook(s)" in answer, answer[:300]
    assert all(not answer for _, answer in stalled)
    assert all(closed(conn, BODY_SECONDS + 15) for conn, _ in stalled)
    for conn in (third, *(conn for conn, _ in stalled)):
        conn.close()
    sent = send(hub, bob, SOLUTION)
    assert sent.status_code == 202, sent.text
    answered(hub, bob, sent.json()["id"])

