"""The grading service's pages and API, behind JupyterHub's OAuth.

Who a request comes from is who the Hub says: a browser's Hub OAuth cookie (with the Hub's XSRF
token on every POST) or a Hub token (``Authorization: token ...``, as the student's own
JupyterLab server sends it). A student sees their own requests only; another's id answers 404,
the same as an id that does not exist. The Hub's admins see every request.

- ``GET  {prefix}``                    the student's page: their checks, what is left, a form to send a notebook
- ``POST {prefix}api/requests``        send a notebook (JSON ``{"filename", "notebook"}``, or a form's file)
- ``GET  {prefix}api/requests/<id>``   a request's state, place in the queue and result (JSON)
- ``GET  {prefix}requests/<id>``       the same as a page, which reloads itself until the answer is there
- ``GET  {prefix}admin``               every request (admins only)

Pages are templates that escape every value and run no script. What a student sees of a result
follows the assignment's ``show`` and :mod:`autograder.service.shown`: never a hidden input, never
check code.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import time
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlparse

from jupyterhub.services.auth import HubOAuthCallbackHandler, HubOAuthenticated
from jupyterhub.utils import url_path_join
from tornado import ioloop, web

from autograder import pipeline
from autograder.errors import GradingError
from autograder.feedback import PAGES
from autograder.grading import Course
from autograder.preflight import grade_ids, read_notebook
from autograder.service.policy import Policies, Policy
from autograder.service.shown import public_item
from autograder.service.store import Request, Store
from autograder.service.supervisor import Supervisor

CSP = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'self'"


def when(timestamp: float | None) -> str:
    if timestamp is None:
        return ""
    return datetime.fromtimestamp(timestamp, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def which_notebook(course: Course, filename: str, cells: list[dict]) -> tuple[str, str] | None:
    """The (assignment, release notebook) that a sent notebook is a copy of: the release notebook
    of the same name, else the one that shares the most graded cells with it (students rename files)."""
    ids = grade_ids(cells)
    candidates = []
    for assignment in course.assignments():
        folder = course.root / "release" / assignment
        for path in sorted(folder.glob("*.ipynb")):
            release, problem = read_notebook(path)
            if problem:
                continue
            shared = ids & grade_ids(release["cells"])
            candidates.append((path.stem == Path(filename).stem, len(shared), assignment, path.stem))
    best = max(candidates, default=None)
    return (best[2], best[3]) if best and (best[0] or best[1]) else None


def view(request: Request, policy: Policy, store: Store, prefix: str) -> dict:
    """What the student who sent ``request`` may see of it, as JSON."""
    items = [public_item(item, policy.show) for item in request.items]
    return {"id": request.id, "assignment": request.assignment, "filename": request.filename, "state": request.state,
            "place": store.place(request), "submitted": when(request.submitted), "started": when(request.started),
            "finished": when(request.finished), "message": request.message, "score": request.score,
            "max_score": request.max_score, "items": items, "show": policy.show,
            "url": url_path_join(prefix, "requests", request.id)}


class Service:
    """What every handler shares: the course, its policies, the store and the URL prefix."""

    def __init__(self, root: Path, prefix: str):
        self.course = Course(root)
        self.policies = Policies(root)
        self.store = Store(self.policies.database)
        self.prefix = prefix


class Handler(HubOAuthenticated, web.RequestHandler):
    @property
    def service(self) -> Service:
        return self.settings["service"]

    def set_default_headers(self) -> None:
        self.set_header("Content-Security-Policy", CSP)
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("Referrer-Policy", "same-origin")
        self.set_header("Cache-Control", "no-store")

    @property
    def user(self) -> str:
        return self.current_user["name"]

    @property
    def admin(self) -> bool:
        return bool(self.current_user.get("admin"))

    def page(self, template: str, **values) -> None:
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(PAGES.get_template(template).render(prefix=self.service.prefix, user=self.user, admin=self.admin,
                                                        when=when, **values))

    def view_of(self, request: Request) -> dict:
        return view(request, self.service.policies.for_assignment(request.assignment), self.service.store,
                    self.service.prefix)

    def write_view(self, request: Request, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(self.view_of(request)))

    def own_request(self, request_id: str) -> Request:
        """The request ``request_id`` if it is the current user's (or the user is an admin); 404 otherwise."""
        request = self.service.store.get(request_id)
        if request is None or (request.user != self.user and not self.admin):
            raise web.HTTPError(404, "No such check request of yours.")
        return request

    def write_error(self, status_code: int, **kwargs) -> None:
        """A short answer that says what went wrong: JSON for the API, a page for pages."""
        reason = kwargs.get("exc_info", (None, None, None))[1]
        message = getattr(reason, "log_message", None) or self._reason
        if "/api/" in self.request.path:
            self.set_header("Content-Type", "application/json")
            return self.finish(json.dumps({"state": "error", "message": message}))
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(PAGES.get_template("check_error.html.j2").render(status=status_code, message=message,
                                                                     prefix=self.service.prefix))


class HomePage(Handler):
    @web.authenticated
    def get(self) -> None:
        service, now = self.service, time.time()
        service.policies.load()
        assignments = []
        for name, policy in sorted(service.policies.policies.items()):
            hour, in_all, _ = service.store.usage(self.user, name, now)
            assignments.append({"name": name, "policy": policy, "hour_left": max(0, policy.per_hour - hour),
                                "left": max(0, policy.in_all - in_all),
                                "closed": policy.closed_because(datetime.now(timezone.utc))})
        self.page("check_home.html.j2", assignments=assignments, requests=service.store.of_user(self.user),
                  xsrf=self.xsrf_token.decode() if isinstance(self.xsrf_token, bytes) else self.xsrf_token)


class RequestsAPI(Handler):
    @web.authenticated
    def post(self) -> None:
        service = self.service
        limit = service.policies.settings.max_notebook_mb * 2**20
        filename, body = self.notebook_sent()
        form = bool(self.request.files)
        if len(body) > limit:
            return self.answer(service.store.refuse(
                self.user, "", filename, len(body),
                f"The notebook is {len(body) / 2**20:.1f} MiB; checks take notebooks up to "
                f"{service.policies.settings.max_notebook_mb} MiB. Clear the outputs (Edit, Clear Outputs of All "
                f"Cells), save, and check again."), 413, form)
        try:
            cells = json.loads(body)["cells"]
            if not isinstance(cells, list):
                raise ValueError("cells is not a list")
        except (ValueError, KeyError, TypeError) as error:
            return self.answer(service.store.refuse(
                self.user, "", filename, len(body),
                f"This is not a notebook the grader can read ({error}). Check the .ipynb file you saved from "
                f"JupyterLab, not an export or a copy of its text."), 400, form)
        found = which_notebook(service.course, filename, cells)
        if found is None:
            return self.answer(service.store.refuse(
                self.user, "", filename, len(body),
                f"{filename} is not a notebook of this course's assignments: none of its graded cells is one of "
                f"theirs. Check the notebook you fetched for the assignment."), 400, form)
        assignment, notebook = found
        policy, settings = service.policies.for_assignment(assignment), service.policies.settings
        request = service.store.submit(self.user, assignment, notebook, filename, body, policy, settings.max_waiting)
        self.answer(request, 202 if request.state == "queued" else 429, form)

    def notebook_sent(self) -> tuple[str, bytes]:
        """The sent notebook's file name and bytes, from a form's file or a JSON body."""
        if self.request.files:
            upload = next(iter(self.request.files.values()))[0]
            return Path(upload["filename"] or "notebook.ipynb").name, upload["body"]
        try:
            sent = json.loads(self.request.body)
            notebook = sent["notebook"]
            return Path(str(sent.get("filename") or "notebook.ipynb")).name, (
                notebook.encode() if isinstance(notebook, str) else json.dumps(notebook).encode())
        except (ValueError, KeyError, TypeError, AttributeError):
            raise web.HTTPError(400, 'Send JSON {"filename": ..., "notebook": ...} or a form with a notebook file.') \
                from None

    def answer(self, request: Request, status: int, form: bool) -> None:
        """JSON for a program; for a browser's form, the request's page."""
        if form:
            return self.redirect(url_path_join(self.service.prefix, "requests", request.id), status=303)
        self.write_view(request, status)


class RequestAPI(Handler):
    @web.authenticated
    def get(self, request_id: str) -> None:
        self.write_view(self.own_request(request_id))


class RequestPage(Handler):
    @web.authenticated
    def get(self, request_id: str) -> None:
        request = self.own_request(request_id)
        self.page("check_request.html.j2", request=self.view_of(request), owner=request.user)


class AdminPage(Handler):
    @web.authenticated
    def get(self) -> None:
        if not self.admin:
            raise web.HTTPError(403, "This page is for the Hub's admins.")
        self.page("check_admin.html.j2", requests=self.service.store.every())


def make_app(root: Path, prefix: str, cookie_secret: bytes) -> web.Application:
    """The service's tornado application under ``prefix`` (JUPYTERHUB_SERVICE_PREFIX)."""
    service = Service(root, prefix)
    return web.Application([
        (prefix, HomePage),
        (url_path_join(prefix, "api/requests"), RequestsAPI),
        (url_path_join(prefix, r"api/requests/([A-Za-z0-9_-]+)"), RequestAPI),
        (url_path_join(prefix, r"requests/([A-Za-z0-9_-]+)"), RequestPage),
        (url_path_join(prefix, "admin"), AdminPage),
        (url_path_join(prefix, "oauth_callback"), HubOAuthCallbackHandler),
    ], service=service, cookie_secret=cookie_secret)


def body_limit(settings) -> int:
    """The largest body the server reads: room for a notebook over the limit, so that it is
    answered with a message that says so, not a dropped connection."""
    return 4 * settings.max_notebook_mb * 2**20 + 2**20


def cookie_secret(root: Path) -> bytes:
    """The key of the service's cookies, kept in the course's grading state, so that students
    stay logged in to the service when it restarts."""
    path = root / ".grading" / "service_cookie_secret"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(secrets.token_bytes(32))
        path.chmod(0o600)
    return path.read_bytes()


def serve(root: Path) -> None:
    """Runs the service where JupyterHub says (``JUPYTERHUB_SERVICE_URL``), with its workers."""
    url, prefix = os.environ.get("JUPYTERHUB_SERVICE_URL"), os.environ.get("JUPYTERHUB_SERVICE_PREFIX")
    if not url or not prefix or not os.environ.get("JUPYTERHUB_API_TOKEN"):
        raise GradingError("autograder serve runs as a JupyterHub service, which sets JUPYTERHUB_SERVICE_URL, "
                           "JUPYTERHUB_SERVICE_PREFIX and JUPYTERHUB_API_TOKEN: list it in jupyterhub_config.py "
                           "(see the README, 'Checks before the deadline').")
    logging.basicConfig(level=logging.INFO, format="[autograder serve %(asctime)s] %(message)s")
    app = make_app(root, prefix, cookie_secret(root))
    service = app.settings["service"]
    pipeline.isolation_for(service.course)  # no sandbox: say so now, not in every worker
    where = urlparse(url)
    app.listen(where.port or 80, address=where.hostname or "", max_body_size=body_limit(service.policies.settings))
    supervisor = Supervisor(root, service.policies, service.store)
    supervisor.start()
    ioloop.PeriodicCallback(supervisor.tick, 500).start()
    loop = ioloop.IOLoop.current()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: loop.add_callback_from_signal(loop.stop))
    logging.getLogger("autograder.serve").info("Serving checks of %s at %s%s", root, url, prefix)
    try:
        loop.start()
    finally:
        supervisor.stop()
