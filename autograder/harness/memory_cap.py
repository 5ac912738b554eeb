"""A memory cap that the kernel enforces and the run cannot raise: how assignment 05's memory is judged.

Before the first cell with student code, a run whose plan asks for it gets hard limits (a process
without ``CAP_SYS_RESOURCE`` may lower its limits, never raise them):

* ``RLIMIT_DATA``: what it holds now, plus ``extra`` bytes. Every private writable mapping counts:
  PyTorch's tensors and raw storages, NumPy's arrays, Python's objects, in any dtype (a complex
  tensor viewed as float32 included), made in a cell or in a call;
* ``RLIMIT_AS``: its address space now, plus ``extra`` and a margin for reservations, so that
  shared mappings (which ``RLIMIT_DATA`` does not count) stay within the same bound;
* ``RLIMIT_FSIZE`` of 0: no file (a tmpfs file, a ``memfd``) can hold data, since file pages
  count against neither limit; and ``RLIMIT_NOFILE``, so pipes and sockets cannot either.

A tiled pass fits in ``extra`` with room; the whole score matrix at the check's size, in any
container, does not, many times over, and its allocation fails (``RuntimeError`` from PyTorch,
``MemoryError`` from Python and NumPy). The trusted side then judges the call's outputs: a run that
forges its report cannot make outputs it could not compute under the cap.

There is no ``/proc`` in a run, so what it holds is found by asking the kernel: a soft limit is
lowered step by step (a binary search) until a one-page private mapping is refused.
"""

from __future__ import annotations

import mmap
import resource

AS_MARGIN = 64 * 2**20
"""Address space beyond ``extra`` for what reserves without using (a thread's guard pages, say)."""
FILES = 64
"""Descriptors a capped run may hold: enough for what Python and PyTorch open."""


def _fits(kind: int, limit: int, prot: int) -> bool:
    soft, hard = resource.getrlimit(kind)
    resource.setrlimit(kind, (limit, hard))
    try:
        mapping = mmap.mmap(-1, mmap.PAGESIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=prot)
    except OSError:
        return False
    finally:
        resource.setrlimit(kind, (soft, hard))
    mapping.close()
    return True


def in_use(kind: int, prot: int) -> int:
    """What this process holds of ``kind`` (``RLIMIT_DATA`` with a writable page, ``RLIMIT_AS``
    with a read-only one), to the page, as the kernel counts it for that limit."""
    low, high = 0, resource.getrlimit(kind)[1]
    if high == resource.RLIM_INFINITY:
        high = 1 << 47
    while high - low > mmap.PAGESIZE:
        middle = (low + high) // 2
        if _fits(kind, middle, prot):
            high = middle
        else:
            low = middle
    return high - mmap.PAGESIZE


def cap(extra: int) -> None:
    """From now on this process (and anything it starts) may hold ``extra`` bytes more than now."""
    data = in_use(resource.RLIMIT_DATA, mmap.PROT_READ | mmap.PROT_WRITE) + extra
    space = in_use(resource.RLIMIT_AS, mmap.PROT_READ) + extra + AS_MARGIN
    for kind, value in ((resource.RLIMIT_DATA, data), (resource.RLIMIT_AS, space), (resource.RLIMIT_FSIZE, 0),
                        (resource.RLIMIT_NOFILE, FILES)):
        hard = resource.getrlimit(kind)[1]
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(kind, (value, value))
