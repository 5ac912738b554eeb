"""How long each solution notebook takes, top to bottom, against the course's budget for it.

    .venv/bin/python benchmarks/solution_notebooks.py [ASSIGNMENT ...]

The anchor is the budget the course sets a solution notebook: well under a minute on two cores
(BUDGET_SECONDS), and four minutes for assignment 04, whose notebook trains a model. The script
runs each solution notebook in a fresh ``python3`` kernel, as a student's JupyterLab would, and
prints its wall seconds, the kernel's CPU seconds, and the ratio of the wall seconds to the budget.

It is a benchmark rather than a test because these machines are shared: a test that timed a
notebook beside other heavy tests failed on contention, not on the notebook. Run it on a quiet
machine; a ratio under 1 keeps the budget.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parent.parent
BUDGET_SECONDS = 60
"""A solution notebook's budget, top to bottom, on two cores."""
LONGER_BUDGETS = {"04_mingpt": 240}
"""Notebooks with a budget of their own, and why: 04 trains its model on two-digit addition."""


def kernel_cpu_seconds(client: NotebookClient) -> float:
    """User and system CPU seconds of the kernel process so far, read by this process from /proc."""
    pid = client.km.provisioner.process.pid
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])      # utime and stime, in clock ticks
    return ticks / os.sysconf("SC_CLK_TCK")


def run(notebook: Path) -> tuple[float, float]:
    """Wall seconds and kernel CPU seconds of one run of ``notebook``, in its own folder."""
    nb = nbformat.read(notebook, as_version=4)
    client = NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(notebook.parent)}})
    with client.setup_kernel():
        start = time.perf_counter()
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index)
        wall = time.perf_counter() - start
        cpu = kernel_cpu_seconds(client)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assignments", nargs="*", help="assignment folders under source/ (default: all)")
    args = parser.parse_args()
    names = args.assignments or sorted(p.name for p in (REPO / "source").iterdir() if p.is_dir())
    print(f"{'assignment':<26} {'wall s':>7} {'CPU s':>7} {'budget s':>9} {'ratio':>6}")
    for name in names:
        notebook = next((REPO / "source" / name).glob("*.ipynb"))
        wall, cpu = run(notebook)
        budget = LONGER_BUDGETS.get(name, BUDGET_SECONDS)
        print(f"{name:<26} {wall:>7.1f} {cpu:>7.1f} {budget:>9} {wall / budget:>6.2f}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
