"""``autograder new-assignment NN_name [--concept NAME]``: every file a new assignment needs, each
with a TODO where its author writes.

It writes the solution notebook (``source/NN_name/name.ipynb``, with nbgrader's metadata and
``metadata.language_info``), the hidden checks (``<checks_dir>/NN_name.py``) and their audit bank
(``<checks_dir>/audit/NN_name.py``), the assignment's test module (``tests/test_assignment_NN.py``),
and adds its row to the table of ``tests/assignments.py``; with ``--concept``, also the concept's
module (``transformer_lm/instructor/concepts/NAME.py``: its reference, its mistakes and its group
of visible checks), which the notebook's one item, its function and its checks then take the name
of. It refuses, before it writes anything, a malformed name, a number or a name the course has
already, and any file that exists: it never overwrites one. docs/adding-an-assignment.md is the
guide that goes on from there.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass
from pathlib import Path
from string import Template

import nbformat

from autograder.reading.course import Course
from autograder.reading.errors import GradingError

TEMPLATES = Path(__file__).resolve().parent / "assignment_templates"
NAME = re.compile(r"(\d\d)_([a-z][a-z0-9_]*)")
CONCEPT = re.compile(r"[a-z][a-z0-9_]*")
TABLE_END = "\n)\n\nBY_NAME"
"""Where the table of ``tests/assignments.py`` closes: the new row goes just before it."""


@dataclass(frozen=True)
class NewAssignment:
    """The names a new assignment's files are made of."""

    name: str
    concept: str | None = None

    @property
    def number(self) -> str:
        return self.name[:2]

    @property
    def short(self) -> str:
        return self.name[3:]

    @property
    def item(self) -> str:
        """The one item the skeleton has: the concept's name, where there is one."""
        return self.concept or self.short

    @property
    def notebook(self) -> str:
        return f"{self.short}.ipynb"

    def fill(self, template: str) -> str:
        """The template file ``template`` with this assignment's names in it."""
        return Template((TEMPLATES / template).read_text()).substitute(
            name=self.name, number=self.number, short=self.short, item=self.item, notebook=self.notebook,
            concept=self.concept or "", cell=self.item.replace("_", "-"))


def check_names(course: Course, new: NewAssignment) -> None:
    """Refuses a name that is malformed or that the course already has, and a malformed or taken concept."""
    if not NAME.fullmatch(new.name) or keyword.iskeyword(new.short):
        raise GradingError(f"{new.name!r} is not a name for an assignment: write two digits, an underscore and a "
                           "name in lower case of letters, digits and underscores, such as 07_alibi.")
    known = course.assignments()
    taken = [name for name in known if name[:2] == new.number or name == new.name]
    if taken:
        free = next((f"{n:02d}" for n in range(1, 100) if not any(name[:2] == f"{n:02d}" for name in known)), "NN")
        raise GradingError(f"The course has {taken[0]} already, so the number {new.number} is taken. "
                           f"Choose a number no assignment has, such as {free}_{new.short}.")
    if new.concept is not None and (not CONCEPT.fullmatch(new.concept) or keyword.iskeyword(new.concept)):
        raise GradingError(f"{new.concept!r} is not a name for a concept: it names a Python module and the function "
                           "of its reference, so write it in lower case, of letters, digits and underscores, such as "
                           "alibi_attention.")


def planned_files(course: Course, new: NewAssignment) -> dict[Path, str]:
    """Each file to write, with its text."""
    checks = course.checks_file(new.name)
    files = {
        course.root / "source" / new.name / new.notebook: new.fill("notebook.ipynb.txt"),
        checks: new.fill("checks_concept.py.txt" if new.concept else "checks.py.txt"),
        checks.parent / "audit" / checks.name: new.fill("audit_bank.py.txt"),
        course.root / "tests" / f"test_assignment_{new.number}.py": new.fill("test_assignment.py.txt"),
    }
    if new.concept:
        files[course.root / "transformer_lm" / "instructor" / "concepts" / f"{new.concept}.py"] = \
            new.fill("concept.py.txt")
    return files


def table_with_row(course: Course, new: NewAssignment) -> tuple[Path, str]:
    """``tests/assignments.py`` with the new assignment's row at the end of its table."""
    table = course.root / "tests" / "assignments.py"
    if not table.is_file():
        raise GradingError(f"{course.root} has no tests/assignments.py: run this in the course's repository, or "
                           "pass --course DIR. Nothing was written.")
    text = table.read_text()
    if text.count(TABLE_END) != 1:
        raise GradingError(f"{table} does not end its table ASSIGNMENTS with a line ')' just before BY_NAME, where "
                           "the new row goes. Put it back in that shape, or add the row by hand. Nothing was written.")
    return table, text.replace(TABLE_END, "\n" + new.fill("row.py.txt").rstrip("\n") + TABLE_END)


def write(course_root: Path, name: str, concept: str | None = None) -> list[Path]:
    """Writes the new assignment's files and its row; returns the paths written, or refuses
    (:class:`GradingError`) with nothing written."""
    root = Path(course_root).resolve()
    if not (root / "nbgrader_config.py").is_file():
        raise GradingError(f"{root} is not a course folder: it has no nbgrader_config.py. Run this in the course's "
                           "repository, or pass --course DIR.")
    course = Course(root)
    new = NewAssignment(name, concept)
    check_names(course, new)
    files = planned_files(course, new)
    there = [path for path in files if path.exists()]
    if there:
        raise GradingError(f"{there[0]} exists already, and new-assignment never overwrites a file. Move it away, or "
                           "choose another name. Nothing was written.")
    table, text = table_with_row(course, new)
    notebook = next(iter(files))
    made = nbformat.reads(files[notebook], as_version=4)
    nbformat.validate(made)
    files[notebook] = nbformat.writes(made) + "\n"
    for path, body in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "x") as handle:
            handle.write(body)
    table.write_text(text)
    return [*files, table]


def announce(root: Path, name: str, concept: str | None) -> int:
    """Writes the new assignment and prints each file written, with its count of TODOs."""
    *files, table = write(root, name, concept)
    print(f"New assignment {name}: each file has a TODO where you write.")
    for path in files:
        todos = sum("TODO" in line for line in path.read_text().splitlines())
        print(f"  {path.relative_to(root)}  ({todos} TODO)")
    row_todos = NewAssignment(name, concept).fill("row.py.txt").count("TODO")
    print(f"  {table.relative_to(root)}  (its row, at the end of the table: {row_todos} TODO)")
    print("Then follow docs/adding-an-assignment.md from step 2: the stored values, the release, the audit, a class "
          "graded.")
    return 0
