"""A course folder in nbgrader's layout and what it holds for grading: the release notebooks, the
submissions, the hidden checks and their version, and the secret that seeds hidden inputs."""

from __future__ import annotations

import contextlib
import difflib
import fcntl
import hashlib
import importlib.util
import json
import os
import secrets
import shutil
import socket
import sys
import time
from pathlib import Path
from types import ModuleType

import torch

import transformer_lm
from autograder.reading.config import Autograder, load_settings
from autograder.reading.course_folder import named
from autograder.reading.errors import GradingError
from autograder.reading.spec import Item

RECEIPTS = ("timestamp.txt", "submission_secret.txt")
COURSE_CODE = Path(transformer_lm.__file__).resolve().parent
"""The course's package as the grader imports it: its reference, concepts and mistakes decide grades."""


class Course:
    """A course folder in nbgrader's layout: source/, release/, submitted/, autograded/,
    feedback/, gradebook.db, plus reports/ and the grader's private state in .grading/, and the
    grader's settings from its ``nbgrader_config.py`` (:mod:`autograder.reading.config`)."""

    def __init__(self, root: Path, settings: Autograder | None = None):
        self.root = Path(root).resolve()
        self.settings = settings or load_settings(self.root)

    def release_notebooks(self, assignment: str) -> dict[str, Path]:
        folder = self.root / "release" / assignment
        notebooks = {p.stem: p for p in sorted(folder.glob("*.ipynb"))}
        if not notebooks:
            raise GradingError(f"No release notebooks in {folder}. Generate them first: "
                             f"nbgrader generate_assignment {assignment}")
        return notebooks

    def submission_folder(self, assignment: str, student: str) -> Path:
        return self.root / "submitted" / student / assignment

    def copy_receipts(self, assignment: str, student: str, folder: Path) -> None:
        """Copies the files nbgrader's exchange adds to a submission into ``folder``: its time
        (late penalties) and the secret that ``release_feedback`` files the feedback under."""
        for name in RECEIPTS:
            receipt = self.submission_folder(assignment, student) / name
            if receipt.is_file() and not receipt.is_symlink():
                (folder / name).write_bytes(receipt.read_bytes()[:4096])

    def assignments(self) -> list[str]:
        """The assignments this course knows: folders of ``source/``, ``release/`` and ``reports/``, and
        hidden checks."""
        names = {p.name for folder in ("source", "release", "reports") for p in (self.root / folder).glob("*")
                 if p.is_dir()}
        names |= {p.stem for p in self.checks_file("any").parent.glob("*.py") if p.stem[:1].isdigit()}
        return sorted(names)

    def require(self, assignment: str) -> None:
        """Raises :class:`GradingError` unless this is a course folder that has ``assignment``,
        naming what was expected and the closest names."""
        if not (self.root / "nbgrader_config.py").exists():
            raise GradingError(f"{named(self.root)} is not a course folder: it has no nbgrader_config.py. Run this "
                               "in the course folder, or pass --course DIR.")
        known = self.assignments()
        if assignment not in known:
            close = difflib.get_close_matches(assignment, known, n=3, cutoff=0.5)
            hint = f" Did you mean {' or '.join(close)}?" if close else ""
            raise GradingError(f"The course in {self.root} has no assignment {assignment!r}.{hint} "
                               f"Its assignments: {', '.join(known) or 'none yet'}.")

    @contextlib.contextmanager
    def grading_lock(self, assignment: str, shard: tuple[int, int] | None = None):
        """Held while a run grades ``assignment`` (a shard, its own slice): a second run at the same
        time would write the same reports and gradebook rows, so it refuses, saying which run holds it."""
        folder = self.root / ".grading"
        folder.mkdir(parents=True, exist_ok=True)
        name = f"{assignment}.lock" if shard is None else f"{assignment}.shard-{shard[0]}-of-{shard[1]}.lock"
        with open(folder / name, "a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                holder = handle.read().strip() or "another process"
                raise GradingError(f"Another run is grading {assignment} in this course ({holder}). Wait for it to "
                                   f"finish, then run this again.") from None
            handle.seek(0)
            handle.truncate()
            handle.write(f"pid {os.getpid()} on {socket.gethostname()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}")
            handle.flush()
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def students(self, assignment: str) -> list[str]:
        base = self.root / "submitted"
        return sorted(p.name for p in base.iterdir() if (p / assignment).is_dir()) if base.is_dir() else []

    def secret(self) -> bytes:
        """The secret seed of hidden inputs: made once, kept out of every release, so that
        grades repeat run after run."""
        path = self.root / ".grading" / "secret"
        if not path.exists():
            # Shards on several machines may start at once: the first link wins, and everyone
            # reads the secret it wrote in full.
            path.parent.mkdir(parents=True, exist_ok=True)
            draft = path.with_name(f"secret.{secrets.token_hex(8)}")
            draft.write_text(secrets.token_hex(32))
            draft.chmod(0o600)
            with contextlib.suppress(FileExistsError):
                os.link(draft, path)
            draft.unlink()
        return path.read_text().strip().encode()

    def reports(self, assignment: str) -> Path:
        return self.root / "reports" / assignment

    def checks_file(self, assignment: str) -> Path:
        """The hidden checks of ``assignment``, kept in the course folder, so that a course adds
        an assignment without rebuilding the grader's container."""
        return self.root / self.settings.checks_dir / f"{assignment}.py"

    def stand_ins_file(self, assignment: str) -> Path:
        """The course's own code of ``assignment`` in its API, which stands in for a wrong
        earlier answer (:mod:`autograder.reading.spec`), beside the hidden checks."""
        return self.checks_file(assignment).parent / "stand_ins" / f"{assignment}.py"

    def copy_checks(self, assignment: str, root: Path, audit_bank: bool = False) -> None:
        """Copies the hidden checks of ``assignment``, its stand-ins and (with ``audit_bank``) its
        audit bank into the course folder ``root``, at the same places, for a course of its own."""
        checks = self.checks_file(assignment)
        paths = [checks, self.stand_ins_file(assignment), *([checks.parent / "audit" / checks.name] if audit_bank else [])]
        for path in paths:
            if path.exists():
                target = root / path.relative_to(self.root)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)


def existing_checks_file(course: Course, assignment: str) -> Path:
    """:meth:`Course.checks_file`, or an error that says where it was expected."""
    path = course.checks_file(assignment)
    if not path.exists():
        raise GradingError(f"No hidden checks for {assignment!r}: expected {path}.")
    return path


def checks_version(course: Course, assignment: str) -> str:
    """A short sha256 of everything that decides an assignment's grades besides the secret: the
    hidden checks file, its stand-ins, the release notebooks, and every file of the course's package
    ``transformer_lm`` as the grader imports it (the reference, the concept modules, the mistakes'
    code, the kinds of check and their judges, the tolerance policy, the probes), each by its path
    and content (:func:`content_digest`). A report graded under another version is out of date (``autograder grade
    --regrade``). The grading pipeline itself (``autograder/``) is not in it: a change there needs
    a full grading again."""
    digest = hashlib.sha256()
    stand_ins = course.stand_ins_file(assignment)
    paths = [(path.name, path) for path in (existing_checks_file(course, assignment),
                                            *([stand_ins] if stand_ins.exists() else []),
                                            *course.release_notebooks(assignment).values())]
    paths += [(f"transformer_lm/{path.relative_to(COURSE_CODE)}", path) for path in sorted(COURSE_CODE.rglob("*"))
              if path.is_file() and "__pycache__" not in path.parts]
    for name, path in paths:
        digest.update(f"{name}\n{content_digest(path)}\n".encode())
    return digest.hexdigest()[:12]


def content_digest(path: Path) -> str:
    """The sha256 of a file's bytes; for a safetensors file, of its header written with sorted keys, then
    its data. Why: safetensors writes a header's metadata in an order of its own choosing, so the same
    values stored again (``make_test_values`` run with nothing changed) would otherwise read as new
    checks, and every report as out of date."""
    data = path.read_bytes()
    if path.suffix != ".safetensors":
        return hashlib.sha256(data).hexdigest()
    size = int.from_bytes(data[:8], "little")
    header = json.dumps(json.loads(data[8:8 + size]), sort_keys=True).encode()
    return hashlib.sha256(header + data[8 + size:]).hexdigest()


def load_checks(course: Course, assignment: str) -> ModuleType:
    """The hidden checks file of ``assignment`` (:meth:`Course.checks_file`), run: its ``ITEMS``,
    and the ``TEXTS`` its own judges say, if any (:mod:`transformer_lm.verdict_texts`)."""
    path = existing_checks_file(course, assignment)
    spec = importlib.util.spec_from_file_location(f"autograder.checks.a_{assignment}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def load_items(course: Course, assignment: str) -> list[Item]:
    """The hidden checks of ``assignment``."""
    return list(load_checks(course, assignment).ITEMS)


def generator_for(secret: bytes, assignment: str, grade_id: str, index: int) -> torch.Generator:
    """A generator for one check's hidden inputs, fixed by the course's secret."""
    digest = hashlib.sha256(b"|".join([secret, assignment.encode(), grade_id.encode(), str(index).encode()]))
    return torch.Generator().manual_seed(int.from_bytes(digest.digest()[:8], "little"))
