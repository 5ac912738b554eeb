"""No file that a run can read names where the course lives on the host (issue 45): not the course
folder, the grader's environment, its base interpreter, nor the worker's folders.

A student's cell walks the whole filesystem of its run (all but /proc and /sys, which a run does
not have, and device files) and reads every byte of every file it may read, the system folders
included. The paths it looks for travel in hex, since its own plan is a file it can read. The
course folder with nothing after it (a ``direct_url.json``'s URL, an editable install's path file)
is looked for as a whole name (``/tmp/x`` in ``/tmp/x"``, not in ``/tmp/xxx``, which the standard
library's ``imaplib`` holds), and outside the system folders only: the host's packages name
``/tmp/x`` by chance (groff's macros, Perl's documentation), and those folders are bound as they
are, so they cannot name the course. A file planted among the run's inputs, naming the course, is
the control: the walk finds it, so an empty list means none.
"""

import os
import sys
from pathlib import Path

from test_warm_sandbox import worker  # noqa: F401 (the fixture)
from warm_runs import plan, printed

from autograder.running.sandbox.environment import SYSTEM_PATHS, in_system_folder

REPO = Path(__file__).resolve().parents[1]

SCAN = """
import os, re, stat, time
everywhere, bare = [[bytes.fromhex(h) for h in hexes] for hexes in ({everywhere!r}, {bare!r})]
system = {system!r}
found, read, start = [], {{}}, time.monotonic()


def names(path, data):
    if any(needle in data for needle in everywhere):
        return True
    return not path.startswith(system) and any(needle in data and re.search(re.escape(needle) + rb"(?![\\w.-])", data)
                                               for needle in bare)


def scan(path):
    top = "/" + path.split("/")[1]
    files, size = read.get(top, (0, 0))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return  # a file this run may not read shows it nothing
    with open(fd, "rb") as f:
        tail = b""
        while chunk := f.read(1 << 24):
            size += len(chunk)
            if names(path, tail + chunk):
                found.append(path)
                break
            tail = chunk[-512:]
    read[top] = (files + 1, size)


for folder, dirs, files in os.walk("/"):
    if folder == "/":
        dirs[:] = [name for name in dirs if name not in ("proc", "sys")]
    for name in dirs + files:
        path = os.path.join(folder, name)
        mode = os.lstat(path).st_mode
        if names(path, os.fsencode(path)) or stat.S_ISLNK(mode) and names(path, os.fsencode(os.readlink(path))):
            found.append(path)
        elif stat.S_ISREG(mode):
            scan(path)
print("FOUND", found)
print("READ", read)
print("SECONDS", round(time.monotonic() - start, 1))
"""


def host_paths(worker) -> tuple[list[str], list[str]]:
    """The paths looked for everywhere, and the course folder's bare name (outside the system folders)."""
    folders = {sys.prefix, str(worker.root)} | ({sys.base_prefix} if not in_system_folder(sys.base_prefix) else set())
    everywhere = {path for folder in folders for path in (folder, os.path.realpath(folder))}
    course = {str(REPO), os.path.realpath(REPO)}
    return sorted(everywhere | {path + "/" for path in course}), sorted(course)


def test_no_file_a_run_can_read_names_a_folder_of_the_host(worker):
    everywhere, bare = host_paths(worker)
    (worker.inputs / "planted.txt").write_text(f"the control: {REPO}\n")
    (worker.inputs / "planted.txt").chmod(0o644)
    cell = SCAN.format(everywhere=[os.fsencode(p).hex() for p in everywhere], bare=[os.fsencode(p).hex() for p in bare],
                       system=SYSTEM_PATHS)
    reply, read = worker.run(plan(cell), {}, 400, None)
    assert any(event["event"] == "done" for event in worker.events(read)), reply.output
    print(f"scanned {printed(reply.output, 'READ')} in {printed(reply.output, 'SECONDS')} s")
    assert printed(reply.output, "FOUND") == ["/grader/in/planted.txt"], reply.output
