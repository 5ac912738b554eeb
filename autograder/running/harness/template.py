"""The template every run is forked from: a process made once the sandbox has warmed up, which
never receives a plan, the course's code, a record, a report or another run's output.

Why: a run starts with a copy of the memory of the process it is forked from. Forked from the
server, it held the server's Python stack (a cell could walk its frames up to the gate of the
course's code and run a stage before it was released) and the server's heap, where freed memory
still held what earlier runs printed and reported (``numpy.empty`` could read it). The template is
forked from the server before the server has read any of that, and afterwards it receives only
the four descriptors a run needs, over a socket; so whatever a run finds in its memory was the
warmed-up server's and nothing more.

The server asks for a run with :meth:`Template.start` (it gets the pid of the process that makes the
run's namespaces) and, once that process has ended, takes its wait status with
:meth:`Template.status`: only the template, its parent, can wait for it.
"""

from __future__ import annotations

import os
import socket
import traceback
from collections.abc import Callable

DESCRIPTORS = 4
"""What a run is given: its report pipe, the pipe of the course's code, its status pipe and its output."""


class Template:
    """The server's handle on the template: its pid, and the socket it is asked on."""

    def __init__(self, start: Callable[[list[int]], int]):
        """Forks the template now. ``start(descriptors)`` runs in the template for each run: it forks
        the process that starts the run with those descriptors (:data:`DESCRIPTORS`) and returns its pid."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            ours.close()
            _serve_forks(theirs, start)
        theirs.close()
        self.pid, self._socket = pid, ours

    def start(self, descriptors: tuple[int, ...]) -> int:
        """Has the template start a run with ``descriptors`` (the server keeps its own copies);
        returns the pid of the process that starts it."""
        socket.send_fds(self._socket, [b"run"], list(descriptors))
        return int(self._socket.recv(32))

    def status(self) -> int:
        """The wait status of the process :meth:`start` made, once it has ended (waits for it)."""
        return int(self._socket.recv(32))


def _serve_forks(requests: socket.socket, start: Callable[[list[int]], int]) -> None:
    """The template's life: for each request, the run's descriptors in, the starter's pid and then
    its wait status out; it ends when the server closes its end. It holds no descriptor of the
    server's but its standard output and error (for a traceback of its own failure)."""
    keep = requests.fileno()
    os.closerange(3, keep)
    os.closerange(keep + 1, 1 << 16)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)   # the server's requests come on its standard input: never the template's
    os.close(null)
    try:
        while True:
            message, descriptors, _, _ = socket.recv_fds(requests, 16, DESCRIPTORS)
            if not message or len(descriptors) != DESCRIPTORS:
                break
            starter = start(descriptors)
            for fd in descriptors:
                os.close(fd)
            requests.send(str(starter).encode())
            requests.send(str(os.waitpid(starter, 0)[1]).encode())
    except BaseException:  # noqa: BLE001 - the template's own failure: said in the output; the server sees it gone
        traceback.print_exc()
    finally:
        os._exit(0)
