"""What the service makes of what a student sends for a check: a pure function of the bytes.

A POST's body is anything anyone can send: JSON nested a thousand levels deep, a megabyte of file
name, a form without a file, bytes that are not text. :func:`read_post` turns any body into either
the assignment and release notebook that the sent notebook is a copy of, with its bytes, or a
refusal with its HTTP status and a message that says what was wrong and what to do. It never
raises, so that every request gets such an answer (and it can be fuzzed without a Hub); it reads
no state but the course's release notebooks, so the limits and the recording stay with the store.
Some bytes cost much to read all the same (megabytes of nested empty lists): the service runs it
in a bounded child process (:mod:`autograder.service.reading`), never on its event loop.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from tornado.httputil import HTTPInputError, parse_body_arguments

from autograder.reading.cells import grade_ids
from autograder.reading.course import Course
from autograder.reading.notebook_data import loads, parse_notebook, read_notebook, shown
from autograder.service.store import MAX_FILENAME

MiB = 2**20
DEFAULT_NAME = "notebook.ipynb"
FORM_TYPES = ("multipart/form-data", "application/x-www-form-urlencoded")
SEND = 'Send JSON {"filename": ..., "notebook": ...} or a form with a notebook file.'


@dataclass(frozen=True)
class Sent:
    """A sent notebook as the service takes it: ``status`` 202 with the ``assignment`` and release
    ``notebook`` it is a copy of and its bytes (``content``), or 400 or 413 with a ``message``.
    ``xsrf`` is a form's ``_xsrf`` field: the Hub's XSRF token, which the service checks before it
    records anything that a browser's form sent."""

    status: int
    message: str = ""
    filename: str = DEFAULT_NAME
    size: int = 0
    assignment: str = ""
    notebook: str = ""
    content: bytes = b""
    xsrf: str = ""

    @property
    def taken(self) -> bool:
        return self.status == 202


def body_limit(max_bytes: int) -> int:
    """The largest body read for a notebook of ``max_bytes``: room for it inside JSON, where
    escaping may make it up to four times longer, so that a notebook just over the limit is
    answered with its own size."""
    return 4 * max_bytes + MiB


def file_name(name: object) -> str:
    """The last part of a student's file name, storable as UTF-8, at most :data:`MAX_FILENAME`
    characters: it is shown on pages and stored, and a student may send a megabyte of it."""
    text = str(name).encode("utf-8", "replace").decode("utf-8").replace("\\", "/")
    return Path(text).name[:MAX_FILENAME] or DEFAULT_NAME


def too_large(size: int, max_bytes: int, filename: str = DEFAULT_NAME) -> Sent:
    return Sent(413, f"The notebook is {size / MiB:.1f} MiB; checks take notebooks up to {max_bytes / MiB:g} MiB. "
                     f"Clear the outputs (Edit, Clear Outputs of All Cells), save, and check again.", filename, size)


def read_post(course: Course, content_type: str, body: bytes, max_bytes: int) -> Sent:
    """What a POST of ``body`` sends: a notebook of the course, or a refusal that says why."""
    if content_type.split(";")[0].strip().lower() in FORM_TYPES:
        unpacked, xsrf = unpack_form(content_type, body)
    else:
        unpacked, xsrf = unpack(body), ""
    sent = unpacked if isinstance(unpacked, Sent) else read_sent(course, *unpacked, max_bytes)
    return replace(sent, xsrf=xsrf)


def unpack(body: bytes) -> tuple[str, bytes] | Sent:
    """The file name and bytes of the notebook in JSON ``{"filename", "notebook"}`` (the notebook
    as a string or as JSON), or a 400 that says what to send."""
    try:
        sent = loads(body)
    except ValueError as error:
        return Sent(400, f"The request is not JSON the service can read ({error}). {SEND}", size=len(body))
    if not isinstance(sent, dict) or "notebook" not in sent:
        return Sent(400, f"The request has no notebook. {SEND}", size=len(body))
    notebook, name = sent["notebook"], file_name(sent.get("filename") or DEFAULT_NAME)
    if isinstance(notebook, str):
        return name, notebook.encode("utf-8")
    return name, json.dumps(notebook, ensure_ascii=False).encode("utf-8")


def unpack_form(content_type: str, body: bytes) -> tuple[tuple[str, bytes] | Sent, str]:
    """A form's first file (streaming leaves the form to us), and its ``_xsrf`` field."""
    arguments, files = {}, {}
    try:
        parse_body_arguments(content_type, body, arguments, files)
    except HTTPInputError as error:
        return Sent(400, f"The form could not be read ({shown(error)}). {SEND}", size=len(body)), ""
    xsrf = arguments.get("_xsrf", [b""])[-1].decode("utf-8", "replace")
    uploads = [upload for field in files.values() for upload in field]
    if not uploads:
        return Sent(400, f"The form has no notebook file. {SEND}", size=len(body)), xsrf
    return (file_name(uploads[0].get("filename") or DEFAULT_NAME), uploads[0]["body"]), xsrf


def read_sent(course: Course, filename: str, body: bytes, max_bytes: int) -> Sent:
    """The notebook file ``body`` named ``filename``: 202 with the assignment and release notebook it
    is a copy of, 413 when it is larger than ``max_bytes``, 400 when it is not a notebook of the course."""
    name = file_name(filename)
    if len(body) > max_bytes:
        return too_large(len(body), max_bytes, name)
    notebook, problem = parse_notebook(body)
    if problem:
        return Sent(400, problem, name, len(body))
    found = which_notebook(course, name, notebook["cells"])
    if found is None:
        return Sent(400, f"{shown(name)} is not a notebook of this course's assignments: none of its graded cells is "
                         f"one of theirs. Check the notebook you fetched for the assignment.", name, len(body))
    return Sent(202, "", name, len(body), *found, body)


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
