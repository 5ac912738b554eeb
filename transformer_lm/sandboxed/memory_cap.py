"""A memory cap that the kernel enforces and the run cannot raise: how assignment 05's memory is judged.

Before the first cell with student code, a run whose plan asks for it gets hard limits (a process
without ``CAP_SYS_RESOURCE`` may lower its limits, never raise them):

* ``RLIMIT_DATA``: what it holds now, plus ``extra`` bytes. Every private writable mapping counts:
  PyTorch's tensors and raw storages, NumPy's arrays, Python's objects, in any dtype (a complex
  tensor viewed as float32 included), made in a cell or in a call;
* ``RLIMIT_AS``: its address space now, plus ``extra`` and a margin for reservations
  (:data:`AS_MARGIN`), which bounds shared mappings, which ``RLIMIT_DATA`` does not count (a
  capped call makes none: :func:`refuse_uncounted`, and the runs' audit hook);
* ``RLIMIT_FSIZE`` of 0: no file (a tmpfs file, a ``memfd``) can hold data, since file pages
  count against neither limit; and ``RLIMIT_NOFILE`` of :data:`FILES`.

Neither limit counts what the kernel holds for the process in its own memory: a pipe's buffer
(64 KiB, 1 MiB grown with ``F_SETPIPE_SZ``), a socket's (up to ``net.core.wmem_max`` each way, 4
MiB where the tests ran), a symbolic link's target or an extended attribute in a tmpfs. Before
they were refused, 24 pipes parked 24 MiB of a 64 MiB row of scores, and the rest fitted. So a
capped call makes none of them (:data:`KERNEL_HELD_EVENTS`, :data:`GROW_PIPE`,
:data:`KERNEL_HELD_FUNCTIONS`: the grader's runs refuse them in their hook,
:func:`refuse_uncounted` in the visible check's child, which keeps no descriptor of the kernel's
but its standard ones). What is left is bounded so that it cannot matter: a pseudo-terminal
opened by its path holds a few tens of KiB, and a tmpfs's file names 255 bytes each, at most 4096
of them in a grading run's (its inode limit).

A tiled pass fits in ``extra`` with room; the whole score matrix at the check's size, in any
container, does not, many times over, and its allocation fails (``RuntimeError`` from PyTorch,
``MemoryError`` from Python and NumPy). The trusted side then judges the call's outputs: a run that
forges its report cannot make outputs it could not compute under the cap.

There is no ``/proc`` in a run, so what it holds is found by asking the kernel: a soft limit is
lowered step by step (a binary search) until a one-page private mapping is refused.

The kernel counts what the allocator has mapped, not what is alive, so the allocator is set to give
back what is freed: glibc's malloc otherwise serves blocks of 128 KiB and more from its heap once one
was freed, and a heap whose freed tiles lie between small results still alive (a list of each
tile's row maxima) grows by a tile each time. With blocks of :data:`OWN_MAPPING_BYTES` or more each
in a mapping of its own, unmapped when freed, the heap holds only small objects, and an honest tiled
pass holds what it uses (measured in ``tests/test_absence_and_cap.py``). Each such block is then
faulted in afresh, page by page; in the grader's runs an allocator of its own keeps a few freed
ones for reuse, counted by the kernel, and gives them back before any allocation would fail
(``autograder/running/kept_blocks.c``; the student's kit has none, and caps the same).
"""

from __future__ import annotations

import ctypes
import fcntl
import importlib
import mmap
import resource
import sys

AS_MARGIN = 64 * 2**20
"""Address space beyond ``extra`` for what reserves without using (a thread's guard pages, say)."""
FILES = 64
"""Descriptors a capped run may hold: enough for what Python and PyTorch open."""
OWN_MAPPING_BYTES = 64 * 2**10
"""Blocks of this size and more get a mapping of their own, given back when freed."""
KEPT_BYTES = 8 * 2**20
"""Freed large blocks the grader's allocator keeps, at most (they count against the cap until given back)."""
M_MMAP_THRESHOLD, M_MMAP_MAX = -3, -4
"""glibc's ``mallopt`` parameters (malloc.h); setting the threshold also stops glibc from raising it
by itself."""
MMAP_MAX_DEFAULT = 65536
"""glibc's own ``M_MMAP_MAX``."""
FILL_LARGEST, FILL_SMALLEST = 32 * 2**20, 4 * 2**10
"""The blocks that :func:`_fill_free_heap` takes, from the largest to the smallest."""


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                    "fsmblks", "uordblks", "fordblks", "keepcost")]
PROCESS_EVENTS = frozenset({"os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec", "os.system",
                            "subprocess.Popen", "pty.spawn"})
"""Audit events that start a process. A capped run starts none: each process would get a cap of its
own, and together they could hold what one may not."""
MAPPING_EVENTS = frozenset({"mmap.__new__"})
"""Audit events that map memory. A shared mapping counts against ``RLIMIT_AS`` only, whose margin
(:data:`AS_MARGIN`) would hold a row of a query block's scores at the capped checks' size; a
capped call maps none, as a grading run maps none."""
KERNEL_HELD_EVENTS = frozenset({"socket.__new__", "os.symlink", "os.setxattr"})
"""Audit events that make the kernel hold bytes for the process that none of its limits counts: a
socket's buffers (up to ``net.core.wmem_max`` each way: 4 MiB where the tests ran), a symbolic
link's target (a page of a tmpfs each) and an extended attribute (64 KiB each). Each held 24 MiB
beside a capped call before it was refused (``tests/test_cap_kernel_buffers.py``)."""
GROW_PIPE = ("fcntl.fcntl", fcntl.F_SETPIPE_SZ)
"""The audit event and command that grow a pipe, to 1 MiB (``fs.pipe-max-size``): refused for every
pipe a capped run holds, its own and those it inherited (where it holds one end, which parks
nothing it could read back)."""
KERNEL_HELD_FUNCTIONS = {"posix": ("pipe", "pipe2", "mkfifo", "mknod", "memfd_create", "eventfd", "openpty"),
                         "_socket": ("socketpair",)}
"""What makes a descriptor whose buffer the kernel holds, with no audit event: a pipe or fifo (64
KiB, and 1 MiB grown), a pair of sockets, a ``memfd`` (which holds nothing while ``RLIMIT_FSIZE`` is
0), an ``eventfd`` and a pseudo-terminal (a few tens of KiB). A capped call has no use for any of them: it
talks to no other process. ``os`` takes them from ``posix``; ``socket.socketpair`` calls
``_socket``'s."""
KERNEL_HELD = "a call under the memory cap makes no pipe, fifo, socket, symbolic link or extended attribute and grows "\
    "no pipe ({}): the kernel would hold their bytes outside the cap"
"""Why such a call is refused."""


def _fill_free_heap(libc) -> None:
    """Takes for good every free block of malloc's heap, never touching it (so it costs no memory):
    space the process mapped before the cap, and freed since, could otherwise serve an allocation
    after it that the cap never counts. A kernel that ran a benchmark before a visible check holds
    hundreds of MiB of such space. Taken from the heap only: a block that made the heap grow is given
    back, and the next is half its size. (An allocator without ``mallinfo2`` is left as it is.)"""
    mallinfo2 = getattr(libc, "mallinfo2", None)
    if mallinfo2 is None:
        return
    mallinfo2.restype = _MallInfo2
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.mallopt(M_MMAP_MAX, 0)   # meanwhile every block comes from the heap
    size = FILL_LARGEST
    while size >= FILL_SMALLEST:
        grown = mallinfo2().arena
        block = libc.malloc(size)
        if not block or mallinfo2().arena != grown:
            libc.free(block)
            size //= 2
    libc.mallopt(M_MMAP_MAX, MMAP_MAX_DEFAULT)


def _unmap_when_freed() -> None:
    """Makes glibc's malloc take no free space mapped before the cap, and map each block of
    :data:`OWN_MAPPING_BYTES` or more on its own (an allocator without ``mallopt`` is left as it is).
    Where the grader's sandbox loaded its allocator of large blocks (``autograder/running/kept_blocks.c``),
    that allocator serves them instead, a mapping each, and keeps up to :data:`KEPT_BYTES` of freed
    ones for reuse, which the kernel counts, and which it gives back before any allocation fails."""
    libc = ctypes.CDLL(None)
    if getattr(libc, "mallopt", None) is not None:
        _fill_free_heap(libc)
        libc.mallopt(M_MMAP_THRESHOLD, OWN_MAPPING_BYTES)
    enable = getattr(libc, "kept_blocks_enable", None)
    if enable is not None:
        enable.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
        enable(OWN_MAPPING_BYTES, KEPT_BYTES)


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


def refusal(name: str, why: str):
    """A function that raises ``PermissionError`` with ``why``, formatted with ``name``: what stands
    in for a refused function."""
    def refused(*args, **kwargs):
        raise PermissionError(why.format(name))

    return refused


def stand_ins(functions: dict[str, tuple[str, ...]], why: str, find) -> dict[int, tuple[object, object]]:
    """Each of ``functions`` (module name -> names) that the module ``find(name)`` gives has, by id:
    (it, a refusal that says ``why``), for :func:`replace_in`."""
    found = {}
    for module, names in functions.items():
        for name in names:
            original = getattr(find(module), name, None)
            if original is not None:
                found[id(original)] = (original, refusal(f"{module}.{name}", why))
    return found


def kernel_held_stand_ins() -> dict[int, tuple[object, object]]:
    """Each function of :data:`KERNEL_HELD_FUNCTIONS` this Python has, by id: (it, its refusal). Their
    modules are imported if need be: one loaded later would bring its functions back."""
    return stand_ins(KERNEL_HELD_FUNCTIONS, KERNEL_HELD, importlib.import_module)


def replace_in(modules, found: dict[int, tuple[object, object]]) -> None:
    """Each of ``modules``' names for an ``original`` of ``found`` (by id: original, replacement)
    points at its replacement from now on."""
    for module in modules:
        space = getattr(module, "__dict__", None)
        if isinstance(space, dict):
            for name, value in list(space.items()):
                if id(value) in found and value is found[id(value)][0]:
                    space[name] = found[id(value)][1]


def refuse_uncounted() -> None:
    """From now on, starting a process or mapping memory (any of :data:`PROCESS_EVENTS` and
    :data:`MAPPING_EVENTS`), making what the kernel holds bytes in (:data:`KERNEL_HELD_EVENTS`,
    :data:`GROW_PIPE`, :data:`KERNEL_HELD_FUNCTIONS`, replaced wherever a loaded module holds them),
    or calling C through ``ctypes`` (which could make any of them) raises ``PermissionError`` (an
    audit hook, which no code can remove). The grader's runs refuse them in their own hook, and end
    a run that uses ``ctypes``."""
    refused, held, (grow, size_command) = PROCESS_EVENTS | MAPPING_EVENTS, KERNEL_HELD_EVENTS, GROW_PIPE

    def refuse(event: str, args) -> None:
        if event in refused or event.startswith("ctypes."):
            raise PermissionError(f"a call under the memory cap starts no process, maps no memory and calls no C "
                                  f"({event}): what it holds would escape the cap")
        if event in held or (event == grow and args[1] == size_command):
            raise PermissionError(KERNEL_HELD.format(event))
    replace_in(list(sys.modules.values()), kernel_held_stand_ins())
    sys.addaudithook(refuse)


def cap(extra: int) -> None:
    """From now on this process (and anything it starts) may hold ``extra`` bytes more than now."""
    _unmap_when_freed()
    data = in_use(resource.RLIMIT_DATA, mmap.PROT_READ | mmap.PROT_WRITE) + extra
    space = in_use(resource.RLIMIT_AS, mmap.PROT_READ) + extra + AS_MARGIN
    for kind, value in ((resource.RLIMIT_DATA, data), (resource.RLIMIT_AS, space), (resource.RLIMIT_FSIZE, 0),
                        (resource.RLIMIT_NOFILE, FILES)):
        hard = resource.getrlimit(kind)[1]
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(kind, (value, value))
