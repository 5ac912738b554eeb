"""The ``autograder`` command.

    autograder grade ASSIGNMENT [--student ID ...] [--workers N]   grade submitted/ into the gradebook
    autograder grade ASSIGNMENT --shard i/N                         grade one slice of N (0 <= i < N)
    autograder merge ASSIGNMENT                                     record the graded slices in the gradebook
    autograder validate NOTEBOOK                                    a student's check before submitting
    autograder feedback ASSIGNMENT                                  feedback pages from the last grading
    autograder report ASSIGNMENT                                    class report (HTML) and LMS exports
    autograder demo                                                 a small class, graded end to end

Run ``grade``, ``merge``, ``feedback`` and ``report`` from the course folder (where
nbgrader_config.py is), or pass ``--course DIR``.
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


def shard_of(text: str) -> tuple[int, int]:
    """``"i/N"`` as ``(i, N)``, with 0 <= i < N (a Kubernetes Indexed Job's completion index)."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard takes i/N, for example 0/3; got {text!r}") from None
    if not 0 <= index < count:
        raise argparse.ArgumentTypeError(f"--shard i/N needs 0 <= i < N; got {text!r}")
    return index, count


def grade(args) -> int:
    from autograder import feedback, grading, record, runner

    course = grading.Course(args.course)
    isolation = _isolation(args)
    students = args.student or course.students(args.assignment)
    if args.shard:
        index, count = args.shard
        students = students[index::count]
    if not students:
        print(f"No submissions of {args.assignment} in {course.root / 'submitted'}"
              + (f" for shard {index}/{count}." if args.shard else "."))
        return 0
    settings = runner.RunSettings(cell_seconds=args.cell_timeout)
    with tqdm(total=len(students), desc=f"grading {args.assignment}", unit="submission", file=sys.stderr) as bar:
        assignment, graded = grading.grade_class(course, args.assignment, students, args.workers, settings,
                                                 isolation, progress=lambda student: bar.update())
    for result, pres in graded:
        grading.write_report(course, result)
        record.write_autograded(course, result, pres, assignment.release)
        answers = {nb: feedback.answers_of(pre.notebook["cells"]) for nb, pre in pres.items() if pre.notebook}
        feedback.write_feedback(course, result, answers)
    if args.shard:
        print(f"Shard {index}/{count}: {len(students)} submissions graded into {course.reports(args.assignment)}. "
              f"Once every shard is done: autograder merge {args.assignment}")
        return 0
    return record_results(course, args.assignment, [result for result, _ in graded])


def record_results(course, assignment: str, results) -> int:
    """Scores into the gradebook, ``grades.csv``, and a table and the flags on the screen."""
    from autograder import record

    record.ensure_assignment_in_gradebook(course, assignment)
    for result in results:
        record.record_in_gradebook(course, result)
    csv_path = record.write_grades_csv(course, assignment)
    points = {item.grade_id: item.max_score for result in results for item in result.items}
    print(table(results, points))
    for result in results:
        for flag in result.flags:
            print(f"flag {result.student}: {flag}")
    print(f"\nReports: {course.reports(assignment)} (grades.csv: {csv_path.name}); "
          f"feedback: {course.root / 'feedback'}; scores are in gradebook.db for nbgrader formgrader.")
    return 0


def merge_command(args) -> int:
    from autograder import grading

    course = grading.Course(args.course)
    results = grading.load_results(course, args.assignment)
    if not results:
        print(f"No reports for {args.assignment} in {course.reports(args.assignment)}: "
              f"run `autograder grade {args.assignment} --shard i/N` for each shard first.")
        return 1
    return record_results(course, args.assignment, results)


def feedback_command(args) -> int:
    from autograder import feedback, grading

    course = grading.Course(args.course)
    results = grading.load_results(course, args.assignment)
    if not results:
        print(f"No reports for {args.assignment}: run `autograder grade {args.assignment}` first.")
        return 1
    for result in results:
        folder = course.root / "autograded" / result.student / result.assignment
        answers = {nb.stem: feedback.answers_of(json.loads(nb.read_text())["cells"]) for nb in folder.glob("*.ipynb")}
        for page in feedback.write_feedback(course, result, answers):
            print(page)
    return 0


def report_command(args) -> int:
    from autograder import grading, report

    course = grading.Course(args.course)
    written = report.write_reports(course, args.assignment)
    if written is None:
        print(f"No reports for {args.assignment} in {course.reports(args.assignment)}: "
              f"run `autograder grade {args.assignment}` first.")
        return 1
    print(f"Class report: {written['report']}\nLMS scores (a row per student, a column per item): {written['lms']}\n"
          f"Gradescope results: {written['gradescope'] / '<student>' / 'results.json'}")
    return 0


def validate_command(args) -> int:
    from autograder.validate import validate

    return 1 if validate(Path(args.notebook)) else 0


def demo_command(args) -> int:
    from autograder.demo import run_demo

    return run_demo(args)


def build_parser() -> argparse.ArgumentParser:
    """The command line of every subcommand (the container and the Kubernetes Jobs use it too)."""
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
    p.add_argument("--shard", type=shard_of, metavar="i/N",
                   help="grade only slice i of N (0 <= i < N) and leave the gradebook to `autograder merge`")
    course_options(p)
    p.set_defaults(run=grade)

    p = sub.add_parser("merge", help="record every graded slice in the gradebook, grades.csv and the table")
    p.add_argument("assignment")
    course_options(p, sandboxed=False)
    p.set_defaults(run=merge_command)

    p = sub.add_parser("validate", help="run a notebook's visible checks, as a student would")
    p.add_argument("notebook")
    p.set_defaults(run=validate_command)

    p = sub.add_parser("feedback", help="write feedback pages from the last grading")
    p.add_argument("assignment")
    course_options(p, sandboxed=False)
    p.set_defaults(run=feedback_command)

    p = sub.add_parser("report", help="class report and LMS exports from the last grading")
    p.add_argument("assignment")
    course_options(p, sandboxed=False)
    p.set_defaults(run=report_command)

    p = sub.add_parser("demo", help="grade a small made-up class end to end, in a temporary folder")
    p.add_argument("--keep", metavar="DIR", help="build the demo course in DIR and keep it")
    p.add_argument("--unsafe-no-sandbox", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(run=demo_command)

    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from autograder.record import nbgrader_env

    os.environ["PATH"] = nbgrader_env()["PATH"]  # nbgrader's gradebook needs alembic from this environment
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
