"""Similar answers in a class: each answer cell compared with classmates', the course's reference
and public code (``autograder similarity``, and a section of ``autograder report``).

Nothing here runs a notebook or needs grades. Submissions are read as data
(:func:`autograder.reading.notebook_data.read_notebook`), each code answer cell is fingerprinted once
(:mod:`autograder.recording.fingerprints`), and answers are compared cell by cell, never as whole notebooks,
with three sources: every classmate's answer to the same cell; the course's reference, that cell's
solution in ``source/`` (what a student who found the course's repository would copy); and the
public implementations in ``c.Autograder.similarity_corpus``.

The similarity of two answers is the share of their fingerprints they have in common (Dice's
coefficient, 2|A and B| / (|A| + |B|)), from 0 to 1. Fingerprints that at least half of the students
who answered a cell have (and at least :data:`MIN_COMMON` of them) are left out of every comparison
of that cell, as MOSS leaves out passages that many programs share: code that the item's API
dictates, or the one obvious way of writing a line, is expected, not evidence. Shared fingerprints
are counted for all pairs at once, by a product of the answers' incidence matrix with itself over
the fingerprints that two answers or more have; the matching regions, copydetect's pairwise step,
are found only for the pairs a page shows.

Nothing here judges: similar answers may have been shared, copied from the same place, or written
alike by students taught alike. A pair is weak evidence where an answer is short, or where most of a
typical answer to the cell is such common code; the report marks it so.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from autograder.reading.cells import answer_cells, grade_ids
from autograder.reading.course import Course, load_items
from autograder.reading.errors import GradingError
from autograder.reading.faults import costs_one
from autograder.recording.fingerprints import Fingerprint, fingerprint
from autograder.judging.grading import find_notebook
from autograder.reading.notebook_data import read_notebook

CLASSMATE, REFERENCE, PUBLIC = "classmate", "course reference", "public code"
"""Where the other answer of a pair comes from."""
MIN_COMMON = 5
"""Fewest students who must share a fingerprint for it to be common code (and half of those who answered)."""
SHORT = 80
"""Characters of normalised code (names one letter, no comments) below which an answer is short:
about three lines, where every correct answer looks alike."""
ALIKE = 0.5
"""Share of a typical answer that is common code from which a cell's answers are mostly alike."""
SOLUTION_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")
NOT_COMPARED = "its answers were not compared. Compare them by hand"
"""What similarity does instead of comparing a notebook on which the grader faults, as its note says."""
MAX_ANSWER = 50_000
"""The most characters of an answer cell that are compared: ten times the longest answer of the course,
and about a second of fingerprinting (a 400,000-character cell takes twenty)."""


@dataclass
class Answer:
    """One answer to a cell: a student's (``owner`` is their id), the course's reference, or a
    file of public code (``owner`` is its name)."""

    owner: str
    source: str  # CLASSMATE (a student's answer), REFERENCE or PUBLIC
    fingerprint: Fingerprint


@dataclass
class Pair:
    """A student's answer and another one, with their similarity and, where it is weak evidence, why."""

    a: Answer
    b: Answer
    similarity: float
    weak: str = ""


@dataclass
class CellSimilarity:
    """The comparisons of one answer cell. ``answers`` are the students' answers that hold code of
    their own; ``pairs`` those at or above the threshold, highest first; ``closest`` each student's
    most similar other answer, whatever its similarity; ``groups`` the students joined by similar
    pairs with classmates, largest group first; ``alike`` the share of a typical (median) answer
    that is common code, the fingerprints of which are ``common``."""

    cell: str
    notebook: str
    items: list[str]
    answers: list[Answer]
    others: list[Answer]
    common: frozenset[int]
    alike: float
    pairs: list[Pair]
    closest: dict[str, Pair]
    groups: list[list[str]]

    def count(self, source: str) -> int:
        """How many pairs above the threshold have their other answer from ``source``."""
        return sum(pair.b.source == source for pair in self.pairs)


@dataclass
class ClassSimilarity:
    """The similarity report of an assignment: its cells, and what could not be compared and why."""

    assignment: str
    threshold: float
    students: list[str]
    cells: list[CellSimilarity] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    public_files: int = 0


def compare_class(course: Course, assignment: str, threshold: float | None = None) -> ClassSimilarity:
    """Compares every code answer cell of ``assignment``'s submissions with classmates', the course's
    reference and public code; ``threshold`` (default: ``c.Autograder.similarity_threshold``) is the
    similarity from which pairs are listed. Raises :class:`GradingError` where the threshold is out of
    range or the release is missing or damaged; a submission that cannot be read is left out, with a
    note."""
    threshold = course.settings.similarity_threshold if threshold is None else threshold
    if not 0 < threshold <= 1:
        raise GradingError(f"The similarity threshold must be above 0 and at most 1 (a share of fingerprints), not "
                           f"{threshold:g}: set c.Autograder.similarity_threshold or --threshold, for example to 0.5.")
    starters = {}
    for notebook, path in course.release_notebooks(assignment).items():
        data, problem = read_notebook(path)
        if problem:
            raise GradingError(f"The release notebook {path} is damaged: {problem}")
        starters[notebook] = code_answer_cells(data["cells"])
    students = course.students(assignment)
    result = ClassSimilarity(assignment, threshold, students)
    notes = result.notes
    carried = _items_by_cell(course, assignment, notes)
    public = _public_answers(course, assignment, {cell for cells in starters.values() for cell in cells}, notes)
    result.public_files = sum(len(files) for files in public.values())
    submitted = {student: _submitted_answers(course, assignment, student, starters, notes) for student in students}
    for notebook, cells in starters.items():
        reference = _reference_answers(course, assignment, notebook, notes)
        for cell, starter in cells.items():
            answers = [Answer(student, CLASSMATE, answered[notebook][cell])
                       for student, answered in submitted.items() if cell in answered.get(notebook, {})]
            others = [Answer(REFERENCE, REFERENCE, fingerprint(reference[cell], starter))] if cell in reference else []
            others += [Answer(name, PUBLIC, fingerprint(text, starter)) for name, text in public.get(cell, [])]
            result.cells.append(compare_cell(cell, notebook, carried.get(cell, []),
                                             [a for a in answers if a.fingerprint.hashes], others, threshold))
    return result


def compare_cell(cell: str, notebook: str, items: list[str], answers: list[Answer], others: list[Answer],
                 threshold: float) -> CellSimilarity:
    """The students' ``answers`` to one cell compared with one another and with ``others`` (the
    reference and public code)."""
    held = Counter(h for answer in answers for h in answer.fingerprint.hashes)
    common = frozenset(h for h, count in held.items() if count >= max(MIN_COMMON, len(answers) / 2))
    everyone = answers + others
    scores = dice([answer.fingerprint.hashes - common for answer in everyone], len(answers))
    alike = statistics.median(len(a.fingerprint.hashes & common) / len(a.fingerprint.hashes)
                              for a in answers) if answers else 0.0

    def pair(i: int, j: int) -> Pair:
        a, b = answers[i], everyone[j]
        return Pair(a, b, float(scores[i, j]), weak_evidence(a.fingerprint, b.fingerprint, alike))

    n = len(answers)
    above = [pair(i, j) for i, j in zip(*np.nonzero(scores >= threshold)) if j >= n or i < j]
    above.sort(key=lambda p: (-p.similarity, p.a.owner, p.b.source, p.b.owner))
    np.fill_diagonal(scores[:, :n], -1.0)
    # A tie goes to the last answer: the reference or public code, which explains it better than a classmate.
    closest = {answers[i].owner: pair(i, int(np.flatnonzero(scores[i] == scores[i].max())[-1]))
               for i in range(n) if scores[i].max() > 0}
    return CellSimilarity(cell, notebook, items, answers, others, common, alike, above, closest,
                          groups([p for p in above if p.b.source == CLASSMATE]))


def dice(sets: list[set[int]], n: int) -> np.ndarray:
    """Dice's coefficient of each of the first ``n`` sets with every set, an (n, len(sets)) array:
    intersections counted by one matrix product, over the elements that two sets or more hold."""
    sizes = np.array([len(s) for s in sets], dtype=np.int64)
    values = np.fromiter((h for s in sets for h in s), dtype=np.int64, count=int(sizes.sum()))
    rows = np.repeat(np.arange(len(sets)), sizes)
    _, columns, held = np.unique(values, return_inverse=True, return_counts=True)
    shared = held[columns] > 1
    _, columns = np.unique(columns[shared], return_inverse=True)
    incidence = np.zeros((len(sets), int(columns.max(initial=-1)) + 1), dtype=np.float32)
    incidence[rows[shared], columns] = 1.0
    both = incidence[:n] @ incidence.T
    total = (sizes[:n, None] + sizes[None, :]).astype(np.float32)
    return np.divide(2 * both, total, out=np.zeros_like(both), where=total > 0)


def weak_evidence(a: Fingerprint, b: Fingerprint, alike: float) -> str:
    """Why the similarity of two answers says little, in words; "" when it is not weak evidence."""
    reasons = []
    if min(a.size, b.size) < SHORT:
        reasons.append("a short answer: correct answers to a short item look alike")
    if alike >= ALIKE:
        reasons.append(f"most answers to this cell are alike: {alike:.0%} of a typical answer is code that at least "
                       f"half the class wrote the same way")
    return "; ".join(reasons)


def groups(pairs: list[Pair]) -> list[list[str]]:
    """The students joined by ``pairs`` (directly or through others), each group sorted, largest first."""
    parent: dict[str, str] = {}

    def root(student: str) -> str:
        while parent.setdefault(student, student) != student:
            parent[student] = parent[parent[student]]   # halves the path each time it is walked
            student = parent[student]
        return student

    for p in pairs:
        parent[root(p.a.owner)] = root(p.b.owner)
    joined: dict[str, list[str]] = {}
    for student in parent:
        joined.setdefault(root(student), []).append(student)
    return sorted((sorted(group) for group in joined.values()), key=lambda group: (-len(group), group))


def code_answer_cells(cells: list[dict]) -> dict[str, str]:
    """The code answer cells of a notebook, grade_id -> source (written answers are not compared)."""
    code = grade_ids([cell for cell in cells if cell.get("cell_type") == "code"])
    return {cell: source for cell, source in answer_cells(cells) if cell in code}


def _items_by_cell(course: Course, assignment: str, notes: list[str]) -> dict[str, list[str]]:
    """The items that each answer cell carries, from the hidden checks."""
    try:
        items = load_items(course, assignment)
    except GradingError as error:
        notes.append(f"The items of each answer cell are not named: {error}")
        return {}
    carried: dict[str, list[str]] = {}
    for item in items:
        carried.setdefault(item.answer_id, []).append(item.grade_id)
    return carried


def _submitted_answers(course: Course, assignment: str, student: str, starters: dict[str, dict[str, str]],
                       notes: list[str]) -> dict[str, dict[str, Fingerprint]]:
    """The fingerprints of a student's code answer cells, notebook -> grade_id -> fingerprint (``starters``:
    the release's code answer cells of each notebook); a notebook that is missing or cannot be read, or on
    which the grader faults, is left out, with a note."""
    folder = course.submission_folder(assignment, student)
    found = {}
    for notebook, starter in starters.items():
        path = find_notebook(folder, notebook, set(starters), [])  # as grading finds it, renamed or not
        if path is None:
            notes.append(f"{student}: the submission has no {notebook}.ipynb; nothing of it was compared.")
            continue
        with costs_one(course.reports(assignment), student, f"comparing {path.name}", NOT_COMPARED, notes):
            found[notebook] = _answer_fingerprints(path, student, starter, notes)
    return found


def _answer_fingerprints(path: Path, student: str, starter: dict[str, str], notes: list[str]) -> dict[str, Fingerprint]:
    """The fingerprint of each code answer cell of the notebook at ``path``; an answer longer than
    :data:`MAX_ANSWER` is left out, with a note, and so is the notebook where it cannot be read."""
    data, problem = read_notebook(path)
    if problem:
        notes.append(f"{student}: {path.name} was not compared. {problem}")
        return {}
    found = {}
    for cell, source in answer_cells(data["cells"]):
        if cell not in starter:
            continue
        if len(source) > MAX_ANSWER:
            notes.append(f"{student}: the answer {cell} holds {len(source):,} characters, more than {MAX_ANSWER:,}; "
                         f"it was not compared.")
        else:
            found[cell] = fingerprint(source, starter[cell])
    return found


def _reference_answers(course: Course, assignment: str, notebook: str, notes: list[str]) -> dict[str, str]:
    """The course's solution of each answer cell of ``notebook``, as a student who copied it would hand it in."""
    path = course.root / "source" / assignment / f"{notebook}.ipynb"
    data, problem = read_notebook(path) if path.is_file() else (None, "It is missing.")
    if problem:
        notes.append(f"{path.relative_to(course.root)}: answers were not compared with the course's reference. "
                     f"{problem}")
        return {}
    return {cell: "".join(line for line in source.splitlines(keepends=True) if line.strip() not in SOLUTION_MARKERS)
            for cell, source in answer_cells(data["cells"])}


def _public_answers(course: Course, assignment: str, cells: set[str], notes: list[str]
                    ) -> dict[str, list[tuple[str, str]]]:
    """The public implementations of each answer cell, cell -> [(file name, code)], from
    ``<similarity_corpus>/<assignment>/<cell>/*.py``."""
    folder = course.root / course.settings.similarity_corpus / assignment
    if not folder.is_dir():
        notes.append(f"No public code for {assignment} in {folder} (c.Autograder.similarity_corpus): answers were "
                     f"compared with classmates' and the course's reference only.")
        return {}
    found: dict[str, list[tuple[str, str]]] = {}
    for path in sorted(folder.glob("*/*.py")):
        if path.parent.name not in cells:
            notes.append(f"{path}: {assignment} has no code answer cell {path.parent.name!r}; the file was not used.")
            continue
        try:
            found.setdefault(path.parent.name, []).append((path.name, path.read_text(errors="replace")))
        except OSError as error:
            notes.append(f"{path}: could not be read ({error.strerror}); the file was not used.")
    return found
