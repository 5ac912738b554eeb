"""``autograder validate NOTEBOOK``: what a student runs before submitting.

It runs the notebook top to bottom in a fresh kernel, as "Restart and Run All" would (but
skipping demonstration cells tagged ``skip-grading``, and carrying on after an error), and
reports each visible test cell with the message its check printed. The checks are the
ones in the notebook, from :mod:`transformer_lm.checks`: the same code path, the same words.
The exit status is 0 only when every visible test passes.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from autograder.reading.cells import marks
from autograder.reading.preflight import SKIP_TAG


def _error_text(cell) -> str | None:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return f"{output.get('ename')}: {output.get('evalue')}"
    return None


def validate(path: Path, timeout: int = 120) -> int:
    """Runs ``path`` and prints one line per visible test; returns the number that failed."""
    nb = nbformat.read(path, as_version=4)
    skipped = {}
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and SKIP_TAG in cell.metadata.get("tags", []):
            skipped[index] = cell
            nb.cells[index] = nbformat.v4.new_code_cell("")
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(path.parent.resolve())}})
    client.execute(stderr=subprocess.DEVNULL)  # the kernel's own log (a warning about TCP transport) is not a result
    failed = 0
    for cell in nb.cells:
        meta = marks(cell)
        if cell.cell_type != "code" or not meta.get("grade") or meta.get("solution"):
            continue
        error = _error_text(cell)
        name = meta.get("grade_id", "?")
        if error:
            failed += 1
            print(f"FAILED  {name}: {error}")
        else:
            print(f"passed  {name}")
    print(f"{failed} of the visible tests failed." if failed else "All visible tests passed.")
    return failed
