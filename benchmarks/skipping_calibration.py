"""The calibration of assignment 05's timed checks: ``causal_skipping`` and the skipping half of
``backward_memory``, judged by the CPU time the sandbox's server reads around each call.

    .venv/bin/python benchmarks/skipping_calibration.py [--hog] [--only NAME ...]

For each honest answer of the corpus (the forwards of ``tests/honest_forward.py`` with the
solution's backward, the backwards of ``tests/honest_backward.py`` with the solution's forward),
each answer that computes the tiles the causal mask hides (``tests/skipping_evasions.py``) and an
answer that visits one key block too many, it grades the two timed checks through the grader's
own runs (the answer's run, and the course's once per class) and prints, for each check, the
answer's ratio (its fastest causal call's CPU time over its fastest call without the mask), the
course's ratio on the same inputs, and the quotient of the two, which the judge holds to
``OWN_FACTOR``. Two answers it does not claim to catch are shown apart: one key block too many per
query block, and a call that wastes time without the mask. Then, for each check, the largest quotient an honest answer reached, the smallest
an evasion reached, and the margins from the limit. ``--hog`` runs a process that keeps a core
busy beside it all, as another grading job or a student's notebook would.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from autograder.commands.demo import make_course  # noqa: E402
from autograder.judging import grading  # noqa: E402
from autograder.reading.assignment import Assignment  # noqa: E402
from autograder.reading.config import load_settings  # noqa: E402
from autograder.reading.course import Course  # noqa: E402
from autograder.reading.preflight import preflight  # noqa: E402
from autograder.running import runner, sandbox  # noqa: E402
from honest_backward import BACKWARD  # noqa: E402
from honest_forward import FORWARD  # noqa: E402
from outside_truth_class import FUNCTION  # noqa: E402
import notebook_tools as tools  # noqa: E402
import skipping_evasions as evasions  # noqa: E402
from transformer_lm.timed_judges import OWN_FACTOR  # noqa: E402

A = "05_efficient_attention"
CHECKS = {"forward": "causal_skipping.0", "backward": "backward_memory.3"}


def answers() -> dict[str, tuple[dict[str, str], dict[str, str]]]:
    """Each answer to time, by name: what each check must find in it (``honest``, ``evasion``, or
    ``not caught``: what it does not claim to catch, shown apart), and its answer cells by grade_id
    (the solution's where it has none of its own)."""
    solution = {gid: evasions.solution_cell(gid) for gid in ("online_softmax", "flash_forward", "flash_backward")}
    honest, found = {"forward": "honest", "backward": "honest"}, {}
    found |= {f"forward {name}": (honest, {"flash_forward": source}) for name, source in FORWARD.items()}
    found |= {f"backward {name}": (honest, {"flash_backward": source + FUNCTION["plain"]})
              for name, source in BACKWARD.items()}
    found |= {f"evasion {name}": ({**honest, "forward": "evasion"}, {"flash_forward": source})
              for name, source in evasions.forward_evasions().items()}
    found |= {f"evasion {name}": ({**honest, "backward": "evasion"}, {"flash_backward": source})
              for name, source in evasions.backward_evasions().items()}
    found["not claimed one key block too many"] = ({**honest, "forward": "not caught"},
                                               {"flash_forward": evasions.one_block_too_many()})
    found["not claimed inflated without mask"] = ({**honest, "forward": "not caught"},
                                                  {"flash_forward": evasions.inflated_without_mask()})
    return {name: (expected, {**solution, **cells}) for name, (expected, cells) in found.items()}


def ratios(assignment: Assignment, worker: runner.Worker, cells: dict[str, str], folder: Path) -> dict:
    """The figures of both timed checks for one answer: ``{check: (own, course)}``, or None for a
    check whose windows were not all timed."""
    path = folder / "efficient_attention.ipynb"
    nbformat.write(tools.replace_solutions(REPO / "release" / A / path.name, cells), str(path))
    notebook = path.stem
    pre = preflight(path, assignment.release[notebook], assignment.items[notebook])
    run = grading._run(assignment, pre, set(CHECKS.values()), worker)
    records = {check: run.outcomes[pid].record for check, pid in CHECKS.items()}
    return {check: assignment.prepared[CHECKS[check]].judge.figures(record) if record else None
            for check, record in records.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hog", action="store_true", help="keep a core busy beside the measurement")
    parser.add_argument("--only", nargs="*", default=[], help="time only the answers whose name holds one of these")
    args = parser.parse_args()
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.hog else None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "course"
            root.mkdir()
            make_course(root, A, generate=False)
            course = Course(root, load_settings(root, workers=1))
            assignment = Assignment.load(course, A)
            seen = {check: {} for check in CHECKS}
            with runner.Worker(grading.run_settings(course.settings), sandbox.detect_isolation()) as worker:
                print(f"{'answer':40} {'forward: own':>12} {'course':>6} {'quotient':>8} "
                      f"{'backward: own':>13} {'course':>6} {'quotient':>8}")
                for name, (expected, cells) in answers().items():
                    if args.only and not any(part in name for part in args.only):
                        continue
                    found, row = ratios(assignment, worker, cells, Path(tmp)), []
                    for check, figures in found.items():
                        if figures is None:
                            row.append(f"{'(not timed)':>28}")
                            continue
                        own, course = figures
                        seen[check].setdefault(expected[check], []).append((own / course, name))
                        row.append(f"{own:>12.2f} {course:>6.2f} {own / course:>8.2f}")
                    print(f"{name:40} " + " ".join(row), flush=True)
            for check, found in seen.items():
                limit = OWN_FACTOR
                honest = max(found.get("honest", []), default=(0.0, "none"))
                evading = min(found.get("evasion", []), default=(math.inf, "none"))
                print(f"{check}: honest at most {honest[0]:.2f} ({honest[1]}), limit {limit:.2f} "
                      f"({limit / honest[0] - 1:+.0%}), evasions at least {evading[0]:.2f} "
                      f"({evading[1]}, {evading[0] / limit - 1:+.0%})")
                for quotient, name in found.get("not caught", []):
                    print(f"{check}: {name}: {quotient:.2f} ({'caught' if quotient > limit else 'not caught'})")
    finally:
        if hog is not None:
            hog.kill()


if __name__ == "__main__":
    main()
