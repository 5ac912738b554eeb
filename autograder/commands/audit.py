"""``autograder audit <assignment>``: the grader measures its own hidden checks, item by item.

Each assignment keeps a bank beside its hidden checks, ``<checks_dir>/audit/<assignment>.py``,
with two functions of ``answer(grade_id, (old, new), ...)``, which gives the solution's answer
cell with each ``old`` text replaced by ``new`` (each must occur exactly once, so that a bank
never silently drifts from the solution):

* ``mutants(answer)``: for an item, answers that each make one catalogued mistake
  (:mod:`transformer_lm.catalog`), by the mistake's name (:func:`mistake_of`);
* ``alternatives(answer)``: for an item, correct answers written another way (einsum for
  matmul, loops, ``reshape`` for ``view``, another fill than ``-inf``, ...), by a short label;
* ``library(answer)``: for an item that forbids a library call, answers that make it (by name, or
  by a route the text does not show), by a short label: each must end ``forbidden``;

and ``KNOWN_GAPS``, ``{(grade_id, name or label): why}``, for what the checks do not yet catch,
name or keep, so that an exception is written down where it is made (``VISIBLE_GAPS`` likewise
for the visible checks, which ``tests/test_visible_and_hidden_agree.py`` holds to the bank).

Every bank answer is put into the solution notebook, in place of that item's answer cell, and
the whole bank is graded as one class through the real pipeline (preflight, warm sandboxes,
trusted comparison), with the course's own secret. Per item the audit counts the mutants that
lose the item's points (caught) and whose feedback names their mistake (named), the hidden checks
that some mutant needs, the alternatives that keep the points, the library calls refused, and how
many other items a mutant cost too (one mistake should cost once).

A mutant needs a check when, with that check taken out, it would keep points it should lose: it
failed that graded check alone. Each submission is graded once and its result lists every graded
check of the item that failed (:func:`autograder.judging.judge.judge_item` judges them all), so
the audit takes each check out by reading that list, not by grading again. A check no mutant
needs proves nothing: the audit names it, and the bank gains the mistake that needs it (or lists
it in ``KNOWN_GAPS`` as ``(grade_id, "check N")``, N counted from 1, with why).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from autograder.reading import cells  # noqa: E402
from autograder.recording import pipeline
from autograder.reading.assignment import Assignment  # noqa: E402
from autograder.reading.course import Course  # noqa: E402
from autograder.commands.demo import with_answer  # noqa: E402
from autograder.reading.errors import GradingError  # noqa: E402
from autograder.recording.feedback_texts import Catalogue, catalogue  # noqa: E402
from autograder.judging.grading import grade_class  # noqa: E402
from autograder.reading.results import ItemResult  # noqa: E402
from autograder.reading.spec import Also, Explains, Item  # noqa: E402
from transformer_lm import catalog  # noqa: E402
from transformer_lm.instructor import concepts  # noqa: E402


@dataclass
class Bank:
    """An assignment's audit bank: item -> {mistake name: answer}, item -> [(label, answer)] for
    the alternatives and the library calls, and the known gaps."""

    mutants: dict[str, dict[str, str]]
    alternatives: dict[str, list[tuple[str, str]]]
    library: dict[str, list[tuple[str, str]]]
    known_gaps: dict[tuple[str, str], str]
    visible_gaps: dict[tuple[str, str], str] = field(default_factory=dict)  # tests/test_visible_and_hidden_agree.py


@dataclass
class Case:
    """One bank answer, graded: what it is, and the item results of its submission."""

    kind: str  # "mutant", "alternative" or "library"
    grade_id: str
    label: str  # the mistake's name, or the alternative's label
    source: str = ""  # the answer the bank gives
    items: dict[str, ItemResult] = field(default_factory=dict)

    @property
    def item(self) -> ItemResult:
        return self.items[self.grade_id]

    @property
    def lost_points(self) -> bool:
        return self.item.score < self.item.max_score

    @property
    def named(self) -> bool:
        return self.item.mistake == mistake_of(self.label).title

    @property
    def collateral(self) -> list[str]:
        """Other items that lost points in this submission."""
        return [gid for gid, item in self.items.items() if gid != self.grade_id and item.score < item.max_score]


@dataclass
class ItemAudit:
    """The audit of one item."""

    grade_id: str
    mutants: list[Case]
    alternatives: list[Case]
    library: list[Case] = field(default_factory=list)
    checks: dict[int, str] = field(default_factory=dict)  # each graded check's number (from 0): what it is

    @property
    def refused(self) -> int:
        return sum(case.item.status == "forbidden" for case in self.library)

    @property
    def caught(self) -> int:
        return sum(case.lost_points for case in self.mutants)

    @property
    def named(self) -> int:
        return sum(case.lost_points and case.named for case in self.mutants)

    @property
    def kept(self) -> int:
        return sum(not case.lost_points for case in self.alternatives)

    @property
    def needed(self) -> set[int]:
        """The graded checks some mutant needs: a check that a mutant which lost its points failed
        alone, so that without it the mutant would have kept them."""
        return {case.item.failed_checks[0] for case in self.mutants
                if case.lost_points and len(case.item.failed_checks) == 1}


def graded_checks(item: Item) -> dict[int, str]:
    """The checks of ``item`` that can cost its points (not those that only explain), by their
    number from 0 (:attr:`Item.check_numbers`: the cases of one check count once), each as its
    kind and the object it checks."""
    described = {}
    for number, check in zip(item.check_numbers, item.checks):
        if not isinstance(check, (Explains, Also)):
            described[number] = f"{type(check).__name__} of {check.object}"
    return described


def mistake_of(label: str) -> catalog.Mistake:
    """The catalogued mistake a mutant's label names: the mistake's name, or the name and, after a
    colon, how this mutant makes it (``full_score_matrix: when causal``), where one mistake made in
    several modes of a call needs a mutant for each."""
    return catalog.BY_NAME[label.split(":")[0]]


def answer_editor(solution: dict) -> Callable[..., str]:
    """``answer(grade_id, (old, new), ...)`` over the answer cells of ``solution``."""
    answers = cells.answers(solution["cells"])

    def answer(grade_id: str, *replacements: tuple[str, str]) -> str:
        text = answers[grade_id]
        for old, new in replacements:
            if text.count(old) != 1:
                raise GradingError(f"The audit bank replaces {old!r} in {grade_id}, which holds it "
                                   f"{text.count(old)} times; it must hold it once.")
            text = text.replace(old, new)
        return text
    return answer


def load_bank(course: Course, assignment: str, solution: dict) -> Bank:
    """The bank of ``assignment``, from the course folder, built on ``solution``; its mistake
    names must be catalogued."""
    path = course.checks_file(assignment).parent / "audit" / f"{assignment}.py"
    if not path.exists():
        raise GradingError(f"No audit bank for {assignment!r}: expected {path}, which defines the functions "
                           "mutants(answer) and alternatives(answer) (and library(answer) where an item forbids a "
                           "library call). `autograder new-assignment` writes one to start from.")
    concepts.modules()  # every concept's mistakes in the catalogue, whatever the bank imports
    spec = importlib.util.spec_from_file_location(f"autograder.audit_bank_{assignment}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    answer = answer_editor(solution)
    library = module.library(answer) if hasattr(module, "library") else {}
    bank = Bank(module.mutants(answer), module.alternatives(answer), library, getattr(module, "KNOWN_GAPS", {}),
                getattr(module, "VISIBLE_GAPS", {}))
    named = {name.split(":")[0] for by_name in bank.mutants.values() for name in by_name}
    unknown = sorted(named - set(catalog.BY_NAME))
    if unknown:
        raise GradingError(f"{path} names mistakes that are not in the catalogue: {unknown}")
    return bank


def solution_of(course: Course, assignment: str) -> tuple[str, dict]:
    """The assignment's one solution notebook: its file name and contents."""
    [path] = sorted((course.root / "source" / assignment).glob("*.ipynb"))
    return path.name, json.loads(path.read_text())


def _scratch_course(course: Course, assignment: str, root: Path) -> Course:
    """A course folder of the audit's own, with the course's config, release, hidden checks and
    secret, so that the audit grades as the course does and writes nothing into it."""
    shutil.copy2(course.root / "nbgrader_config.py", root / "nbgrader_config.py")
    shutil.copytree(course.root / "release" / assignment, root / "release" / assignment)
    course.copy_checks(assignment, root)
    (root / ".grading").mkdir()
    (root / ".grading" / "secret").write_bytes(course.secret())
    return Course(root, course.settings)


def run(course: Course, assignment: str, progress: Callable[[str], None] | None = None,
        announce: Callable[[str, int], None] | None = None) -> tuple[list[ItemAudit], list[Problem]]:
    """Grades the bank of ``assignment``; returns the audit of each item, in item order, and
    the problems found."""
    name, solution = solution_of(course, assignment)
    bank = load_bank(course, assignment, solution)
    cases: dict[str, Case] = {}
    with tempfile.TemporaryDirectory(prefix="autograder-audit-") as scratch:
        audit_course = _scratch_course(course, assignment, Path(scratch))
        prepared = Assignment.load(audit_course, assignment)
        items = {item.grade_id: item for notebook in prepared.items.values() for item in notebook}
        answers = {grade_id: item.answer_id for grade_id, item in items.items()}
        for kind, entries in (("mutant", {g: list(m.items()) for g, m in bank.mutants.items()}),
                              ("alternative", bank.alternatives), ("library", bank.library)):
            for grade_id, labelled in entries.items():
                if grade_id not in answers:
                    raise GradingError(f"The audit bank of {assignment} names an item it does not have: {grade_id}")
                for number, (label, source) in enumerate(labelled):
                    student = f"{kind[:3]}-{grade_id}-{number:02d}"
                    folder = audit_course.submission_folder(assignment, student)
                    folder.mkdir(parents=True)
                    (folder / name).write_text(json.dumps(with_answer(solution, answers[grade_id], lambda _: source)))
                    cases[student] = Case(kind, grade_id, label, source)
        isolation = pipeline.isolation_for(audit_course)
        if announce:
            announce(f"Isolation: {isolation.name}", len(cases))
        graded = grade_class(audit_course, prepared, sorted(cases), isolation, progress)
    for result, _ in graded:
        cases[result.student].items = {item.grade_id: item for item in result.items}
    audits = [ItemAudit(grade_id, *([c for c in cases.values() if c.grade_id == grade_id and c.kind == kind]
                                    for kind in ("mutant", "alternative", "library")), graded_checks(item))
              for grade_id, item in items.items()]
    sources = ["".join(cell["source"]) for cell in solution["cells"]]
    return audits, (problems(audits, bank.known_gaps) + unneeded_checks(audits, bank.known_gaps)
                    + outside_catalogue(audits, catalogue(prepared), sources))


def outside_catalogue(audits: list[ItemAudit], texts: Catalogue, solution: list[str]) -> list[Problem]:
    """Every text of the bank's submissions that is not made of the closed catalogue's templates
    (:mod:`autograder.recording.feedback_texts`): a check that says what no template says."""
    found = []
    for audit in audits:
        for case in (*audit.mutants, *audit.alternatives, *audit.library):
            for item in case.items.values():
                if not texts.holds(item.message, [case.source, *solution]):
                    found.append(Problem(audit.grade_id, case.label, f"the text of {item.grade_id} is not made of "
                                         f"the catalogue's templates ({item.message[:200]})", ""))
    return found


def _ratio(good: int, total: int) -> str:
    return f"{good}/{total} ({100 * good / total:.0f}%)" if total else "none"


def table(audits: list[ItemAudit]) -> str:
    """The audit as a markdown table, a row per item and one for the whole assignment."""
    rows = ["| item | mutants caught | mutants named | checks a mutant needs | alternatives kept "
            "| library calls refused | mutants that cost other items |", "|---|---|---|---|---|---|---|"]
    for audit in audits:
        collateral = sum(bool(case.collateral) for case in audit.mutants)
        rows.append(f"| `{audit.grade_id}` | {_ratio(audit.caught, len(audit.mutants))} | "
                    f"{_ratio(audit.named, len(audit.mutants))} | {_ratio(len(audit.needed), len(audit.checks))} | "
                    f"{_ratio(audit.kept, len(audit.alternatives))} | "
                    f"{_ratio(audit.refused, len(audit.library))} | {collateral} |")
    mutants = [case for audit in audits for case in audit.mutants]
    alternatives = [case for audit in audits for case in audit.alternatives]
    library = [case for audit in audits for case in audit.library]
    rows.append(f"| **all** | {_ratio(sum(c.lost_points for c in mutants), len(mutants))} | "
                f"{_ratio(sum(c.lost_points and c.named for c in mutants), len(mutants))} | "
                f"{_ratio(sum(len(a.needed) for a in audits), sum(len(a.checks) for a in audits))} | "
                f"{_ratio(sum(not c.lost_points for c in alternatives), len(alternatives))} | "
                f"{_ratio(sum(c.item.status == 'forbidden' for c in library), len(library))} | "
                f"{sum(bool(c.collateral) for c in mutants)} |")
    return "\n".join(rows)


@dataclass
class Problem:
    """A mutant not caught or not named, or that cost other items too, a correct alternative that
    lost points, or a check no mutant needs; ``known`` holds why, where the bank lists it as a
    known gap."""

    grade_id: str
    label: str
    text: str
    known: str = ""

    def line(self) -> str:
        """The problem as one line of the printed audit and of ``audit.md``."""
        return f"- `{self.grade_id}`: {self.text}" + (f" Known gap: {self.known}" if self.known else "")


def problems(audits: list[ItemAudit], known_gaps: dict[tuple[str, str], str]) -> list[Problem]:
    """Every mutant not caught, not named or that cost other items too (one mistake costs points
    once), and every correct alternative that lost points, with what the grader said."""
    found = []
    for audit in audits:
        for case in audit.mutants:
            if not case.lost_points:
                text = f"the mutant {case.label} kept its points ({case.item.message[:200]})"
            elif not case.named:
                text = (f"the mutant {case.label} lost its points but was named {case.item.mistake!r} "
                        f"({case.item.status}: {case.item.message[:200]})")
            elif case.collateral:
                other = case.items[case.collateral[0]]
                text = (f"the mutant {case.label} cost {', '.join(case.collateral)} too "
                        f"({other.grade_id}: {other.status}: {other.message[:200]})")
            else:
                continue
            found.append(Problem(audit.grade_id, case.label, text, known_gaps.get((audit.grade_id, case.label), "")))
        for case in audit.library:
            if case.item.status != "forbidden":
                text = (f"the library answer {case.label!r} was not refused "
                        f"({case.item.status}: {case.item.message[:200]})")
                found.append(Problem(audit.grade_id, case.label, text,
                                     known_gaps.get((audit.grade_id, case.label), "")))
        for case in audit.alternatives:
            if case.lost_points:
                text = (f"the correct alternative {case.label!r} lost its points "
                        f"({case.item.status}: {case.item.message[:200]})")
                found.append(Problem(audit.grade_id, case.label, text,
                                     known_gaps.get((audit.grade_id, case.label), "")))
    return found


def unneeded_checks(audits: list[ItemAudit], known_gaps: dict[tuple[str, str], str]) -> list[Problem]:
    """Every graded check that no mutant of the bank needs: taken out, no mutant would keep points
    it should lose, so the bank holds no mistake that proves the check. Its label is ``check N``
    (N from 1, in the order of the item's checks), as ``KNOWN_GAPS`` names it."""
    found = []
    for audit in audits:
        for number in sorted(set(audit.checks) - audit.needed):
            label = f"check {number + 1}"
            text = (f"no mistake of the bank needs {label} of {audit.grade_id} ({audit.checks[number]}): every "
                    f"mutant of the item that fails it fails another of its checks too, or none fails it")
            found.append(Problem(audit.grade_id, label, text, known_gaps.get((audit.grade_id, label), "")))
    return found


def write(course: Course, assignment: str, audits: list[ItemAudit], found: list[Problem]) -> dict[str, Path]:
    """``reports/<assignment>/audit.md`` (the table, then every problem) and ``audit.png``."""
    folder = course.reports(assignment)
    folder.mkdir(parents=True, exist_ok=True)
    lines = [problem.line() for problem in found]
    text = (f"# Audit of the hidden checks of {assignment}\n\n{table(audits)}\n\n"
            + ("## Problems\n\n" + "\n".join(lines) if lines else "No problems.") + "\n")
    (folder / "audit.md").write_text(text)
    figure, axes = plt.subplots(figsize=(8, 0.45 * len(audits) + 1.6))
    rows = range(len(audits))[::-1]  # the first item on top
    for offset, (what, part) in enumerate((("mutants", lambda a: (a.named, len(a.mutants))),
                                           ("alternatives", lambda a: (a.kept, len(a.alternatives))))):
        for row, audit in zip(rows, audits):
            good, total = part(audit)
            y = row + 0.4 * (1 - offset)
            if total:
                axes.barh(y, 100 * good / total, height=0.4, color=f"C{offset}")
            else:
                axes.text(1, y, f"no {what}", va="center", fontsize=8, color="0.4")
    axes.set_yticks([row + 0.2 for row in rows], [audit.grade_id for audit in audits])
    axes.set_xlim(0, 100)
    axes.set_xlabel("% of the item's bank")
    legend = [Patch(color="C0", label="mutants caught and named"), Patch(color="C1", label="correct alternatives kept")]
    axes.legend(handles=legend, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, frameon=False)
    axes.set_title(f"Audit of {assignment}: sensitivity and specificity per item")
    figure.tight_layout()
    figure.savefig(folder / "audit.png", dpi=100)
    plt.close(figure)
    return {"audit": folder / "audit.md", "figure": folder / "audit.png"}
