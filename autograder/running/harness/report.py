"""How a run reports to its server: frames on a pipe, written into files by the server alone.

A run (the process that runs a student's code) cannot see the folder its results go to: the
server writes the journal and the probes' records there, from the frames the run sends. So no
code of a run can rewrite what an earlier step reported, or replace a record once it is sent.
What a run sends may still be forged by the student's code while it runs (it shares the
process); the trusted side checks the journal's order against the plan and reads a run that
died as untrustworthy (:mod:`autograder.running.runner`).

A frame is one byte of kind (``E``: an event, a JSON object; ``F``: a file, a name and its
bytes), four bytes of length, and the payload. The server stops reading a run that breaks the
format and notes it in the journal, for the trusted side to flag.
"""

from __future__ import annotations

import json
import os
import re
import struct

HEADER = struct.Struct(">cI")
EVENT, FILE = b"E", b"F"
MAX_EVENT_BYTES = 2**20
MAX_FILE_BYTES = 17 * 2**20
MAX_FILES = 512
FILE_NAME = re.compile(r"[A-Za-z0-9_.+-]{1,120}\.safetensors")
SERVER_EVENTS = frozenset({"ready", "garbled"})
"""Events only the server writes: a run that sends one is forging."""
MAX_EVENT_DEPTH = 32
"""How deep an event's JSON may nest. What a probe reports (a record's shape, a list of token lists)
nests a few levels; a deeper event is one made so that a reader with less stack than the server
cannot read its line of the journal back, while the server has acted on it."""


def senders(fd: int):
    """The run's end of the pipe: ``send(event, **fields)`` and ``send_file(name, data)``. Every
    frame is written whole, and only while the descriptor is still the pipe it was given: a run
    whose code closed or replaced it exits (the trusted side reads that as a run that died in the
    step it was in). What they use is bound in their defaults, which no code may replace."""
    stat = os.fstat(fd)

    def write(kind: bytes, *parts: bytes, _fd=fd, _identity=(stat.st_dev, stat.st_ino), _fstat=os.fstat,
              _writev=os.writev, _pack=HEADER.pack, _exit=os._exit) -> None:
        """One frame of ``parts`` one after the other, written without joining them (a record of
        megabytes is not copied again)."""
        try:
            now = _fstat(_fd)
            if (now.st_dev, now.st_ino) != _identity:
                _exit(RUN_LOST_ITS_REPORT)
            views = [memoryview(part) for part in (_pack(kind, sum(len(part) for part in parts)), *parts)]
            while views:
                written = _writev(_fd, views)
                while views and written >= len(views[0]):
                    written -= len(views.pop(0))
                if views:
                    views[0] = views[0][written:]
        except OSError:
            _exit(RUN_LOST_ITS_REPORT)

    def send(event: str, /, _write=write, _dumps=json.dumps, **fields) -> None:
        _write(EVENT, _dumps({"event": event, **fields}, default=str).encode("utf-8", "replace"))

    def send_file(name: str, data: bytes, /, _write=write, _pack=struct.pack) -> None:
        encoded = name.encode()
        _write(FILE, _pack(">H", len(encoded)), encoded, data)

    return send, send_file


RUN_LOST_ITS_REPORT = 86
"""The exit status of a run whose report pipe was closed or replaced under it."""


def frame(value) -> bytes:
    """``value`` as one JSON frame (the server's stages of course code, for the run), which
    :func:`receive` reads."""
    payload = json.dumps(value).encode()
    return HEADER.pack(EVENT, len(payload)) + payload


def raw_frame(data: bytes) -> bytes:
    """``data`` as one frame of bytes (a timed window's inputs, :mod:`harness.clock`), which
    :func:`receive` returns as they are."""
    return HEADER.pack(FILE, len(data)) + data


def receive(fd: int, into: bytearray | None = None):
    """Reads one frame made by :func:`frame` (its value) or :func:`raw_frame` (its bytes); waits for
    it. The bytes go into ``into`` when it is large enough (then a view of its start is returned):
    a timed window's inputs land in memory the run has already touched, so the window does not pay
    the kernel for fresh pages, a cost that depends on the machine's load and not on the answer."""
    def filled(view: memoryview) -> memoryview:
        got = 0
        while got < len(view):
            read = os.readv(fd, [view[got:]])
            if not read:
                raise EOFError("the server sent no more")
            got += read
        return view

    kind, length = HEADER.unpack(filled(memoryview(bytearray(HEADER.size))))
    if kind != FILE:
        return json.loads(bytes(filled(memoryview(bytearray(length)))))
    buffer = into if into is not None and len(into) >= length else bytearray(length)
    return filled(memoryview(buffer)[:length])


class Collector:
    """The server's end: reads frames as they come, hands each event (a dict) to ``journal`` and
    writes each file into ``out_dir`` under its name, until the run breaks the format."""

    def __init__(self, fd: int, out_dir: str, journal):
        self.fd, self.out_dir, self.journal = fd, out_dir, journal
        self._buffer = bytearray()
        self._files: set[str] = set()
        self.broken = False

    @property
    def written(self) -> set[str]:
        """The files the run has reported so far."""
        return self._files

    def read(self) -> bool:
        """Reads what is there (the pipe is non-blocking); False at its end."""
        try:
            chunk = os.read(self.fd, 1 << 20)
        except BlockingIOError:
            return True
        if not self.broken:
            self._buffer += chunk
            self._parse()
        return bool(chunk)

    def _parse(self) -> None:
        while len(self._buffer) >= HEADER.size:
            kind, length = HEADER.unpack_from(self._buffer)
            if kind not in (EVENT, FILE) or length > (MAX_EVENT_BYTES if kind == EVENT else MAX_FILE_BYTES):
                return self._break(f"a frame of kind {kind!r} and {length} bytes")
            if len(self._buffer) < HEADER.size + length:
                return None
            payload = bytes(self._buffer[HEADER.size:HEADER.size + length])
            del self._buffer[:HEADER.size + length]
            problem = self._event(payload) if kind == EVENT else self._file(payload)
            if problem:
                return self._break(problem)
        return None

    def _event(self, payload: bytes) -> str | None:
        try:
            event = json.loads(payload)
        except (ValueError, RecursionError):
            return "an event that is not JSON"
        if not isinstance(event, dict) or not isinstance(event.get("event"), str) or event["event"] in SERVER_EVENTS:
            return "an event the run may not send"
        if depth(event) > MAX_EVENT_DEPTH:
            return f"an event nested more than {MAX_EVENT_DEPTH} levels deep"
        self.journal(event)
        return None

    def _file(self, payload: bytes) -> str | None:
        (size,) = struct.unpack_from(">H", payload) if len(payload) >= 2 else (None,)
        name = payload[2:2 + size].decode("ascii", "replace") if size is not None else ""
        if not FILE_NAME.fullmatch(name) or name in self._files or len(self._files) >= MAX_FILES:
            return "a file the run may not write (or one it wrote already)"
        self._files.add(name)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
        fd = os.open(os.path.join(self.out_dir, name), flags, 0o600)
        try:
            data = memoryview(payload)[2 + size:]
            while data:
                data = data[os.write(fd, data):]
        finally:
            os.close(fd)
        return None

    def _break(self, problem: str) -> None:
        self.broken = True
        self._buffer.clear()
        self.journal({"event": "garbled", "why": problem})


def depth(value) -> int:
    """How deep ``value`` (parsed JSON) nests: 0 for a number or a string, one more for each list or
    object around it. Counted without recursion, so any depth the parser took can be measured."""
    deepest, todo = 0, [(value, 0)]
    while todo:
        value, level = todo.pop()
        if isinstance(value, (list, dict)):
            deepest = max(deepest, level + 1)
            todo.extend((inner, level + 1) for inner in (value.values() if isinstance(value, dict) else value))
    return deepest
