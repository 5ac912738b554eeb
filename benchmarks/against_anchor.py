"""``grader_speed.py`` at this commit against the anchor commit it names, in alternating pairs.

    .venv/bin/python benchmarks/against_anchor.py ANCHOR [--pairs 5] [--students 12] [--workers 2] [ASSIGNMENT ...]

A shared two-core machine's speed moves from one minute to the next (05's anchor gave 1.25 and
4.39 s per submission within ten minutes on 2026-12-07), so one figure of each says little. This
checks the anchor out beside the repository (``git worktree``, with this repository's virtual
environment), then runs ``benchmarks/grader_speed.py`` at the anchor and here in turn, ``--pairs``
times, and prints each pair, the ratio of each (here over the anchor), and the median ratio. Beside
each run it prints the seconds the machine's hypervisor took from it (``steal`` in ``/proc/stat``):
a pair with many is one the host disturbed.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIGURE = re.compile(r"^all\s+([0-9.]+) s per submission", re.M)


def stolen_seconds() -> float:
    """The seconds of CPU time the hypervisor has taken from this machine since it started."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    return int(fields[8]) / os.sysconf("SC_CLK_TCK")


def seconds_per_submission(tree: Path, arguments: list[str]) -> tuple[float, float]:
    """``grader_speed.py``'s figure for all the assignments, run in ``tree``, and the seconds stolen meanwhile."""
    before = stolen_seconds()
    done = subprocess.run([sys.executable, str(tree / "benchmarks" / "grader_speed.py"), *arguments], cwd=tree,
                          capture_output=True, text=True, check=True)
    return float(FIGURE.search(done.stdout).group(1)), stolen_seconds() - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("anchor", help="the commit to compare with")
    parser.add_argument("assignments", nargs="*", help="passed to grader_speed.py (default: every assignment)")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--students", type=int, default=12)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    arguments = [*args.assignments, "--students", str(args.students), "--workers", str(args.workers)]
    with tempfile.TemporaryDirectory(prefix="anchor-") as folder:
        anchor = Path(folder) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(anchor), args.anchor], cwd=REPO, check=True)
        try:
            (anchor / ".venv").symlink_to(REPO / ".venv")
            ratios = []
            for pair in range(1, args.pairs + 1):
                then, then_stolen = seconds_per_submission(anchor, arguments)
                now, now_stolen = seconds_per_submission(REPO, arguments)
                ratios.append(now / then)
                print(f"pair {pair}: anchor {then:.2f} s (steal {then_stolen:.0f} s), here {now:.2f} s "
                      f"(steal {now_stolen:.0f} s): {now / then:.2f} times", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(anchor)], cwd=REPO, check=True)
    print(f"median of {args.pairs} pairs: {statistics.median(ratios):.2f} times the anchor ({args.anchor}), "
          f"from {min(ratios):.2f} to {max(ratios):.2f}")


if __name__ == "__main__":
    main()
