"""The allocator of capped runs (``kept_blocks.c``), built once per grading process with the host's
C compiler and loaded into each sandbox's server (``LD_PRELOAD``).

Why: the memory cap (:mod:`transformer_lm.sandboxed.memory_cap`) makes every block of 64 KiB or
more a mapping of its own, so that the kernel counts what is alive. glibc unmaps such a block when
it is freed and maps the next one afresh, page fault by page fault: at the capped checks' size a
tiled forward and backward spends two thirds of its time there (``docs/benchmarks.md``). The
allocator keeps a few MiB of freed blocks, counted by the kernel like any mapping, for the next
request of the same size, and gives them all back before any allocation would be refused, so the
cap refuses what it refused without it. The cap switches it on (``kept_blocks_enable``); until
then every call goes to glibc unchanged, and runs of other assignments never switch it on.

Without a C compiler (``cc``, or ``$CC``) grading is the same, only assignment 05 grades more
slowly: :func:`library` gives None and the sandbox starts as before. The TA's container has no
compiler; its image is built with one, which leaves the library beside this module (:func:`prebuild`).
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("kept_blocks.c")
NAME = "kept_blocks.so"
"""The library's file name, in a worker's input folder."""
PREBUILT = SOURCE.with_name(f"kept_blocks-{hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]}.so")
"""Where :func:`prebuild` leaves the library: its name changes with the source, so no stale one is used."""


def _compile(built: Path) -> bool:
    """Whether the host's C compiler built the library at ``built``."""
    compiler = shutil.which(os.environ.get("CC") or "cc")
    if compiler is None:
        return False
    command = [compiler, "-O2", "-shared", "-fPIC", "-o", str(built), str(SOURCE), "-ldl", "-lpthread"]
    if subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True).returncode != 0:
        return False
    built.chmod(0o644)
    return True


def _loads(built: Path) -> bool:
    """Whether a Python started with ``built`` preloaded finds its switch: a library in a folder
    mounted ``noexec`` (some hardened hosts mount ``/tmp`` so) is not loaded, and the dynamic loader
    says so on standard error, which a sandbox's output must not carry."""
    done = subprocess.run([sys.executable, "-I", "-S", "-c", "import ctypes; ctypes.CDLL(None).kept_blocks_enable"],
                          env={"LD_PRELOAD": str(built)}, stdin=subprocess.DEVNULL, capture_output=True)
    return done.returncode == 0 and not done.stderr


@functools.cache
def library() -> Path | None:
    """The library: the prebuilt one, else one built now (once per process); None where neither
    is there or loads."""
    if PREBUILT.is_file():
        return PREBUILT if _loads(PREBUILT) else None
    folder = Path(tempfile.mkdtemp(prefix="kept-blocks-"))
    atexit.register(shutil.rmtree, folder, True)
    return folder / NAME if _compile(folder / NAME) and _loads(folder / NAME) else None


def prebuild() -> None:
    """Builds the library beside its source, for an installation that has no compiler when it grades."""
    if not _compile(PREBUILT):
        raise SystemExit(f"The C compiler could not build {SOURCE} (is a C compiler installed? apt-get install gcc).")
