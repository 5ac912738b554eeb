"""What a POST sent, read off the service's event loop, in a child process bounded in time and memory.

:func:`autograder.service.intake.read_post` turns any bytes into a notebook or a refusal, but some
bytes cost much to read: 20 MiB of nested empty lists take a gigabyte and half a minute. Read in
the service's own process, such a body made every other student's page wait as long, and left
its memory taken. So each body is read in a child process of a pool (pebble's ``ProcessPool``),
where it may take at most ``read_seconds`` and ``read_memory_mb`` of address space more than the
child holds when it starts (``RLIMIT_AS``; both are ``c.CheckService`` settings). A child past the
time is killed; one past the memory fails to allocate (or, should the kernel kill it, dies);
either way the body is refused with a message that says so and what to do, and the refusal
counts as any other. The defaults are far from both ends: the largest notebooks a check takes
(5 MiB of outputs, or of cells) read in a few seconds with less than 100 MiB, even on a busy
machine; 20 MiB of nested empty lists need more than a gigabyte.

The children are forked from a fork server that imported the intake once (torch comes with the
course's modules), so that a child starts in milliseconds and shares no thread or lock of the
service's; each reads one body and exits, so that what a body made it allocate goes back at once.
:data:`READERS` children read at a time; more bodies wait for one.
"""

from __future__ import annotations

import asyncio
import functools
import multiprocessing
import os
import resource
from pathlib import Path

from pebble import ProcessExpired, ProcessPool

from autograder.reading.config import Autograder
from autograder.reading.course import Course
from autograder.service.intake import DEFAULT_NAME, MiB, Sent, read_post

READERS = 2
AGAIN = ("A notebook that JupyterLab saved reads quickly: open it in JupyterLab, save it again (File, Save "
         "Notebook), clear large outputs first (Edit, Clear Outputs of All Cells), and check again.")


def too_slow(size: int, seconds: int) -> Sent:
    return Sent(422, f"Reading this notebook took longer than {seconds} s, the most a check may take to read one, "
                     f"so it was stopped. {AGAIN}", DEFAULT_NAME, size)


def too_big(size: int, memory_bytes: int) -> Sent:
    return Sent(413, f"Reading this notebook took more than {memory_bytes // MiB} MiB of memory, the most a check "
                     f"may take to read one, so it was stopped. {AGAIN}", DEFAULT_NAME, size)


def address_space() -> int:
    """The bytes of address space this process holds now (the first field of /proc/self/statm)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def read_in_child(course: Course, content_type: str, path: str, max_bytes: int, memory_bytes: int) -> Sent:
    """:func:`read_post` of the body in ``path``, under the memory bound (in a child of the pool)."""
    body = Path(path).read_bytes()
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    bound = address_space() + memory_bytes
    resource.setrlimit(resource.RLIMIT_AS, (bound if hard == resource.RLIM_INFINITY else min(bound, hard), hard))
    try:
        return read_post(course, content_type, body, max_bytes)
    except MemoryError:
        return too_big(len(body), memory_bytes)


class Readers:
    """The pool of children that read bodies; :meth:`read` awaits one's answer."""

    def __init__(self, course: Course):
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload([__name__])
        self.pool = ProcessPool(max_workers=READERS, max_tasks=1, context=context)
        # The course's settings as values, without the configuration they were read from: unpickled in
        # a child, that would import what nbgrader_config.py imports (nbgrader's preprocessors), seconds.
        self.course = Course(course.root, Autograder(**course.settings.trait_values(config=True)))

    def start(self) -> None:
        """Starts the fork server and the first children (its imports take seconds): call it off the
        loop. It waits for no answer: a pool stopped first would never give one."""
        self.pool.schedule(os.getpid)

    async def read(self, content_type: str, path: Path, max_bytes: int, seconds: int, memory_bytes: int) -> Sent:
        """What the body in ``path`` sends, read by a child; the loop serves other requests meanwhile."""
        schedule = functools.partial(self.pool.schedule, read_in_child, timeout=seconds,
                                     args=(self.course, content_type, str(path), max_bytes, memory_bytes))
        future = await asyncio.get_running_loop().run_in_executor(None, schedule)  # the pool may be starting
        try:
            return await asyncio.wrap_future(future)
        except TimeoutError:
            return too_slow(path.stat().st_size, seconds)
        except (MemoryError, ProcessExpired):  # out of memory outside read_post, or killed by the kernel
            return too_big(path.stat().st_size, memory_bytes)

    def stop(self) -> None:
        self.pool.stop()
        self.pool.join()
