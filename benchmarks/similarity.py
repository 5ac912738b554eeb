"""Similarity report throughput: ``autograder similarity`` on a class of 500 submissions of assignment 01.

    .venv/bin/python benchmarks/similarity.py [--students 500] [--seed 0] [--keep DIR]

The class is made from the course's own answers, which is the hard case: many pairs are similar.
For each of the nine code answer cells, every student starts from the solution, one of the audit
bank's correct alternatives or one of its catalogued mistakes (autograder/checks/audit/), renames
the variables it assigns, drops or rewrites comments and now and then adds a line of its own. One
in twenty hands in the blank release; ten groups of three hand in one notebook among them, renamed
again. The script times ``write_similarity`` (reading 500 notebooks, fingerprinting every answer,
comparing each cell's answers with one another, the reference and public code, and writing the
page and the CSV), and prints the seconds, the pairs compared per second, and what was found.
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import re
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autograder.commands.audit import load_bank, solution_of  # noqa: E402
from autograder.reading.cells import answers  # noqa: E402
from autograder.reading.course import Course  # noqa: E402
from autograder.commands.demo import ASSIGNMENT, NOTEBOOK, make_course, with_answer  # noqa: E402
from autograder.recording.similarity import CLASSMATE  # noqa: E402
from autograder.recording.similarity_report import write_similarity  # noqa: E402

NAMES = ["a", "b", "c", "t", "u", "w", "z", "val", "tmp", "res", "out", "acc", "mat", "vec", "ten", "arr", "buf",
         "data", "item", "part", "piece", "thing", "stuff", "my_var", "result", "output", "hidden", "state"]
EXTRA_LINES = ["assert x is not None", "pass", "# TODO: check the shapes again", "print(\"done\")"]


def assigned_names(source: str) -> list[str]:
    """The local variables an answer assigns (not attributes, not the API's names)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
    return sorted(name for name in names if len(name) > 1 or name in "qkvxyT")


def rewrite(source: str, rng: random.Random) -> str:
    """``source`` with its variables renamed, its comments dropped or changed, and perhaps a line added."""
    for name in assigned_names(source):
        source = re.sub(rf"\b{re.escape(name)}\b", f"{rng.choice(NAMES)}_{rng.randrange(100)}", source)
    if rng.random() < 0.5:
        source = re.sub(r"  +# [^\n]*", "", source)
    else:
        source = re.sub(r"# [^\n]*", lambda _: f"# {rng.choice(NAMES)} {rng.choice(NAMES)}", source)
    lines = source.split("\n")
    if rng.random() < 0.3:
        at = rng.randrange(1, len(lines))
        indent = re.match(r" *", lines[at]).group() or "    "
        lines.insert(at, indent + rng.choice(EXTRA_LINES))
    return "\n".join(lines)


def make_class(root: Path, students: int, seed: int) -> None:
    """The course folder and its class (see the module's docstring)."""
    make_course(root, ASSIGNMENT, generate=False)
    course = Course(root)
    _, solution = solution_of(course, ASSIGNMENT)
    blank = json.loads((root / "release" / ASSIGNMENT / NOTEBOOK).read_text())
    bank = load_bank(Course(REPO), ASSIGNMENT, solution)
    cells = list(answers([c for c in blank["cells"] if c["cell_type"] == "code"]))
    model = answers(solution["cells"])
    pools = {cell: [model[cell], *(text for _, text in bank.alternatives.get(cell, [])),
                    *bank.mutants.get(cell, {}).values()] for cell in cells}
    rng = random.Random(seed)
    notebooks = {}
    for number in range(students):
        if rng.random() < 0.05:
            notebooks[f"s{number:04d}"] = blank
            continue
        notebook = blank
        for cell in cells:
            text = rewrite(rng.choice(pools[cell]), rng)
            notebook = with_answer(notebook, cell, lambda _, text=text: text)
        notebooks[f"s{number:04d}"] = notebook
    for group in range(10):  # three students, one notebook, renamed again by two of them
        first, *others = (f"s{number:04d}" for number in rng.sample(range(students), 3))
        for other in others:
            notebook = notebooks[first]
            for cell in cells:
                notebook = with_answer(notebook, cell, lambda source: rewrite(source, rng))
            notebooks[other] = notebook
    for student, notebook in notebooks.items():
        folder = root / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        (folder / NOTEBOOK).write_text(json.dumps(notebook))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, help="make the class in this folder (new or empty) and keep it")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = args.keep or Path(scratch)
        root.mkdir(parents=True, exist_ok=True)
        make_class(root, args.students, args.seed)
        started = time.perf_counter()
        written = write_similarity(Course(root), ASSIGNMENT)
        seconds = time.perf_counter() - started
        result = written.result
        compared = sum(len(c.answers) * (len(c.answers) - 1) // 2 + len(c.answers) * len(c.others)
                       for c in result.cells)
        print(f"{len(result.students)} submissions of {ASSIGNMENT}, {len(result.cells)} answer cells: "
              f"{seconds:.1f} s in all ({compared} pairs compared, {compared / seconds:,.0f} pairs/s)")
        for cell in result.cells:
            print(f"  {cell.cell}: {len(cell.answers)} answers, {len(cell.pairs)} pairs at or above "
                  f"{result.threshold:.2f} ({cell.count(CLASSMATE)} with a classmate, "
                  f"{sum(bool(p.weak) for p in cell.pairs)} weak evidence), {len(cell.groups)} groups, "
                  f"common code {cell.alike:.0%} of a typical answer")
        print(f"Page: {written.page.stat().st_size / 2**20:.1f} MiB; CSV: {written.csv.stat().st_size / 2**10:.0f} KiB")


if __name__ == "__main__":
    main()
