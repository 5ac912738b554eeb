"""The grading service's pages and API, behind JupyterHub's OAuth.

Who a request comes from is who the Hub says: a browser's Hub OAuth cookie (with the Hub's XSRF
token on every POST) or a Hub token (``Authorization: token ...``, as the student's own
JupyterLab server sends it), decided from the headers alone in ``prepare()``, the Hub's answer
awaited, before any byte of a body is read. Only students on the course's roster
(:mod:`autograder.service.roster`) get checks; anyone else gets 403 with what to ask the
instructor. A student sees their own requests only; another's id answers 404, the same as an id
that does not exist. The Hub's admins see every request.

- ``GET  {prefix}``                    the student's page: their checks, what is left, a form to send a notebook
- ``POST {prefix}api/requests``        send a notebook (JSON ``{"filename", "notebook"}``, or a form's file)
- ``GET  {prefix}api/requests/<id>``   a request's state, place in the queue and result (JSON)
- ``GET  {prefix}requests/<id>``       the same as a page, which reloads itself until the answer is there
- ``GET  {prefix}admin?page=N``        every request, newest first, a page at a time (admins only)

Pages are templates that escape every value and run no script, and no page may be framed, not
even by a page of the same origin (where the Hub runs without subdomains, a student's own
JupyterLab server is one). What a student sees of a result follows the assignment's ``show`` and
:mod:`autograder.service.shown`: never a hidden input, never check code. A POST's body goes to a
file under a cap (:mod:`autograder.service.body`) and is read by
:func:`autograder.service.intake.read_post` in a child process bounded in time and memory
(:mod:`autograder.service.reading`); nothing on the event loop waits on a body. Every refusal goes
through the student's limit of refusals (:class:`autograder.service.store.TooManyRefused`).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlparse

from jupyterhub.services.auth import HubOAuthCallbackHandler, HubOAuthenticated
from jupyterhub.utils import url_path_join
from tornado import ioloop, web

from autograder.recording import pipeline
from autograder.reading.course import Course
from autograder.reading.errors import GradingError
from autograder.recording.feedback import PAGES
from autograder.service import intake
from autograder.service.body import Body, clear_left
from autograder.service.intake import MiB, Sent
from autograder.service.policy import Policies, Policy
from autograder.service.reading import Readers
from autograder.service.roster import Roster, not_on_roster
from autograder.service.shown import public_item
from autograder.service.store import Request, Store, TooManyRefused
from autograder.service.supervisor import Supervisor

CSP = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'"
NOT_LOGGED_IN = ("The grading service does not know who sent this: send the notebook from JupyterLab (Check with "
                 "the grader), or log in to the Hub and send it from the service's page.")
THROWN_AWAY = 256 * MiB
"""How far past its limit a body is still read (and thrown away), to answer 413 with a message
rather than cut the connection, which the Hub's proxy would answer with 503."""
OTHER_BODIES = 64 * 1024
"""The largest body of any other request: only a notebook's POST has one."""
PER_PAGE = 100
"""Requests on a page of the admin's list (each row's texts are bounded by the store)."""


def when(timestamp: float | None) -> str:
    if timestamp is None:
        return ""
    return datetime.fromtimestamp(timestamp, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def view(request: Request, policy: Policy, store: Store, public_url: str) -> dict:
    """What the student who sent ``request`` may see of it, as JSON; its page is under ``public_url``."""
    items = [public_item(item, policy.show) for item in request.items]
    return {"id": request.id, "assignment": request.assignment, "filename": request.filename, "state": request.state,
            "place": store.place(request), "submitted": when(request.submitted), "started": when(request.started),
            "finished": when(request.finished), "message": request.message, "score": request.score,
            "max_score": request.max_score, "items": items, "show": policy.show,
            "url": url_path_join(public_url, "requests", request.id)}


class Service:
    """What every handler shares: the course, its policies, roster and store, where bodies are
    written, the children that read them, the URL prefix, and where the service's pages are for a
    program on another origin: ``JUPYTERHUB_PUBLIC_URL``, which the Hub sets when the service has
    an origin of its own (``c.JupyterHub.subdomain_host``) or a public URL, else the prefix."""

    def __init__(self, root: Path, prefix: str):
        self.course = Course(root)
        self.policies = Policies(root)
        self.roster = Roster(self.course)
        self.store = Store(self.policies.database)
        self.bodies = self.course.root / ".grading" / "bodies"
        clear_left(self.bodies)
        self.readers = Readers(self.course)
        self.sending: Counter[str] = Counter()  # bodies each student is sending now
        self.prefix = prefix
        self.public_url = os.environ.get("JUPYTERHUB_PUBLIC_URL") or prefix


class Handler(HubOAuthenticated, web.RequestHandler):
    on_roster = False
    roster_only = True
    """Whether a user off the roster who is not an admin gets 403 (the admin page has its own rule)."""

    @property
    def service(self) -> Service:
        return self.settings["service"]

    async def prepare(self) -> None:
        """Who sent the request, as the Hub says (awaited: the loop serves others while the Hub
        answers; ``current_user`` then applies the Hub's scopes to its answer), and whether they
        are on the roster."""
        await self.hub_auth.get_user(self, sync=False)
        self.on_roster = bool(self.current_user) and await self.service.roster.holds(self.user)
        if self.current_user and self.roster_only and not self.on_roster and not self.admin:
            raise web.HTTPError(403, "%s", not_on_roster(self.user))

    def set_default_headers(self) -> None:
        self.set_header("Content-Security-Policy", CSP)
        self.set_header("X-Frame-Options", "DENY")
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
                    self.service.public_url)

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

    @property
    def form(self) -> bool:
        """Whether the request is a browser's form, answered with pages."""
        content_type = self.request.headers.get("Content-Type", "").split(";")[0].strip().lower()
        return content_type in intake.FORM_TYPES

    def write_error(self, status_code: int, **kwargs) -> None:
        """A short answer that says what went wrong: JSON for the API, a page for pages and forms."""
        reason = kwargs.get("exc_info", (None, None, None))[1]
        message = self._reason
        if isinstance(reason, web.HTTPError) and reason.log_message:
            # as tornado formats it: a student's text goes in as an argument, where a % is only a %
            message = reason.log_message % reason.args if reason.args else reason.log_message
        if "/api/" in self.request.path and not self.form:
            self.set_header("Content-Type", "application/json")
            return self.finish(json.dumps({"state": "error", "message": message}))
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(PAGES.get_template("check_error.html.j2").render(status=status_code, message=message,
                                                                     prefix=self.service.prefix))


class HomePage(Handler):
    @web.authenticated
    def get(self) -> None:
        """The student's checks and what is left of them; an admin off the roster sees why they have none."""
        service, now = self.service, time.time()
        service.policies.load()
        assignments = []
        for name, policy in sorted(service.policies.policies.items()):
            hour, in_all, _ = service.store.usage(self.user, name, now)
            assignments.append({"name": name, "policy": policy, "hour_left": max(0, policy.per_hour - hour),
                                "left": max(0, policy.in_all - in_all),
                                "closed": policy.closed_because(datetime.now(timezone.utc))})
        self.page("check_home.html.j2", assignments=assignments, requests=service.store.of_user(self.user),
                  off_roster="" if self.on_roster else not_on_roster(self.user),
                  xsrf=self.xsrf_token.decode() if isinstance(self.xsrf_token, bytes) else self.xsrf_token)


@web.stream_request_body
class RequestsAPI(Handler):
    """Takes a notebook. Who sends it is decided in ``prepare()``, from the headers, before tornado
    reads any of the body: a stranger, or a user off the roster, is answered 403 at once and the
    connection closed unread. The body then goes to a file (:class:`~autograder.service.body.Body`);
    one over the limit is read to its end and thrown away, to be answered 413 with a message (tornado
    would cut the connection). It is read in a bounded child (:mod:`~autograder.service.reading`)."""

    body: Body | None = None
    xsrf_owed = False
    posted = False
    sending = ""  # the student whose count of bodies being sent this one is in, until it ends

    async def prepare(self) -> None:
        await super().prepare()
        if not self.current_user:
            raise web.HTTPError(403, "%s", NOT_LOGGED_IN)
        if not self.on_roster:  # an admin too: a quota is a student's
            raise web.HTTPError(403, "%s", not_on_roster(self.user))
        self.service.policies.load()
        settings, sending = self.service.policies.settings, self.service.sending
        if sending[self.user] >= settings.max_sending:
            raise web.HTTPError(429, "%s", f"You are already sending {sending[self.user]} notebook(s), the most a "
                                           "student may send at once: wait for them to arrive, then send again.")
        sending[self.user] += 1
        self.sending = self.user
        self.max_bytes = settings.max_notebook_mb * MiB
        try:
            declared = int(self.request.headers.get("Content-Length", "0"))
        except ValueError:
            declared = 0  # tornado answers it 400 before any of the body is read
        self.body = Body(self.service.bodies, intake.body_limit(self.max_bytes), declared)
        self.request.connection.set_max_body_size(self.body.limit + THROWN_AWAY)

    def write_error(self, status_code: int, **kwargs) -> None:
        """A refusal before the body was read ends its connection (tornado closes it, the body unread):
        the answer says so (``Connection: close``), so that the Hub's proxy does not send the next
        request, anyone's, down that connection and answer it 503 when it finds it closed."""
        if not self.posted:
            self.set_header("Connection", "close")
        super().write_error(status_code, **kwargs)

    def check_xsrf_cookie(self) -> None:
        """The Hub calls this as it identifies a cookie's user, in ``prepare()``; a form sends the
        token in its body, which is not read yet, so the check is owed (:meth:`check_form_xsrf`)."""
        self.xsrf_owed = True

    def data_received(self, chunk: bytes) -> None:
        self.body.write(chunk)

    async def post(self) -> None:
        self.posted = True
        settings = self.service.policies.settings
        if self.body.over:
            sent = intake.too_large(self.body.size, self.max_bytes, "")
        else:
            sent = await self.service.readers.read(self.request.headers.get("Content-Type", ""), self.body.path(),
                                                   self.max_bytes, settings.read_seconds,
                                                   settings.read_memory_mb * MiB)
        self.check_form_xsrf(sent)
        self.take(sent)

    def check_form_xsrf(self, sent: Sent) -> None:
        """The Hub's XSRF check of a cookie's POST, once its form is read, before anything is recorded:
        403 for a notebook without the token; a refusal without it is answered and not recorded (a
        form too large or too costly to read has no token that could be read)."""
        if not self.xsrf_owed:
            return
        if sent.xsrf:
            self.request.arguments.setdefault("_xsrf", []).append(sent.xsrf.encode())
        try:
            super().check_xsrf_cookie()
        except web.HTTPError:
            if sent.taken:
                raise
            raise web.HTTPError(sent.status, "%s", sent.message) from None

    def take(self, sent: Sent) -> None:
        """Queues the notebook sent, or answers why not; every refusal counts in the student's limit."""
        service, settings = self.service, self.service.policies.settings
        try:
            if not sent.taken:
                return self.answer(service.store.refuse(self.user, sent.filename, sent.size, sent.message,
                                                        settings.max_refused_per_hour), sent.status)
            request = service.store.submit(self.user, sent.assignment, sent.notebook, sent.filename, sent.content,
                                           service.policies.for_assignment(sent.assignment), settings.max_waiting,
                                           settings.max_refused_per_hour)
        except TooManyRefused as refused:
            raise web.HTTPError(429, "%s", refused.message) from None  # "%s": a file name may hold a %
        self.answer(request, 202 if request.state == "queued" else 429)

    def answer(self, request: Request, status: int) -> None:
        """JSON for a program; for a browser's form, the request's page."""
        if self.form:
            return self.redirect(url_path_join(self.service.prefix, "requests", request.id), status=303)
        self.write_view(request, status)

    def on_finish(self) -> None:
        if self.body:
            self.body.discard()
        if self.sending:  # once: a connection closed mid-body ends its request here too
            counts = self.service.sending
            counts[self.sending] -= 1
            if counts[self.sending] <= 0:
                del counts[self.sending]
            self.sending = ""

    def on_connection_close(self) -> None:
        """A client gone before its body ended; once posted, the body stays for the child reading it
        until the request finishes."""
        super().on_connection_close()
        if not self.posted:
            self.on_finish()


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
    roster_only = False

    @web.authenticated
    def get(self) -> None:
        if not self.admin:
            raise web.HTTPError(403, "This page is for the Hub's admins.")
        number = self.get_argument("page", "1")
        if not (number.isascii() and number.isdigit() and len(number) <= 9 and int(number) >= 1):
            raise web.HTTPError(404, "No such page: pages are numbered 1, 2, 3...")
        number = int(number)
        found = self.service.store.every(PER_PAGE + 1, (number - 1) * PER_PAGE)
        self.page("check_admin.html.j2", requests=found[:PER_PAGE], number=number, older=len(found) > PER_PAGE)


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
                           "(see docs/service.md, 'Checks before the deadline').")
    logging.basicConfig(level=logging.INFO, format="[autograder serve %(asctime)s] %(message)s")
    app = make_app(root, prefix, cookie_secret(root))
    service = app.settings["service"]
    pipeline.isolation_for(service.course)  # no sandbox: say so now, not in every worker
    ioloop.IOLoop.current().run_in_executor(None, service.readers.start)  # the readers' imports take seconds
    where = urlparse(url)
    app.listen(where.port or 80, address=where.hostname or "", max_body_size=OTHER_BODIES,
               body_timeout=service.policies.settings.body_seconds)
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
        service.readers.stop()
