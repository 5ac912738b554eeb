"""The ``autograder`` command.

    autograder grade ASSIGNMENT [--student ID ...] [--workers N]   grade submitted/ into the gradebook
    autograder grade ASSIGNMENT --shard i/N                         grade one slice of N (0 <= i < N)
    autograder grade ASSIGNMENT --regrade                           grade again what older hidden checks graded
    autograder merge ASSIGNMENT                                     record the graded slices in the gradebook
    autograder validate NOTEBOOK                                    a student's check before submitting
    autograder feedback ASSIGNMENT                                  feedback pages from the last grading
    autograder report ASSIGNMENT [--canvas-column 'Title (id)']     class report (HTML) and LMS exports
    autograder similarity ASSIGNMENT [--threshold X]                similar answers: classmates, reference, public code
    autograder audit ASSIGNMENT [--tables]                          how well the hidden checks catch, name and keep
    autograder demo [--keep DIR]                                    a small class, graded end to end in DIR
    autograder k8s ASSIGNMENT --shards N [--part merge]             Kubernetes Jobs that grade in shards
    autograder serve                                                students' checks before the deadline (Hub service)
    autograder student-kit OUT_DIR                                  what students receive: notebooks and package, no answers
    autograder new-assignment NN_name [--concept NAME]              a new assignment's files, each with a TODO to write

Run ``grade``, ``merge``, ``feedback``, ``report`` and ``similarity`` from the course folder (where
nbgrader_config.py is), or pass ``--course DIR``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
from pathlib import Path

from tqdm import tqdm


def shard_of(text: str) -> tuple[int, int]:
    """``"i/N"`` as ``(i, N)``, with 0 <= i < N (a Kubernetes Indexed Job's completion index)."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard takes i/N, for example 0/3; got {text!r}") from None
    if not 0 <= index < count:
        raise argparse.ArgumentTypeError(f"--shard i/N needs 0 <= i < N; got {text!r}")
    return index, count


def course_of(args):
    """The command's course folder, with its settings and the command line's overrides of them."""
    from autograder.reading import course_folder
    from autograder.reading.config import load_settings
    from autograder.reading.course import Course

    root = Path(args.course).resolve()
    course_folder.check(root)
    course = Course(root, load_settings(root, workers=getattr(args, "workers", None),
                                        cell_timeout=getattr(args, "cell_timeout", None),
                                        unsafe_no_sandbox=getattr(args, "unsafe_no_sandbox", False) or None))
    course.require(args.assignment)
    return course


@contextlib.contextmanager
def progress_bar(assignment: str):
    """The ``progress`` and ``announce`` hooks of a grading run, drawn as a bar on stderr."""
    with tqdm(desc=f"grading {assignment}", unit="submission", file=sys.stderr, disable=None, delay=0.5) as bar:
        def announce(isolation: str, count: int) -> None:
            print(isolation)
            bar.reset(total=count)
        yield {"progress": lambda student: bar.update(), "announce": announce}


def grade(args) -> int:
    from autograder.reading import course_folder
    from autograder.recording import pipeline

    if args.regrade:
        return regrade_command(args)
    course = course_of(args)
    course_folder.require_submissions(course, args.assignment, args.student)
    with progress_bar(args.assignment) as hooks:
        grades = pipeline.grade_and_record(course, args.assignment, args.student, args.shard, **hooks)
    if not grades.results:
        print(f"No submissions of {args.assignment} in {course.root / 'submitted'}"
              + (f" for shard {args.shard[0]}/{args.shard[1]}." if args.shard else "."))
        return 0
    if args.shard:
        print(f"Shard {args.shard[0]}/{args.shard[1]}: {len(grades.results)} submissions graded into "
              f"{course.reports(args.assignment)}. Once every shard is done: autograder merge {args.assignment}")
        return 0
    show(course, grades)
    return 0


def regrade_command(args) -> int:
    from autograder.reading import course_folder
    from autograder.recording import pipeline, regrade

    course = course_of(args)
    course_folder.require_submissions(course, args.assignment, args.student)
    with progress_bar(args.assignment) as hooks:
        grades, outcome = pipeline.regrade(course, args.assignment, args.student, **hooks)
    if grades.results:
        show(course, grades)
    print("\n".join(regrade.summary(args.assignment, outcome)))
    return 0


def show(course, grades) -> None:
    """The class's table, and where its files are."""
    from autograder.recording import table

    print(table.render(grades.results))
    for note in grades.notes:
        print(f"Note: {note}")
    print(f"\nReports and grades.csv: {course.reports(grades.assignment)}\nFeedback pages: {course.root / 'feedback'}\n"
          "Scores: in the gradebook; grade written answers by hand in nbgrader formgrader.")


def merge_command(args) -> int:
    from autograder.recording import pipeline

    course = course_of(args)
    show(course, pipeline.merge(course, args.assignment))
    return 0


def feedback_command(args) -> int:
    from autograder.recording import pipeline

    pages, notes = pipeline.write_class_feedback(course_of(args), args.assignment)
    for page in pages:
        print(page)
    for note in notes:
        print(f"Note: {note}")
    return 0


def report_command(args) -> int:
    from autograder.recording import report

    course = course_of(args)
    written = report.write_reports(course, args.assignment, args.canvas_column)
    if written is None:
        print(f"No reports for {args.assignment} in {course.reports(args.assignment)}: "
              f"run `autograder grade {args.assignment}` first.")
        return 1
    print(f"Class report: {written['report']}\n"
          f"Scores (a row per student, a column per item, the late penalty): {written['scores']}\n"
          + (f"Canvas gradebook import: {written['canvas']}\n" if written["canvas"] else
             f"No Canvas import: the gradebook holds no submission of {args.assignment}.\n")
          + f"Gradescope autograder archive: {written['gradescope_archive']} "
          f"(each student's results.json: {written['gradescope'] / '<student>' / 'results.json'})")
    if written["no_email"]:
        print(f"Left out of the Gradescope archive, for want of an email in the gradebook: "
              f"{', '.join(written['no_email'])} (nbgrader db student add ID --email=...)")
    if written["guide"]:
        print(f"Grading guide of the written answers, for TAs: {written['guide']}")
    stale = written["stale"]
    if stale:
        print(f"The feedback pages of {len(stale)} student(s) predate hand grades or comments recorded since "
              f"({', '.join(stale[:5])}{', ...' if len(stale) > 5 else ''}): make them again with "
              f"autograder feedback {args.assignment}")
    return 0


def similarity_command(args) -> int:
    from autograder.recording.similarity import CLASSMATE, PUBLIC, REFERENCE
    from autograder.recording.similarity_report import write_similarity

    course = course_of(args)
    written = write_similarity(course, args.assignment, args.threshold)
    if written is None:
        print(f"No submissions of {args.assignment} in {course.root / 'submitted'}: nothing to compare. Collect them "
              f"first (nbgrader collect or zip_collect).")
        return 1
    result = written.result
    print(f"{args.assignment}: {len(result.students)} submissions, each answer cell compared with classmates', the "
          f"course's reference and {result.public_files} file(s) of public code. Pairs with a similarity of "
          f"{result.threshold:.2f} or more:")
    for cell in result.cells:
        groups = f"; groups of {', '.join(str(len(g)) for g in cell.groups)} students" if cell.groups else ""
        print(f"  {cell.cell}: {cell.count(CLASSMATE)} with a classmate, {cell.count(REFERENCE)} with the reference, "
              f"{cell.count(PUBLIC)} with public code ({sum(bool(p.weak) for p in cell.pairs)} weak evidence){groups}")
    for note in result.notes:
        print(f"Note: {note}")
    print(f"Page, for staff only: {written.page}\nA row per student: {written.csv}")
    return 0


def validate_command(args) -> int:
    from autograder.commands.validate import validate

    return 1 if validate(Path(args.notebook)) else 0


def demo_command(args) -> int:
    import time

    from autograder.commands import demo

    started = time.monotonic()
    root = Path(args.keep).resolve()
    print(f"Demo course folder: {root}")
    course, grades, paths = demo.run_demo(root, args.unsafe_no_sandbox,
                                          announce=lambda isolation, count: print(isolation))
    show(course, grades)
    for what, path in paths.items():
        print(f"The {what}: {path}")
    print(f"Demo finished in {time.monotonic() - started:.0f} s.")
    return 0


def audit_command(args) -> int:
    from autograder.commands import audit

    from autograder.commands import audit_tables

    course = course_of(args)
    if args.tables:
        audit_tables.require(course.root, args.assignment)
    with progress_bar(f"the audit bank of {args.assignment}") as hooks:
        audits, found = audit.run(course, args.assignment, **hooks)
    print(audit.table(audits))
    for problem in found:
        print(problem.line())
    written = audit.write(course, args.assignment, audits, found)
    print(f"\nAudit: {written['audit']}\nFigure: {written['figure']}")
    if args.tables:
        changed = audit_tables.write(course.root, args.assignment, audit.table(audits))
        print(f"Tables written: {', '.join(map(str, changed))}" if changed else "Tables: already the audit's.")
    return 1 if any(not problem.known for problem in found) else 0


def k8s_command(args) -> int:
    from autograder.commands import k8s_jobs
    from autograder.reading.errors import GradingError

    try:
        print(k8s_jobs.render(args.assignment, args.shards, image=args.image, claim=args.claim, workers=args.workers,
                              part=args.part))
    except ValueError as error:
        raise GradingError(str(error)) from None
    return 0


def serve_command(args) -> int:
    from autograder.reading.errors import GradingError
    from autograder.reading.course import Course
    from autograder.service import web

    course = Course(Path(args.course).resolve())  # a folder without nbgrader_config.py is refused here
    if not (course.root / "release").is_dir():
        raise GradingError(f"{course.root} has no release/ folder: students can only check released assignments.")
    web.serve(course.root)
    return 0


def student_kit_command(args) -> int:
    from autograder.commands import student_kit

    wheel = student_kit.build(Path(args.out_dir))
    out = Path(args.out_dir).resolve()
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"student kit: {out} ({size / 2**20:.1f} MiB; the package {wheel.name}, {wheel.stat().st_size / 2**20:.1f} "
          "MiB). It holds no solution, model answer, hidden check or reference: publish this folder.")
    return 0


def new_assignment_command(args) -> int:
    from autograder.commands import new_assignment

    return new_assignment.announce(Path(args.course).resolve(), args.name, args.concept)


def build_parser() -> argparse.ArgumentParser:
    """The command line of every subcommand (the container and the Kubernetes Jobs use it too)."""
    parser = argparse.ArgumentParser(prog="autograder", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    add_grading_commands(sub)
    add_course_commands(sub)
    return parser


def course_options(p: argparse.ArgumentParser, sandboxed: bool = True) -> None:
    """The course folder and, for commands that run student code, the sandbox's switch."""
    p.add_argument("--course", default=os.getcwd(), help="the course folder (default: here)")
    if sandboxed:
        p.add_argument("--unsafe-no-sandbox", action="store_true",
                       help="run student code without bubblewrap (only where a container is the wall)")


def assignment_parser(sub, name: str, run, help: str, course: bool = True, sandboxed: bool = False):
    """The subcommand ``name``, which takes an assignment (of the course folder, with ``course``)."""
    p = sub.add_parser(name, help=help)
    p.add_argument("assignment")
    if course:
        course_options(p, sandboxed)
    p.set_defaults(run=run)
    return p


def add_grading_commands(sub) -> None:
    """grade, merge, audit and k8s: the commands that grade submissions or plan their grading."""
    p = assignment_parser(sub, "grade", grade, "grade the submissions of an assignment", sandboxed=True)
    p.add_argument("--student", action="append", help="grade only this student (repeatable)")
    p.add_argument("--workers", type=int, help="submissions graded side by side (default: c.Autograder.workers, "
                                               "one per core)")
    p.add_argument("--cell-timeout", type=float, help="seconds allowed to each cell and each check (default: "
                                                      "c.Autograder.cell_timeout, 30)")
    once = p.add_mutually_exclusive_group()
    once.add_argument("--shard", type=shard_of, metavar="i/N",
                      help="grade only slice i of N (0 <= i < N) and leave the gradebook to `autograder merge`")
    once.add_argument("--regrade", action="store_true",
                      help="grade again only the submissions whose report is from other hidden checks (or missing), "
                           "and write changes.csv: what changed, item by item")

    assignment_parser(sub, "merge", merge_command,
                      "record every graded slice in the gradebook, grades.csv and the table")

    p = assignment_parser(sub, "audit", audit_command, "grade the assignment's bank of mistakes and correct "
                          "alternatives, item by item", sandboxed=True)
    p.add_argument("--workers", type=int, help="submissions graded side by side (default: c.Autograder.workers)")
    p.add_argument("--tables", action="store_true", help="write the audit's table of the assignment into README.md "
                                                         "and docs/grading.md of the course folder (the repository)")

    p = assignment_parser(sub, "k8s", k8s_command,
                          "print Kubernetes Jobs that grade an assignment in shards, then merge", course=False)
    p.add_argument("--shards", type=int, default=4, help="pods that grade side by side (default: 4)")
    p.add_argument("--image", default="self-attention-grader:latest", help="the TA container's image")
    p.add_argument("--claim", default="self-attention-course", help="the course folder's PersistentVolumeClaim")
    p.add_argument("--workers", type=int, default=2, help="submissions each pod grades side by side")
    p.add_argument("--part", choices=("grade", "merge"), default="grade",
                   help="the Job that grades the shards, or the one that merges them once they are complete")


def add_course_commands(sub) -> None:
    """The commands that read, show or add to a course: validate, feedback, report, similarity, demo,
    the student kit, a new assignment and the grading service."""
    p = sub.add_parser("validate", help="run a notebook's visible checks, as a student would")
    p.add_argument("notebook")
    p.set_defaults(run=validate_command)

    assignment_parser(sub, "feedback", feedback_command, "write feedback pages from the last grading")
    p = assignment_parser(sub, "report", report_command, "class report and LMS exports from the last grading")
    p.add_argument("--canvas-column", default="", help="canvas.csv's assignment column, as Canvas names the "
                                                       "assignment: 'Title (id)' (default: the assignment's name)")
    p = assignment_parser(sub, "similarity", similarity_command,
                          "compare each answer with classmates', the course's reference and public code")
    p.add_argument("--threshold", type=float, help="the similarity (0 to 1) from which pairs are listed (default: "
                                                   "c.Autograder.similarity_threshold, 0.5)")

    p = sub.add_parser("demo", help="grade a small made-up class end to end, in a course folder it keeps")
    p.add_argument("--keep", metavar="DIR", default="demo-course",
                   help="the demo's course folder, emptied first (default: demo-course, here)")
    p.add_argument("--unsafe-no-sandbox", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(run=demo_command)

    p = sub.add_parser("student-kit", help="build what students receive (release and lecture notebooks, the student "
                                           "package) into a new folder, and check that it holds no answer")
    p.add_argument("out_dir", help="the kit's folder: new, or empty")
    p.set_defaults(run=student_kit_command)

    p = sub.add_parser("new-assignment", help="write a new assignment's files, each with a TODO where its author "
                                              "writes (and a new concept's module, with --concept)")
    p.add_argument("name", help="the assignment's folder name: two digits, an underscore, a name (07_alibi)")
    p.add_argument("--concept", metavar="NAME", help="also write transformer_lm/instructor/concepts/NAME.py")
    course_options(p, sandboxed=False)
    p.set_defaults(run=new_assignment_command)

    p = sub.add_parser("serve", help="the JupyterHub service that grades students' checks before the deadline")
    course_options(p, sandboxed=False)
    p.set_defaults(run=serve_command)


def main(argv: list[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):
        # A student id is a folder's name, whose bytes need not be text: printed with backslash escapes.
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    args = build_parser().parse_args(argv)
    from autograder.reading.course_folder import refused
    from autograder.reading.errors import GradingError

    try:
        return args.run(args)
    except GradingError as error:
        print(f"autograder {args.command}: {error}", file=sys.stderr)
        return 2
    except PermissionError as error:  # a file the check of the course folder cannot foresee: said as plainly
        print(f"autograder {args.command}: {refused(Path(error.filename or '?'), 'was refused access to')}",
              file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
