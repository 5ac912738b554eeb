"""Seconds per submission of ``autograder grade``, assignment by assignment.

    .venv/bin/python benchmarks/grader_speed.py [--students 12] [--workers 2] [ASSIGNMENT ...]

Each assignment's class is made of its solution (every answer right), the blank release, and
the solution with its first answer cell blanked, which makes the grader judge the items that
build on that answer with the course's stand-ins (the costlier path), in a fixed rotation. The
class is graded through the library's one entry point, as ``autograder grade`` does (preflight,
the sandbox, the trusted comparison, the gradebook and the pages), and the script prints the
seconds per submission of each assignment and of all together.

It is the anchor for changes to how a run is isolated and checked: compare the figure of a
change with the figure of the commit before it, on the same machine (the sandbox's start, paid
once per worker, is part of the time, as it is in a real grading run).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autograder.reading import cells  # noqa: E402
from autograder.recording import pipeline
from autograder.reading.config import load_settings  # noqa: E402
from autograder.reading.course import Course  # noqa: E402
from autograder.commands.demo import make_course  # noqa: E402


def solution_cells(source: dict) -> dict[str, str]:
    """The source notebook's answer cells, by grade_id."""
    return cells.answers([cell for cell in source.cells if cell.cell_type == "code"])


def filled(release: dict, answers: dict[str, str]) -> dict:
    """The release with the answer cells of ``answers`` filled in."""
    notebook = nbformat.from_dict(release)
    for cell in notebook.cells:
        if cells.grade_id(cell) in answers:
            cell.source = answers[cells.grade_id(cell)]
    return notebook


def make_class(root: Path, assignment: str, students: int) -> None:
    """A course folder of ``assignment`` with ``students`` submissions in the rotation above."""
    make_course(root, assignment, generate=False)
    name = next((REPO / "source" / assignment).glob("*.ipynb")).name
    release = nbformat.read(root / "release" / assignment / name, as_version=4)
    answers = solution_cells(nbformat.read(REPO / "source" / assignment / name, as_version=4))
    first = next(iter(answers))
    rotation = [filled(release, answers), release, filled(release, {k: v for k, v in answers.items() if k != first})]
    for index in range(students):
        folder = root / "submitted" / f"student_{index:03d}" / assignment
        folder.mkdir(parents=True)
        nbformat.write(rotation[index % len(rotation)], folder / name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assignments", nargs="*", help="default: every assignment in source/")
    parser.add_argument("--students", type=int, default=12, help="submissions per assignment (default 12)")
    parser.add_argument("--workers", type=int, default=2, help="submissions graded side by side (default 2)")
    args = parser.parse_args()
    assignments = args.assignments or sorted(p.name for p in (REPO / "source").iterdir() if p.is_dir())
    total_seconds = 0.0
    for assignment in assignments:
        with tempfile.TemporaryDirectory(prefix="grader-speed-") as folder:
            root = Path(folder)
            make_class(root, assignment, args.students)
            course = Course(root, load_settings(root, workers=args.workers))
            start = time.perf_counter()
            pipeline.grade_and_record(course, assignment)
            seconds = time.perf_counter() - start
        total_seconds += seconds
        print(f"{assignment:26s} {seconds / args.students:6.2f} s per submission ({args.students} submissions, "
              f"{args.workers} workers)", flush=True)
    print(f"{'all':26s} {total_seconds / (args.students * len(assignments)):6.2f} s per submission")


if __name__ == "__main__":
    main()
