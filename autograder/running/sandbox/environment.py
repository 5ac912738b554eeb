"""The grader's environment as the sandbox shows it: a copy of the virtual environment, and of the
base interpreter where that is not in a system folder, that names nothing of the host, for
:mod:`~autograder.running.sandbox.confine` to bind read-only at fixed paths (:data:`VENV`, :data:`INTERPRETER`).

Why
---
Student code reads whatever the sandbox shows it. Bound as they are, the environment's files would
tell a student where the course lives on the host: ``pyvenv.cfg``, the scripts' shebang lines and
``bin/activate`` name the environment's folder (``make`` puts it in the course folder), every
``.pyc`` records its source's path, and the base interpreter's prefix (pyenv's, under ``/root``)
comes with everything else installed there. The host's layout is what an attack that reaches out of
the sandbox, or at the course's files, needs first; the sandbox need not teach it.

The copy
--------
Built once and kept in ``<sys.prefix>/.sandbox/<key>``: the key changes when the environment does (a
``pip install`` changes its ``site-packages`` and ``bin``), when the interpreter does, or when this
module does. It is built in a temporary folder and renamed, under a lock, since pytest-xdist's and
the grader's workers ask for it at once; a new copy removes the older ones. Each file of the copy:

* names no host path (the environment's and the interpreter's folders, as given and resolved): a hard
  link (no disk, on the same filesystem; a copy elsewhere);
* a ``.pyc``: its code objects' file names and string constants get the fixed paths, its 16-byte
  header is kept, so that it stays valid for its unchanged source (on torch's 2,284 files this takes
  0.9 s, against 8.5 s to recompile them with ``compileall``'s ``stripdir``);
* an ELF file (the interpreter, libpython, the standard library's extension modules, with their
  ``RUNPATH``): each C string that names a host path is rewritten where it stands, NUL-terminated,
  so that no offset moves, with the old string's tail kept after it (see :meth:`_Swap.in_place`);
  where the fixed path is the longer, building fails;
* other text (``pyvenv.cfg``, scripts, ``_sysconfigdata``): the host paths replaced. A rewritten
  ``.py`` no longer matches its ``.pyc``, which Python then ignores (it compiles the module anew);
* left out: other binary files that name the host, anything that still does after its rewrite, and
  the records of where packages came from (an editable install's finder and path file, which name
  the course's folder, and ``direct_url.json``).

Of a base interpreter, only what Python needs comes along: its ``python`` executables, libpython, and
the standard library without its test suite, its build files (``config-*``) and, unless it is on
``sys.path`` (no virtual environment), its ``site-packages``. A base interpreter in a system folder
(Debian's ``/usr``, the TA container's ``/usr/local``) is bound as it is, with the system.

Still not hidden
----------------
The system folders, bound as they are: the host's distribution, its packages, their versions. The
machine: kernel, CPUs, memory. The packages of the grader's environment (students know the
requirements anyway). And where a sandbox has ``/proc`` (a one-shot command and the warm server; a
run has none), ``/proc/self/mountinfo`` names the host folder of every bind, this copy's among them.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import marshal
import os
import re
import shutil
import sys
import sysconfig
import tempfile
import types
from dataclasses import dataclass
from pathlib import Path

VENV = "/grader/python"
"""Where a sandbox shows the grader's virtual environment."""
INTERPRETER = "/grader/interpreter"
"""Where a sandbox shows the base interpreter, when that is not in a system folder."""
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
"""Folders every sandbox shows as they are: an interpreter in one needs no copy."""

_BUILDER = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
"""Part of the key: a change to how the copy is made makes a new one."""
_CHUNK = 1 << 24


@dataclass(frozen=True)
class _Part:
    """One host folder, copied to be shown at ``fixed``: the paths under it that are ``include``-d
    (with the folders that lead to them), less those under ``exclude``."""

    host: str
    fixed: str
    include: tuple[str, ...]
    exclude: tuple[str, ...]


def in_system_folder(path: str) -> bool:
    """Whether ``path`` lies in a folder that every sandbox shows as it is."""
    return any(path == folder or path.startswith(folder + "/") for folder in SYSTEM_PATHS)


def _parts() -> list[_Part]:
    """What the sandbox shows away from its host path: the virtual environment, without this
    module's copies, and a base interpreter that is not in a system folder."""
    parts = []
    if sys.prefix != sys.base_prefix:
        names = tuple(sorted(set(os.listdir(sys.prefix)) - {".sandbox"}))
        parts.append(_Part(sys.prefix, VENV, names, ()))
    if not in_system_folder(os.path.realpath(sys.base_prefix)):
        parts.append(_interpreter())
    return parts


def _interpreter() -> _Part:
    """The base interpreter's executables, libpython and standard library, as the module docstring says."""
    base, version = sys.base_prefix, f"python{sys.version_info.major}.{sys.version_info.minor}"
    stdlib = os.path.relpath(sysconfig.get_path("stdlib"), base)
    libdir = os.path.relpath(sysconfig.get_config_var("LIBDIR") or os.path.join(base, "lib"), base)
    include = [f"bin/{name}" for name in ("python", "python3", version) if os.path.lexists(f"{base}/bin/{name}")]
    if os.path.isdir(os.path.join(base, libdir)):
        include += [f"{libdir}/{name}" for name in os.listdir(os.path.join(base, libdir))
                    if name.startswith("libpython") and ".so" in name]
    exclude = [f"{stdlib}/test", os.path.relpath(sysconfig.get_config_var("LIBPL") or f"{base}/{stdlib}/config", base)]
    site = os.path.join(base, stdlib, "site-packages")
    if site not in sys.path and os.path.realpath(site) not in sys.path:
        exclude.append(f"{stdlib}/site-packages")
    return _Part(base, INTERPRETER, (*include, stdlib), tuple(exclude))


def sandbox_path(path: str) -> str:
    """``path`` (of the environment or the interpreter) as the sandbox shows it."""
    return os.fsdecode(_Swap(_parts()).rewrite(os.fsencode(path)))


def prepared() -> list[tuple[str, str]]:
    """Where the copy of each part lies on the host, and where the sandbox shows it; built first
    when it is missing."""
    parts = _parts()
    if not parts:
        return []
    root = os.path.join(sys.prefix, ".sandbox")
    built = os.path.join(root, _key(parts))
    if not os.path.isdir(built):
        if not os.access(root if os.path.isdir(root) else sys.prefix, os.W_OK):
            raise PermissionError(f"The sandbox's copy of the grader's environment ({built}) is missing, and this "
                                  f"user may not make it. Make it once as the environment's owner: {sys.executable} "
                                  f"-c 'from autograder.running.sandbox.environment import prepared; prepared()'")
        _build(parts, root, built)
    return [(os.path.join(built, os.path.basename(part.fixed)), part.fixed) for part in parts]


def _key(parts: list[_Part]) -> str:
    """Names the copy of the environment as it is now: what is copied, this module, the interpreter,
    ``pyvenv.cfg``, and what is installed (the names of the installed packages' folders, which
    carry their versions: a ``pip install`` changes them). Nothing of a folder's own stat: a container
    image's layers give folders other inodes, sizes and times than they had when the image was
    built, and the copy built into the image must still be the one its runs find."""
    digest = hashlib.sha256(repr((_BUILDER, sys.version, parts)).encode())
    for path in (os.path.realpath(sys.executable), os.path.join(sys.prefix, "pyvenv.cfg")):
        try:
            digest.update(f"{path} {os.stat(path).st_size}\n".encode() + Path(path).read_bytes()[:4096])
        except FileNotFoundError:
            digest.update(f"{path} missing\n".encode())
    for folder in sorted({sysconfig.get_path(name) for name in ("purelib", "platlib")}):
        names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
        digest.update(f"{folder} {names}\n".encode())
    return digest.hexdigest()[:20]


def _build(parts: list[_Part], root: str, built: str) -> None:
    """Makes the copy at ``built``, unless another process made it while this one waited."""
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if os.path.isdir(built):
            return
        for name in set(os.listdir(root)) - {"lock"}:  # older copies, and builds that failed halfway
            shutil.rmtree(os.path.join(root, name))
        temp = tempfile.mkdtemp(prefix="building-", dir=root)
        os.chmod(temp, 0o755)
        swap = _Swap(parts)
        for part in parts:
            _copy(part, os.path.join(temp, os.path.basename(part.fixed)), swap)
        os.rename(temp, built)


class _Swap:
    """The host paths of the parts (as given and resolved) and their fixed paths: what names the
    host, and how it is rewritten."""

    def __init__(self, parts: list[_Part]):
        self.fixed = {os.fsencode(path): part.fixed.encode() for part in parts
                      for path in (part.host, os.path.realpath(part.host))}
        self.pattern = re.compile(b"|".join(re.escape(host) for host in sorted(self.fixed, key=len, reverse=True)))
        self.text = re.compile(os.fsdecode(self.pattern.pattern))
        self.fixed_text = {os.fsdecode(host): os.fsdecode(fixed) for host, fixed in self.fixed.items()}
        self.hosts, self.texts = list(self.fixed_text), {}

    def names(self, data: bytes) -> bool:
        return any(host in data for host in self.fixed)

    def rewrite(self, data: bytes) -> bytes:
        return self.pattern.sub(lambda match: self.fixed[match.group()], data) if self.fixed else data

    def rewrite_text(self, text: str) -> str:
        """``text`` with the fixed paths; remembered, since every code object of a file has its name."""
        if text not in self.texts:
            named = any(host in text for host in self.hosts)
            self.texts[text] = self.text.sub(lambda match: self.fixed_text[match.group()], text) if named else text
        return self.texts[text]

    def in_place(self, data: bytes, name: str) -> bytes:
        """``data`` (machine code) with each C string that names a host path rewritten where it
        stands: the new string, its NUL, then the old string's last bytes as they were, since the
        linker lets a string that ends another share its bytes (libpython's ``"3.11.7"`` is the
        end of pyenv's prefix)."""
        out, position = bytearray(data), 0
        while match := self.pattern.search(data, position):
            start = data.rfind(b"\0", 0, match.start()) + 1
            end = data.find(b"\0", match.end()) % (len(data) + 1)  # -1 (no NUL to the end): len(data)
            old = data[start:end]
            new = self.rewrite(old)
            if len(new) > len(old):
                raise ValueError(f"{name} names {os.fsdecode(old)} in machine code, where the sandbox's "
                                 f"{os.fsdecode(new)} does not fit; use an interpreter or environment whose "
                                 f"folder's path is at least as long as its fixed path, or a system one")
            tail = old[len(new) + 1:]
            out[start:end] = (new + b"\0" + (bytes(len(tail)) if self.names(tail) else tail))[:len(old)]
            position = end
        return bytes(out)


def _copy(part: _Part, dest: str, swap: _Swap) -> None:
    """``part``'s files at ``dest``, as the module docstring says."""
    os.mkdir(dest, 0o755)
    os.chmod(dest, 0o755)
    for folder, dirs, files in os.walk(part.host):
        rel = os.path.relpath(folder, part.host)
        dirs[:] = [name for name in dirs if _wanted(os.path.normpath(os.path.join(rel, name)), part)]
        for name in dirs + [name for name in files if _wanted(os.path.normpath(os.path.join(rel, name)), part)]:
            src, out = os.path.join(folder, name), os.path.join(dest, rel, name)
            if os.path.islink(src):
                os.symlink(os.fsdecode(swap.rewrite(os.fsencode(os.readlink(src)))), out)
            elif os.path.isdir(src):
                os.mkdir(out)
                os.chmod(out, os.stat(src).st_mode & 0o7777)
            else:
                _copy_file(src, out, swap)


def _wanted(rel: str, part: _Part) -> bool:
    """Whether the path ``rel`` of ``part`` goes into the copy (a folder also when it leads to one)."""
    def under(path, folders):
        return any(path == folder or path.startswith(folder + "/") for folder in folders)

    if under(rel, part.exclude) or _install_record(rel):
        return False
    return under(rel, part.include) or any(path.startswith(rel + "/") for path in part.include)


def _install_record(rel: str) -> bool:
    """Whether ``rel`` records where a package was installed from (see the module docstring)."""
    names = rel.split("/")
    if names[-1] == "direct_url.json":
        return len(names) > 1 and names[-2].endswith(".dist-info")
    return names[-1].startswith("__editable__") and "site-packages" in names[-3:-1]


def _copy_file(src: str, out: str, swap: _Swap) -> None:
    """One file: linked, rewritten or left out (see the module docstring)."""
    if not _names_host(src, swap):
        try:
            os.link(src, out)
        except OSError:  # another filesystem, or a file that this user may not link
            shutil.copy2(src, out)
        return
    data = Path(src).read_bytes()
    if src.endswith(".pyc"):
        new = _pyc(data, swap)
    elif data.startswith(b"\x7fELF"):
        new = swap.in_place(data, src)
    else:
        new = None if b"\0" in data else swap.rewrite(data)
    if new is None or swap.names(new):
        return
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with open(fd, "wb") as f:
        f.write(new)
    os.chmod(out, os.stat(src).st_mode & 0o7777)


def _names_host(path: str, swap: _Swap) -> bool:
    """Whether the file at ``path`` names a host path, read a chunk at a time (libtorch is large)."""
    overlap = max(map(len, swap.fixed))
    with open(path, "rb") as f:
        tail = b""
        while chunk := f.read(_CHUNK):
            if swap.names(tail + chunk):
                return True
            tail = chunk[-overlap:]
    return False


def _pyc(data: bytes, swap: _Swap) -> bytes | None:
    """A ``.pyc`` with its header kept and its code rewritten; None where this interpreter cannot read it."""
    if data[:4] != importlib.util.MAGIC_NUMBER:
        return None
    try:
        code = marshal.loads(memoryview(data)[16:])
    except (EOFError, ValueError, TypeError):
        return None
    new = data[:16] + marshal.dumps(_swapped(code, swap, False))
    return data[:16] + marshal.dumps(_swapped(code, swap, True)) if swap.names(new) else new


def _swapped(value, swap: _Swap, constants: bool):
    """``value`` (a code object or one of its constants) with the host paths in its file names, and
    with ``constants`` in its strings too, swapped for the fixed paths. File names alone are the
    fast way (about half the time), and enough for all but a few files (``_sysconfigdata``)."""
    if isinstance(value, types.CodeType):
        consts = tuple(_swapped(item, swap, constants) if constants or isinstance(item, types.CodeType) else item
                       for item in value.co_consts)
        return value.replace(co_filename=swap.rewrite_text(value.co_filename), co_consts=consts)
    if isinstance(value, str):
        return swap.rewrite_text(value)
    if isinstance(value, bytes):
        return swap.rewrite(value)
    if isinstance(value, (tuple, frozenset)):
        return type(value)(_swapped(item, swap, constants) for item in value)
    return value
