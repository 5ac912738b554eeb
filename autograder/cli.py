"""The ``autograder`` command.

    autograder grade ASSIGNMENT [--student ID ...] [--workers N]   grade submitted/ into the gradebook
    autograder validate NOTEBOOK                                    a student's check before submitting
    autograder feedback ASSIGNMENT                                  feedback pages from the last grading
    autograder demo                                                 a small class, graded end to end

Run ``grade`` and ``feedback`` from the course folder (where nbgrader_config.py is), or
pass ``--course DIR``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from tqdm import tqdm


def _isolation(args):
    from autograder import sandbox

    isolation = sandbox.detect_isolation()
    if isolation.name == "none":
        if not args.unsafe_no_sandbox:
            raise SystemExit(f"Refusing to run student code without a sandbox: {isolation.detail}\n"
                             "Install bubblewrap (sudo apt-get install bubblewrap), or, inside a container that "
                             "is itself the wall, pass --unsafe-no-sandbox.")
        print(f"WARNING: no sandbox ({isolation.detail}); student code runs with only process limits.")
    else:
        print(f"Isolation: {isolation.name}: {isolation.detail}")
    return isolation


def table(results, points: dict[str, float]) -> str:
    """A row per student and a column per item: score and status."""
    ids = list(points)
    width = max([12] + [len(i) for i in ids])
    head = f"{'student':<14}{'total':>9}  " + "  ".join(f"{i:<{width}}" for i in ids)
    lines = [head, "-" * len(head)]
    for result in results:
        by_id = {i.grade_id: i for i in result.items}
        cells = [f"{by_id[i].score:g}/{by_id[i].max_score:g} {by_id[i].status}" if i in by_id else "-" for i in ids]
        lines.append(f"{result.student:<14}{result.total:>5g}/{result.max_total:<3g}  "
                     + "  ".join(f"{c:<{width}}" for c in cells))
    return "\n".join(lines)


def grade(args) -> int:
    from autograder import feedback, grading, record, runner

    course = grading.Course(args.course)
    isolation = _isolation(args)
    record.ensure_assignment_in_gradebook(course, args.assignment)
    students = args.student or course.students(args.assignment)
    if not students:
        print(f"No submissions of {args.assignment} in {course.root / 'submitted'}.")
        return 0
    settings = runner.RunSettings(cell_seconds=args.cell_timeout)
    with tqdm(total=len(students), desc=f"grading {args.assignment}", unit="submission", file=sys.stderr) as bar:
        assignment, graded = grading.grade_class(course, args.assignment, students, args.workers, settings,
                                                 isolation, progress=lambda student: bar.update())
    for result, pres in graded:
        grading.write_report(course, result)
        record.write_autograded(course, result, pres, assignment.release)
        record.record_in_gradebook(course, result, pres)
        answers = {nb: feedback.answers_of(pre.notebook["cells"]) for nb, pre in pres.items() if pre.notebook}
        feedback.write_feedback(course, result, answers)
    csv_path = record.write_grades_csv(course, args.assignment)
    print(table([r for r, _ in graded], assignment.points))
    for result, _ in graded:
        for flag in result.flags:
            print(f"flag {result.student}: {flag}")
    print(f"\nReports: {course.reports(args.assignment)} (grades.csv: {csv_path.name}); "
          f"feedback: {course.root / 'feedback'}; scores are in gradebook.db for nbgrader formgrader.")
    return 0


def feedback_command(args) -> int:
    from autograder import feedback, grading

    course = grading.Course(args.course)
    reports = sorted(course.reports(args.assignment).glob("*.json"))
    if not reports:
        print(f"No reports for {args.assignment}: run `autograder grade {args.assignment}` first.")
        return 1
    for path in reports:
        data = json.loads(path.read_text())
        result = grading.SubmissionResult(**{**data, "items": [grading.ItemResult(**i) for i in data["items"]]})
        folder = course.root / "autograded" / result.student / result.assignment
        answers = {nb.stem: feedback.answers_of(json.loads(nb.read_text())["cells"]) for nb in folder.glob("*.ipynb")}
        for page in feedback.write_feedback(course, result, answers):
            print(page)
    return 0


def validate_command(args) -> int:
    from autograder.validate import validate

    return 1 if validate(Path(args.notebook)) else 0


def demo_command(args) -> int:
    from autograder.demo import run_demo

    return run_demo(args)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="autograder", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def course_options(p, sandboxed=True):
        p.add_argument("--course", default=os.getcwd(), help="the course folder (default: here)")
        if sandboxed:
            p.add_argument("--unsafe-no-sandbox", action="store_true",
                           help="run student code without bubblewrap (only where a container is the wall)")

    p = sub.add_parser("grade", help="grade the submissions of an assignment")
    p.add_argument("assignment")
    p.add_argument("--student", action="append", help="grade only this student (repeatable)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="submissions graded side by side")
    p.add_argument("--cell-timeout", type=float, default=30.0, help="seconds allowed to each cell and each check")
    course_options(p)
    p.set_defaults(run=grade)

    p = sub.add_parser("validate", help="run a notebook's visible checks, as a student would")
    p.add_argument("notebook")
    p.set_defaults(run=validate_command)

    p = sub.add_parser("feedback", help="write feedback pages from the last grading")
    p.add_argument("assignment")
    course_options(p, sandboxed=False)
    p.set_defaults(run=feedback_command)

    p = sub.add_parser("demo", help="grade a small made-up class end to end, in a temporary folder")
    p.add_argument("--keep", metavar="DIR", help="build the demo course in DIR and keep it")
    p.add_argument("--unsafe-no-sandbox", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(run=demo_command)

    args = parser.parse_args(argv)
    from autograder.record import nbgrader_env

    os.environ["PATH"] = nbgrader_env()["PATH"]  # nbgrader's gradebook needs alembic from this environment
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
