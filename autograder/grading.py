"""Grading one submission and a whole class: preflight, run, compare, record.

The trusted process that runs this never executes student code: it reads notebooks as
data (:mod:`autograder.preflight`), hands code and hidden inputs to the sandbox
(:mod:`autograder.runner`), and judges the tensors that come back against the reference
(:mod:`autograder.spec`, :mod:`transformer_lm.kinds`, :mod:`transformer_lm.judging`).
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import fcntl
import hashlib
import importlib.util
import json
import os
import queue
import secrets
import shutil
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from autograder import course_code, runner, sandbox
from autograder.faults import log_fault
from autograder.config import Autograder, load_settings
from autograder.errors import GradingError
from autograder.forbidden import found_by_witness, found_in_trace
from autograder.notebook_data import read_notebook
from autograder.preflight import Preflight, grade_ids, preflight, source_text
from autograder.spec import Item
from transformer_lm import reference
from transformer_lm.forbidding import runtime_names
from transformer_lm.prepared import Prepared
from transformer_lm.sandboxed.probes import COURSE_CODE_CELL, UNTRACED
from transformer_lm.style import style_problems

STATUSES = ("passed", "failed", "error", "timeout", "killed", "missing", "forbidden", "tampered")
NOT_WRITTEN = "Not written yet"
"""How the message of an answer that still raises the release's NotImplementedError starts."""
RECEIPTS = ("timestamp.txt", "submission_secret.txt")
WITH_COURSE_CODE = "+course"
"""The suffix of a probe id that runs with the course's stand-ins in place of earlier answers."""


@dataclass
class ItemResult:
    """The grade of one item, as every report shows it."""

    grade_id: str
    notebook: str
    score: float
    max_score: float
    status: str
    message: str
    hint: str = ""
    mistake: str | None = None
    deduction: str = ""
    answer: str = ""  # the answer cell graded (several items may share one)


@dataclass
class SubmissionResult:
    """The grade of one student's submission of one assignment."""

    student: str
    assignment: str
    total: float
    max_total: float
    flags: list[str] = field(default_factory=list)
    items: list[ItemResult] = field(default_factory=list)
    isolation: str = ""
    unreadable: list[str] = field(default_factory=list)  # notebooks missing or unreadable: nothing to grade by hand
    checks_version: str = ""  # checks_version() it was graded with; "" in reports from before it was recorded

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> SubmissionResult:
        return cls(**{**data, "items": [ItemResult(**i) for i in data["items"]]})


class Course:
    """A course folder in nbgrader's layout: source/, release/, submitted/, autograded/,
    feedback/, gradebook.db, plus reports/ and the grader's private state in .grading/, and the
    grader's settings from its ``nbgrader_config.py`` (:mod:`autograder.config`)."""

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
            raise GradingError(f"{self.root} is not a course folder: it has no nbgrader_config.py. Run this in the "
                               f"course folder, or pass --course DIR.")
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
        earlier answer (:mod:`autograder.spec`), beside the hidden checks."""
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
    """A short sha256 of what shapes an assignment's grades besides the secret: the hidden checks
    file and the release notebooks (each file's name and bytes). A report graded under another
    version is out of date (``autograder grade --regrade``). The grader's own code (the reference,
    the tolerance policy) is not in it: a change there needs a full grading again."""
    digest = hashlib.sha256()
    stand_ins = course.stand_ins_file(assignment)
    paths = [existing_checks_file(course, assignment), *([stand_ins] if stand_ins.exists() else []),
             *course.release_notebooks(assignment).values()]
    for path in paths:
        digest.update(f"{path.name}\n{hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())
    return digest.hexdigest()[:12]


def load_items(course: Course, assignment: str) -> list[Item]:
    """The hidden checks of ``assignment`` (:meth:`Course.checks_file`)."""
    path = existing_checks_file(course, assignment)
    spec = importlib.util.spec_from_file_location(f"autograder.checks.a_{assignment}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return list(module.ITEMS)


def generator_for(secret: bytes, assignment: str, grade_id: str, index: int) -> torch.Generator:
    """A generator for one check's hidden inputs, fixed by the course's secret."""
    digest = hashlib.sha256(b"|".join([secret, assignment.encode(), grade_id.encode(), str(index).encode()]))
    return torch.Generator().manual_seed(int.from_bytes(digest.digest()[:8], "little"))


@dataclass
class Assignment:
    """Everything about one assignment that is the same for every student."""

    name: str
    release: dict[str, list[dict]]  # notebook name -> its release cells
    items: dict[str, list[Item]]  # notebook name -> its items
    prepared: dict[str, Prepared]  # probe id -> prepared check
    probe_item: dict[str, str]  # probe id -> grade_id
    points: dict[str, float]  # grade_id -> points
    answers: dict[str, str]  # grade_id -> the answer cell it grades
    checks_version: str  # checks_version() of the files it was loaded from
    below: dict[str, list[str]] = field(default_factory=dict)  # grade_id -> the items it builds on, at any depth
    stand_ins: dict[str, list[str]] = field(default_factory=dict)  # probe id -> names the course's code replaces
    course_code: dict[str, dict] = field(default_factory=dict)  # grade_id -> its late run's course code (CourseCode)

    @classmethod
    def load(cls, course: Course, name: str) -> Assignment:
        release, items, prepared, probe_item = {}, {}, {}, {}
        all_items = load_items(course, name)
        secret = course.secret()
        located = set()
        for notebook, path in course.release_notebooks(name).items():
            data, problem = read_notebook(path)
            if problem:
                raise GradingError(f"The release notebook {path} is damaged: {problem}")
            release[notebook] = data["cells"]
            ids = grade_ids(data["cells"])
            items[notebook] = [item for item in all_items if item.answer_id in ids]
            located.update(item.grade_id for item in items[notebook])
        lost = [item.answer_id for item in all_items if item.grade_id not in located]
        if lost:
            raise GradingError(f"Hidden checks name answer cells that no release notebook of {name} has: {lost}")
        below, stand_ins = _builds_on(all_items, items), {}
        defined = {item.grade_id: item.defines for item in all_items}
        for item in all_items:
            names = sorted({name for gid in below[item.grade_id] for name in defined[gid]})
            for index, check in enumerate(item.checks):
                pid = f"{item.grade_id}.{index}"
                prepared[pid] = check.prepare(generator_for(secret, name, item.grade_id, index))
                probe_item[pid] = item.grade_id
                if names:
                    prepared[pid + WITH_COURSE_CODE], probe_item[pid + WITH_COURSE_CODE] = prepared[pid], item.grade_id
                    stand_ins[pid + WITH_COURSE_CODE] = names
        late = {probe_item[pid]: names for pid, names in stand_ins.items()}
        code = _course_code(course, name, late, {n for names in defined.values() for n in names})
        return cls(name, release, items, prepared, probe_item, {i.grade_id: i.points for i in all_items},
                   {i.grade_id: i.answer_id for i in all_items}, checks_version(course, name), below, stand_ins, code)


def _builds_on(all_items: list[Item], by_notebook: dict[str, list[Item]]) -> dict[str, list[str]]:
    """Each item's ``builds_on``, followed to every depth (nearest first), checked: an item builds
    on earlier items of its own notebook that define what the course's code stands in for."""
    notebook = {item.grade_id: nb for nb, items in by_notebook.items() for item in items}
    below: dict[str, list[str]] = {}
    for item in all_items:
        below[item.grade_id] = []
        for gid in item.builds_on:
            if gid not in below or notebook.get(gid) != notebook.get(item.grade_id):
                raise GradingError(f"Item {item.grade_id!r} builds on {gid!r}, which is not an earlier item of "
                                   f"its notebook.")
            below[item.grade_id] += [g for g in (gid, *below[gid]) if g not in below[item.grade_id]]
        if below[item.grade_id] and not any(i.defines for i in all_items if i.grade_id in below[item.grade_id]):
            raise GradingError(f"Item {item.grade_id!r} builds on items that define nothing the course's code can "
                               f"stand in for: give them defines=(...).")
    return below


def _course_code(course: Course, assignment: str, late: dict[str, list[str]], defines: set[str]) -> dict[str, dict]:
    """For each item judged in a late run (grade_id -> the names the course's code stands in
    for), the course's code that run gets (:mod:`autograder.course_code`); every name an item
    defines must be defined at the top of the stand-ins' file."""
    if not late:
        return {}
    path = course.stand_ins_file(assignment)
    if not path.exists():
        raise GradingError(f"Items of {assignment} build on earlier answers: the course's stand-ins for them are "
                           f"expected in {path}.")
    source = path.read_text()
    tree = ast.parse(source, str(path))
    top = {node.name for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
    top |= {target.id for node in tree.body if isinstance(node, ast.Assign) for target in node.targets
            if isinstance(target, ast.Name)}
    if defines - top:
        raise GradingError(f"{path} does not define {', '.join(sorted(defines - top))}, which items define.")
    reference_source = Path(reference.__file__).read_text()
    return {gid: course_code.for_names(reference_source, source, names, defines) for gid, names in late.items()}


def answer_cells(cells: list[dict]) -> list[tuple[str, str]]:
    """The ``(grade_id, source)`` of every answer cell (code or written) of a notebook's cells."""
    found = []
    for cell in cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("solution") and meta.get("grade_id"):
            found.append((meta["grade_id"], source_text(cell.get("source", ""))))
    return found


def holds_answers(cells: list[dict], release: list[dict]) -> bool:
    """Whether any answer cell of ``cells`` differs from the release's: the student wrote something."""
    blank = dict(answer_cells(release))
    return any(gid in blank and source.strip() != blank[gid].strip() for gid, source in answer_cells(cells))


def extra_notebooks(folder: Path, graded: set[str], assignment: Assignment, pres: dict[str, Preflight]) -> list[str]:
    """A flag for each notebook of the submission that was not graded (a copy, a renamed draft),
    saying when it holds answers while a graded notebook is blank, so that a TA looks at it."""
    flags = []
    blank = [nb for nb, pre in pres.items()
             if pre.notebook and not holds_answers(pre.notebook["cells"], assignment.release[nb])]
    for path in sorted(folder.glob("*.ipynb")) if folder.is_dir() else []:
        if path.name in graded:
            continue
        flag = f"Extra notebook {path.name!r} in the submission: it was not graded."
        data, problem = read_notebook(path)
        if not problem and any(holds_answers(data["cells"], cells) for cells in assignment.release.values()):
            flag += (f" It holds answers, while the graded {blank[0]}.ipynb is blank: the student may have worked "
                     f"in the copy; grade it by hand, or ask for the right file." if blank else " It holds answers.")
        flags.append(flag)
    return flags


def find_notebook(folder: Path, name: str, expected: set[str], flags: list[str]) -> Path | None:
    """The submitted notebook for ``name``; a single notebook under another name stands in
    for a single missing one (students rename files), with a flag."""
    path = folder / f"{name}.ipynb"
    if path.exists():
        return path
    others = sorted(p for p in folder.glob("*.ipynb") if p.stem not in expected) if folder.is_dir() else []
    if len(expected) == 1 and len(others) == 1:
        flags.append(f"The notebook is named {others[0].name!r}, not {name + '.ipynb'!r}; it was graded all the same.")
        return others[0]
    return None


def judge_item(item: Item, notebook: str, assignment: Assignment, pre: Preflight,
               run: runner.RunResult | None, earlier: dict[str, ItemResult] | None = None,
               flags: list[str] | None = None) -> ItemResult:
    """One item's result from its preflight status or its probe outcomes; ``earlier`` holds the
    results of the items before it in its notebook (one mistake costs points once). What it notes
    for the instructor goes to ``flags`` (default: the notebook's, ``pre.flags``)."""
    flags = pre.flags if flags is None else flags
    base = dict(grade_id=item.grade_id, notebook=notebook, max_score=item.points, score=0.0, answer=item.answer_id)
    if pre.fatal:
        status = "missing" if pre.fatal.startswith("No notebook") else "error"
        return ItemResult(status=status, message=pre.fatal, **base)
    if item.grade_id in pre.item_status:
        status, message = pre.item_status[item.grade_id]
        return ItemResult(status=status, message=message, **base)
    answer = pre.answer(item.answer_id)
    charged = {pre.answer(other.answer).index for other in (earlier or {}).values()
               if other.status == "forbidden" and pre.answer(other.answer)}
    result = _judge_probes(item, [f"{item.grade_id}.{i}" for i in range(len(item.checks))], assignment, pre, run,
                           ItemResult(status="passed", message="All hidden checks passed.", **base), charged, flags)
    if result.status != "passed":
        result = _charged_once(item, result, assignment, pre, run, earlier or {}, flags)
    if result.status != "passed":
        return result
    result.score = item.points
    problems = style_problems(answer.source) if item.style_deduction else []
    if problems:
        result.score = max(0.0, item.points - item.style_deduction)
        result.deduction = f"pep8: -{item.style_deduction:g} point ({'; '.join(problems[:5])})"
    return result


def _judge_probes(item: Item, pids: list[str], assignment: Assignment, pre: Preflight, run: runner.RunResult,
                  passed: ItemResult, charged: set[int], flags: list[str]) -> ItemResult:
    """``passed`` when every probe of ``pids`` passes; otherwise the first problem, as a result.
    ``charged``: the answer cells of earlier items charged with a forbidden call; what the
    instructor should know (tampering, a forbidden call) is added to ``flags``."""
    answer = pre.answer(item.answer_id)
    answer_cells = {cell.index for cell in pre.cells if cell.role == "answer"} | {COURSE_CODE_CELL}
    failed = replace(passed, status="failed")
    for pid in pids:
        outcome = run.outcomes[pid]
        if UNTRACED in outcome.ran:
            note = (f"Tampering: while answer {item.answer_id!r} was checked, a torch function made a tensor while no "
                    "operator passed the grader's trace: the dispatcher's tracing was turned off around it.")
            if note not in flags:
                flags.append(note)
            return replace(failed, status="tampered", message="While it was checked, the answer computed with "
                           "PyTorch's dispatcher hidden from the grader, which then cannot see what it ran or held.")
        used = found_in_trace(item.forbids, outcome.ran, answer.index if answer else None, answer_cells,
                              charged | {COURSE_CODE_CELL})
        unseen = [] if outcome.ran else found_by_witness(item.forbids, outcome.witnessed)
        note = (f"Tampering: while answer {item.answer_id!r} was checked, PyTorch's profiler saw {', '.join(unseen)} "
                f"run, and the grader's trace saw nothing: the trace was turned off.")
        if unseen and note not in flags:
            flags.append(note)
        if used or unseen:
            used = used or unseen
            flag = (f"Forbidden call: while answer {item.answer_id!r} was checked, it ran {', '.join(used)} "
                    f"(seen in what ran, not in its text).")
            if flag not in flags:
                flags.append(flag)
            return replace(failed, status="forbidden", message=f"While it was checked, the answer ran "
                           f"{', '.join(used)}, the library version of what this exercise asks you to write yourself "
                           "(the grader sees the operations that run, whatever name reached them).")
        if outcome.status == "todo":
            return replace(failed, message=f"{NOT_WRITTEN}: the answer still raises NotImplementedError.")
        if outcome.status != "ok":
            problem = run.cell_problems.get(answer.index) if answer else None
            message = outcome.message
            if problem and outcome.status == "error" and "Your answer cell" not in message:
                message = f"Your answer cell failed: {problem}"
            return replace(failed, status=outcome.status, message=message)
        try:
            verdict = assignment.prepared[pid].judge(outcome.record or {}, outcome.value, False)
        except Exception as error:  # noqa: BLE001 - malformed results are the submission's error
            return replace(failed, status="error", message=f"The result could not be compared: {error}")
        if not verdict.passed:
            return replace(failed, message=verdict.message, hint=verdict.hint,
                           mistake=verdict.mistake.title if verdict.mistake else None)
    return passed


def _charged_once(item: Item, result: ItemResult, assignment: Assignment, pre: Preflight, run: runner.RunResult,
                  earlier: dict[str, ItemResult], flags: list[str]) -> ItemResult:
    """A failed item's result once a mistake already charged elsewhere is taken out of it.

    When an item it builds on did not pass, the item is judged by the probes that ran with the
    course's code in their place. When an earlier item of the same answer failed by a catalogued
    mistake and this one fails by exactly that mistake (its record is the reference's with that
    one mistake), this step is right and keeps its points."""
    if result.status == "forbidden":
        return result
    below = [gid for gid in assignment.below.get(item.grade_id, []) if gid in earlier
             and earlier[gid].status != "passed"]
    if below:
        pids = [f"{item.grade_id}.{i}{WITH_COURSE_CODE}" for i in range(len(item.checks))]
        if not all(pid in run.outcomes for pid in pids):  # not checked again: the answer is the release's
            return result
        *others, last = assignment.stand_ins[pids[0]]
        names = f"{', '.join(others)} and {last}" if others else last
        where = " and ".join(below)
        course = _judge_probes(item, pids, assignment, pre, run, replace(
            result, status="passed", hint="", mistake=None,
            message=f"All hidden checks passed, run on the course's {names} in place of yours, because {where} did "
                    f"not pass and lost its points there (one mistake costs points once)."), set(), flags)
        if course.status == "failed":
            course.message = f"With the course's {names} in place of yours: {course.message}"
        return course if course.status in ("passed", "failed") else result
    charged = next((other for other in earlier.values() if other.answer == item.answer_id
                    and other.status == "failed" and result.mistake and other.mistake == result.mistake), None)
    if charged and result.status == "failed":
        return replace(result, status="passed", hint="", mistake=None,
                       message=f"All else is right: this item fails only by the mistake charged in "
                               f"{charged.grade_id} ({result.mistake}), and one mistake costs points once.")
    return result


def grade_notebook(assignment: Assignment, notebook: str, path: Path | None,
                   worker: runner.Worker) -> tuple[list[ItemResult], Preflight]:
    """Grades one submitted notebook (``path`` None when it is missing): preflight, run, compare.

    The first run checks the student's own answers. When an item fails and an item it builds on
    failed too, a second run checks those items again with the course's code in place of the
    answers below them (:func:`_late_items`), so that one mistake costs points once; a notebook
    whose items all pass, or fail on their own, needs no second run."""
    items = assignment.items[notebook]
    pre = preflight(path, assignment.release[notebook], items)
    run = None
    if not pre.fatal:
        ids = {i.grade_id for i in items} - set(pre.item_status)
        own = {pid for pid, gid in assignment.probe_item.items() if gid in ids and pid not in assignment.stand_ins}
        run = _run(assignment, pre, own, worker)
        late = {pid for pid, gid in assignment.probe_item.items()
                if pid in assignment.stand_ins and gid in _late_items(assignment, notebook, pre, run)}
        if late:
            second = _run(assignment, pre, late, worker)
            run.outcomes.update(second.outcomes)
            run.tampering += second.tampering
            run.refused += second.refused
        pre.flags.extend(f"Tampering: {why}." for why in dict.fromkeys(run.tampering))
        pre.flags.extend(f"Refused: while it was graded, the notebook's code tried {what}, which a grading run does not "
                         "allow (a process, a thread or a memory map); the call raised PermissionError."
                         for what in dict.fromkeys(run.refused))
    results: dict[str, ItemResult] = {}
    for item in items:
        results[item.grade_id] = judge_item(item, notebook, assignment, pre, run, results)
    return list(results.values()), pre


def _run(assignment: Assignment, pre: Preflight, pids: set[str], worker: runner.Worker) -> runner.RunResult:
    """A run of the probes ``pids`` of one notebook (those with stand-ins, with the course's code)."""
    forbids = {item.grade_id: item.forbids for items in assignment.items.values() for item in items}
    prepared = {pid: assignment.prepared[pid] for pid in assignment.probe_item if pid in pids}
    answers = {pid: assignment.answers[assignment.probe_item[pid]] for pid in prepared}
    watch = {pid: sorted(runtime_names(forbids[assignment.probe_item[pid]])) for pid in prepared
             if forbids[assignment.probe_item[pid]]}
    stand_ins = {pid: assignment.stand_ins[pid] for pid in prepared if pid in assignment.stand_ins}
    code = {pid: assignment.course_code[assignment.probe_item[pid]] for pid in stand_ins}
    return runner.run_submission(pre, prepared, answers, worker, watch, stand_ins, code)


def _late_items(assignment: Assignment, notebook: str, pre: Preflight, run: runner.RunResult) -> set[str]:
    """The items to check again with the course's code below them: those written, failing on their
    own answers (judged as they will be, but noting nothing yet), that build on an item failing too."""
    blank = dict(answer_cells(assignment.release[notebook]))
    failing, written, earlier = set(), set(), {}
    for item in assignment.items[notebook]:
        gid, answer = item.grade_id, pre.answer(item.answer_id)
        if gid in pre.item_status or answer and all(f"{gid}.{i}" in run.outcomes for i in range(len(item.checks))):
            earlier[gid] = judge_item(item, notebook, assignment, pre, run, earlier, [])
        if gid not in earlier or earlier[gid].status != "passed":
            failing.add(gid)
        if gid not in pre.item_status and answer and answer.source.strip() != blank.get(item.answer_id, "").strip():
            written.add(gid)  # preflight's own status (missing, forbidden by name) is the item's own mistake
    return {gid for gid in failing & written if set(assignment.below.get(gid, ())) & failing}


def grade_submission(course: Course, assignment: Assignment, student: str,
                     worker: runner.Worker) -> tuple[SubmissionResult, dict[str, Preflight]]:
    """Grades one student's submission; never raises for anything the submission contains."""
    folder = course.submission_folder(assignment.name, student)
    result = SubmissionResult(student, assignment.name, 0.0, 0.0, isolation=worker.isolation.name,
                              checks_version=assignment.checks_version)
    pres, graded = {}, set()
    for notebook in assignment.release:
        path = find_notebook(folder, notebook, set(assignment.release), result.flags)
        graded |= {path.name} if path else set()
        try:
            items, pres[notebook] = grade_notebook(assignment, notebook, path, worker)
        except Exception as error:  # noqa: BLE001 - the grader's own fault costs this notebook, not the class
            flag = log_fault(course.reports(assignment.name), student, f"grading {notebook}.ipynb", error)
            pres[notebook] = Preflight(fatal=flag)
            items = [judge_item(item, notebook, assignment, pres[notebook], None) for item in assignment.items[notebook]]
        result.items.extend(items)
        result.flags.extend(f"{notebook}: {flag}" for flag in pres[notebook].flags)
        if pres[notebook].fatal:
            result.unreadable.append(notebook)
            result.flags.append(f"{notebook}: not graded: {pres[notebook].fatal}")
    result.flags.extend(extra_notebooks(folder, graded, assignment, pres))
    result.total = sum(i.score for i in result.items)
    result.max_total = sum(i.max_score for i in result.items)
    return result, pres


def run_settings(settings: Autograder) -> runner.RunSettings:
    """The limits of one submission's run, from the course's settings."""
    return runner.RunSettings(cell_seconds=settings.cell_timeout, total_seconds=settings.total_timeout,
                              memory_bytes=settings.memory_bytes)


def grade_class(course: Course, assignment: Assignment, students: list[str], isolation: sandbox.Isolation,
                progress=None) -> list[tuple[SubmissionResult, dict[str, Preflight]]]:
    """Grades many submissions side by side (``course.settings.workers``), each worker with a warm
    sandbox of its own; results come back in student order."""
    count = max(1, min(course.settings.workers, len(students)))
    limits = run_settings(course.settings)
    with contextlib.ExitStack() as stack:
        idle = queue.SimpleQueue()
        for _ in range(count):
            idle.put(stack.enter_context(runner.Worker(limits, isolation)))

        def one(student):
            worker = idle.get()
            try:
                outcome = grade_submission(course, assignment, student, worker)
            finally:
                idle.put(worker)
            if progress:
                progress(student)
            return outcome

        with ThreadPoolExecutor(max_workers=count) as pool:
            return list(pool.map(one, students))


def load_results(course: Course, assignment: str) -> list[SubmissionResult]:
    """Every submission's result, in student order (empty when the assignment was not graded)."""
    return [SubmissionResult.from_json(json.loads(path.read_text()))
            for path in sorted(course.reports(assignment).glob("*.json"))]


def write_report(course: Course, result: SubmissionResult) -> Path:
    """``reports/<assignment>/<student>.json``."""
    folder = course.reports(result.assignment)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{result.student}.json"
    path.write_text(json.dumps(result.to_json(), indent=2, sort_keys=True) + "\n")
    return path
