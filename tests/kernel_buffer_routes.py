"""Each way a process could make the kernel hold bytes for it through a descriptor or a tmpfs name,
tried for :data:`TARGET` bytes and read back (``tests/test_cap_kernel_buffers.py`` tries them under
the memory cap). Every route closes what it made, so that the next one starts with the same
descriptors free."""

import errno
import fcntl
import os
import socket
import tempfile

MiB = 2**20
TARGET = 24 * MiB
"""What each route tries to hold: with the rest of a 64 MiB stripe of scores, more than the cap's 48 MiB."""
CHUNK = bytes(range(256)) * 4096
"""1 MiB of bytes that are not all alike."""
MADE: list = []
"""What the route being tried made: descriptors, sockets and paths, closed or removed after it."""


def _fill(write, read, count: int) -> int:
    """Writes up to :data:`TARGET` bytes through ``count`` channels, without blocking, and reads them
    all back: the bytes the kernel held."""
    held = 0
    for i in range(count):
        while held < TARGET:
            try:
                written = write(i, CHUNK[:TARGET - held])
            except BlockingIOError:
                break
            held += written
    back = sum(len(got) for i in range(count) for got in iter(lambda i=i: _read(read, i), b""))
    assert back == held, (back, held)
    return held


def _read(read, i: int) -> bytes:
    try:
        return read(i)
    except BlockingIOError:
        return b""


def _many(make, limit: int) -> list:
    """Up to ``limit`` of what ``make`` makes, until the process runs out of descriptors."""
    made = []
    for _ in range(limit):
        try:
            made.append(make())
        except OSError as error:
            if error.errno != errno.EMFILE:
                raise
            break
        MADE.extend(made[-1])
    return made


def pipes(make, grow: bool) -> int:
    ends = _many(make, 30)
    for read_end, write_end in ends:
        os.set_blocking(read_end, False)
        os.set_blocking(write_end, False)
        if grow:
            fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, MiB)
    return _fill(lambda i, data: os.write(ends[i][1], data), lambda i: os.read(ends[i][0], MiB), len(ends))


def sockets(make) -> int:
    return _fill_pairs(_many(make, 15))


def _fill_pairs(pairs: list) -> int:
    for pair in pairs:
        for end in pair:
            end.setblocking(False)
            end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 * MiB)
            end.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 * MiB)
    return _fill(lambda i, data: pairs[i][0].send(data), lambda i: pairs[i][1].recv(MiB), len(pairs))


def raw_socketpair() -> int:
    import _socket
    return sockets(_socket.socketpair)


def one_socket() -> int:
    MADE.append(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
    return 0


def fifos(folder: str) -> int:
    def fifo():
        path = os.path.join(folder, f"fifo-{os.getpid()}-{len(MADE)}")
        os.mkfifo(path)
        try:
            return (os.open(path, os.O_RDWR | os.O_NONBLOCK),)
        finally:
            os.unlink(path)
    ends = [fd for (fd,) in _many(fifo, 30)]
    for fd in ends:
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, MiB)
    return _fill(lambda i, data: os.write(ends[i], data), lambda i: os.read(ends[i], MiB), len(ends))


def _written(fd: int) -> int:
    MADE.append(fd)
    os.write(fd, CHUNK)
    return len(os.pread(fd, MiB, 0))


def tmpfs_file(folder: str) -> int:
    fd, path = tempfile.mkstemp(dir=folder)
    os.unlink(path)
    return _written(fd)


def symlinks(folder: str) -> int:
    base = tempfile.mkdtemp(dir=folder)
    MADE.append(base)
    body, held = "x" * 4000, 0
    while held < TARGET:
        os.symlink(body, os.path.join(base, str(held)))
        held += len(body)
    assert all(os.readlink(os.path.join(base, name)) == body for name in os.listdir(base))
    return held


def xattrs(folder: str) -> int:
    base, held = tempfile.mkdtemp(dir=folder), 0
    MADE.append(base)
    while held < TARGET:
        path = os.path.join(base, str(held))
        open(path, "x").close()
        os.setxattr(path, "user.held", CHUNK[:60000])
        held += len(os.getxattr(path, "user.held"))
    return held


def eventfd() -> int:
    fd = os.eventfd(0)
    MADE.append(fd)
    os.eventfd_write(fd, 7)
    return 8 * (os.eventfd_read(fd) == 7)


def pty() -> int:
    """What a pseudo-terminal's master takes before it blocks (canonical mode: not read back)."""
    [(master, _)], held = _many(os.openpty, 1), 0
    os.set_blocking(master, False)
    while True:
        try:
            held += os.write(master, CHUNK[:4096])
        except BlockingIOError:
            return held


def inherited(read_end: int, write_end: int) -> int:
    """A pipe the process inherited with both of its ends (as ipykernel holds its output's)."""
    copy = os.dup(write_end)
    MADE.append(copy)
    os.set_blocking(read_end, False)
    os.set_blocking(copy, False)
    fcntl.fcntl(copy, fcntl.F_SETPIPE_SZ, MiB)
    return _fill(lambda i, data: os.write(copy, data), lambda i: os.read(read_end, MiB), 1)


def inherited_sockets(pair: tuple) -> int:
    """A pair of sockets the process inherited with both ends (as asyncio's event loop holds one)."""
    return _fill_pairs([pair])


ROUTES = {
    "pipes grown": lambda: pipes(os.pipe, True),
    "pipe2 grown": lambda: pipes(lambda: os.pipe2(0), True),
    "pipes": lambda: pipes(os.pipe, False),
    "socketpair": lambda: sockets(socket.socketpair),
    "_socket.socketpair": raw_socketpair,
    "a socket": one_socket,
    "fifos in /tmp": lambda: fifos("/tmp"),
    "a memfd": lambda: _written(os.memfd_create("held")),
    "a file in /tmp": lambda: tmpfs_file("/tmp"),
    "a file in /dev/shm": lambda: tmpfs_file("/dev/shm"),
    "symbolic links in /dev/shm": lambda: symlinks("/dev/shm"),
    "extended attributes in /dev/shm": lambda: xattrs("/dev/shm"),
    "an eventfd": eventfd,
    "a pseudo-terminal": pty,
}
"""Each route by name: the bytes it held and read back."""


def _clean() -> None:
    for made in MADE:
        if isinstance(made, int):
            os.close(made)
        elif isinstance(made, str):
            for name in os.listdir(made):
                os.unlink(os.path.join(made, name))
            os.rmdir(made)
        else:
            made.close()
    MADE.clear()


def outcomes(routes: dict) -> dict[str, str]:
    """Each route's outcome: ``held <bytes>``, or the error it raised (its type, and for an
    ``OSError`` its errno's name)."""
    got = {}
    for label, route in routes.items():
        try:
            got[label] = f"held {route()}"
        except OSError as error:
            got[label] = f"{type(error).__name__} {errno.errorcode.get(error.errno, '')}".rstrip()
        finally:
            _clean()
    return got
