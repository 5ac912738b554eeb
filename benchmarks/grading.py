"""Grading throughput: ``autograder grade`` against plain ``nbgrader autograde``, on one class.

    .venv/bin/python benchmarks/grading.py [--students 40] [--workers N] [--keep DIR]

The anchor is plain nbgrader: a course whose test cells hold hidden tests that do the same
checks as the trusted pipeline, in the student's kernel (``benchmarks/in_kernel.py``), graded
by ``nbgrader autograde`` with its own ``Execute`` step. The class is assignment 02: the
solution and typical mistakes (no scaling, softmax over the wrong dimension, heads merged
without a transpose, a PEP 8 slip, the blank release), in a fixed rotation.

Both ways grade the same notebooks, one after the other, on this machine. The script prints
seconds per submission for each, the ratio (nbgrader's time over the autograder's: above 1,
the autograder is faster), the largest resident memory of any one process of each run
(the grader, a sandbox or a kernel), and each item where the two ways' scores differ. It fails
(exit 1) if the anchor gave every submission 0, or if an item differs for a reason that
``EXPECTED_DIFFERENCES`` does not give: the PEP 8 point, which only the autograder checks, and
"one mistake costs once", which only the autograder applies. The goal is a ratio of at least 30
on 2 cores, with no process over 400 MiB.

Both courses are released by nbgrader before either is timed, as an instructor's course is when it
is graded: neither way pays ``nbgrader generate_assignment`` in its time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from nbgrader.api import Gradebook  # noqa: E402

from autograder.reading.cells import grade_id, role  # noqa: E402
from autograder.reading.course import Course  # noqa: E402
from autograder.commands.demo import make_course  # noqa: E402
from autograder.recording.record import nbgrader_env  # noqa: E402
from benchmarks import in_kernel  # noqa: E402

ASSIGNMENT = "02_multihead_attention"
NOTEBOOK = "multihead_attention.ipynb"
MISTAKES = {
    "no_scaling": ("self_attention", "scores = q @ k.transpose(1, 2) / self.scale", "scores = q @ k.transpose(1, 2)"),
    "softmax_dim": ("multihead_self_attention", "probs = torch.softmax(scores, dim=-1)",
                    "probs = torch.softmax(scores, dim=1)"),
    "no_transpose": ("multihead_self_attention", "att = att.transpose(1, 2).reshape(bs, seq, -1)",
                     "att = att.reshape(bs, seq, -1)"),
    "pep8_slip": ("self_attention", "probs = torch.softmax(scores, dim=-1)   ", "probs=torch.softmax(scores, dim=-1)"),
}
# One mistake costs once: the autograder charges it to the item that asks for that part, and
# judges the items that only build on it with the course's own code in place of the wrong part
# (autograder/reading/spec.py's stand-ins); in the kernel, the student's own code fails them again.
ONCE = "one mistake costs once, the autograder's rule"
EXPECTED_DIFFERENCES = {
    ("softmax_dim", "mha_causal_mask_test"): ONCE,
    ("softmax_dim", "mha_output_test"): ONCE,
    ("no_transpose", "mha_scores_test"): ONCE,
    ("no_transpose", "mha_causal_mask_test"): ONCE,
    ("pep8_slip", "self_attention_forward_test"): "the PEP 8 point, the autograder's only",
}
"""(kind of submission, graded cell) -> why the two ways may score it differently; any other
difference fails the benchmark."""
ROTATION = ["solution", "no_scaling", "solution", "softmax_dim", "solution", "no_transpose", "pep8_slip", "blank"]
HIDDEN = "\n### BEGIN HIDDEN TESTS\nfrom benchmarks.in_kernel import check\ncheck({grade_id!r}, globals())\n" \
         "### END HIDDEN TESTS\n"
PLAIN_NBGRADER = """
# The benchmark's anchor: nbgrader's own Execute step, hidden tests in the kernel.
from nbgrader.preprocessors import Execute, SaveAutoGrades
c.Autograde.autograde_preprocessors = [Execute, IgnorePattern, ClearMetadataPreprocessor, LimitOutput,
                                       SaveAutoGrades, AssignLatePenalties, CheckCellMetadata]
"""
MEASURE = ("import resource, subprocess, sys\n"
           "code = subprocess.run(sys.argv[1:]).returncode\n"
           "print('PEAK_KIB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
           "sys.exit(code)\n")


def submission(kind: str, solution: dict, blank: dict) -> dict:
    """One student's notebook: the solution, the blank release, or the solution with a mistake."""
    if kind == "blank":
        return blank
    notebook = json.loads(json.dumps(solution))
    if kind in MISTAKES:
        target, old, new = MISTAKES[kind]
        cell = next(c for c in notebook["cells"] if grade_id(c) == target)
        source = "".join(cell["source"])
        assert old in source, (kind, old)
        cell["source"] = source.replace(old, new, 1)
    return notebook


def build_class(root: Path, students: int) -> dict[str, str]:
    """The course folder with its submissions; returns each student's kind of submission."""
    make_course(root, ASSIGNMENT)   # released by nbgrader, as the anchor's course is, before either is timed
    solution = json.loads((root / "source" / ASSIGNMENT / NOTEBOOK).read_text())
    blank = json.loads((root / "release" / ASSIGNMENT / NOTEBOOK).read_text())
    kinds = {f"s{n:03d}_{ROTATION[n % len(ROTATION)]}": ROTATION[n % len(ROTATION)] for n in range(students)}
    for student, kind in kinds.items():
        folder = root / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        (folder / NOTEBOOK).write_text(json.dumps(submission(kind, solution, blank), indent=1))
        (folder / "timestamp.txt").write_text("2026-11-20 12:00:00.000000 UTC")
    return kinds


def plain_nbgrader_course(trusted: Path, root: Path) -> None:
    """A copy of the course graded the plain way: hidden tests appended to every test cell."""
    shutil.copytree(trusted / "source", root / "source")
    shutil.copytree(trusted / "submitted", root / "submitted")
    Course(trusted).copy_checks(ASSIGNMENT, root)   # the hidden checks, which in_kernel.check reads
    config = (trusted / "nbgrader_config.py").read_text() + PLAIN_NBGRADER
    (root / "nbgrader_config.py").write_text(config)
    path = root / "source" / ASSIGNMENT / NOTEBOOK
    notebook = json.loads(path.read_text())
    for cell in notebook["cells"]:
        if role(cell) == "test" and cell["cell_type"] == "code":
            cell["source"] = "".join(cell["source"]) + HIDDEN.format(grade_id=grade_id(cell).removesuffix("_test"))
    path.write_text(json.dumps(notebook, indent=1))
    nbgrader(root, "generate_assignment", ASSIGNMENT, "--force")


def nbgrader(root: Path, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=root, env=nbgrader_env(), check=True,
                   capture_output=True)


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, int]:
    """Wall seconds of a command, and the largest resident set (KiB) of any of its processes."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", MEASURE, *argv], cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:3])} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    peak = next(int(line.split()[1]) for line in done.stderr.splitlines() if line.startswith("PEAK_KIB"))
    return seconds, peak


def item_scores(root: Path, students) -> dict[str, dict[str, float]]:
    """Each student's score on each graded cell, from the course's nbgrader gradebook."""
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gradebook:
        return {student: {grade.name: grade.score
                          for grade in gradebook.find_submission_notebook(NOTEBOOK.removesuffix(".ipynb"), ASSIGNMENT,
                                                                          student).grades}
                for student in students}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=40, help="submissions in the class (default 40)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="the autograder's workers (default: the number of cores)")
    parser.add_argument("--keep", metavar="DIR", help="build the two course folders in DIR and keep them")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="grading-benchmark-") as scratch:
        base = Path(args.keep).resolve() if args.keep else Path(scratch)
        trusted, plain = base / "autograder", base / "nbgrader"
        for folder in (trusted, plain):
            folder.mkdir(parents=True, exist_ok=False)
        kinds = build_class(trusted, args.students)
        plain_nbgrader_course(trusted, plain)
        counts = Counter(kinds.values())
        print(f"Class: {len(kinds)} submissions of {ASSIGNMENT} "
              f"({', '.join(f'{counts[k]} {k}' for k in dict.fromkeys(ROTATION) if counts[k])}); "
              f"{os.cpu_count()} cores.")

        env = nbgrader_env()
        ours, ours_peak = timed([str(Path(sys.executable).with_name("autograder")), "grade", ASSIGNMENT,
                                 "--workers", str(args.workers)], trusted, env)
        (plain / ".grading").mkdir()
        shutil.copy2(trusted / ".grading" / "secret", plain / ".grading" / "secret")  # the same hidden inputs
        theirs, theirs_peak = timed([sys.executable, "-m", "nbgrader", "autograde", ASSIGNMENT, "--force"], plain,
                                    {**env, in_kernel.COURSE: str(plain), in_kernel.ASSIGNMENT: ASSIGNMENT,
                                     "PYTHONPATH": str(REPO)})

        count = len(kinds)
        print(f"{'':24}{'s/submission':>14}{'total s':>10}{'peak MiB':>10}")
        print(f"{'autograder grade':24}{ours / count:>14.2f}{ours:>10.1f}{ours_peak / 1024:>10.0f}"
              f"   ({args.workers} workers, sandboxed, preflight, style)")
        print(f"{'nbgrader autograde':24}{theirs / count:>14.2f}{theirs:>10.1f}{theirs_peak / 1024:>10.0f}"
              f"   (one kernel per notebook, hidden tests in the kernel)")
        print(f"ratio (nbgrader time / autograder time): {theirs / ours:.1f}x  (goal: at least 30x)")

        return compare(kinds, item_scores(trusted, kinds), item_scores(plain, kinds))


def compare(kinds: dict[str, str], ours: dict, theirs: dict) -> int:
    """Prints where the two ways' scores differ; 1 if the anchor graded nothing (every total 0) or
    differs on an item that ``EXPECTED_DIFFERENCES`` does not explain, else 0."""
    if not any(sum(scores.values()) for scores in theirs.values()):
        print("The anchor gave every submission 0: its hidden tests did not run. The ratio above is void.")
        return 1
    explained, unexplained = Counter(), []
    for student, kind in kinds.items():
        for item in sorted(ours[student].keys() | theirs[student].keys()):
            mine, other = ours[student].get(item), theirs[student].get(item)
            if mine != other:
                (explained.update([(kind, item, mine, other)]) if (kind, item) in EXPECTED_DIFFERENCES
                 else unexplained.append(f"  {student}, {item}: autograder {mine}, nbgrader {other}"))
    agree = sum(sum(ours[s].values()) == sum(theirs[s].values()) for s in kinds)
    print(f"Totals agree for {agree} of {len(kinds)} submissions. Items that differ, as expected:")
    for (kind, item, mine, other), times in sorted(explained.items()):
        print(f"  {kind} ({times}x), {item}: autograder {mine}, nbgrader {other}: {EXPECTED_DIFFERENCES[kind, item]}")
    if unexplained:
        print("Items that differ for no documented reason (a defect in one of the two ways):", *unexplained, sep="\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
