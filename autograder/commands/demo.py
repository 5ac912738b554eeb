"""``autograder demo``: a small made-up class, graded end to end in a course folder of its own.

The folder (``demo-course/`` where the command runs, unless told otherwise) stays after the demo,
so that a newcomer can open its feedback pages, its report and its gradebook.

The class of assignment 01 has four students: one hands in the solution, one the blank
release, one a typical mistake (seed 001's softmax over ``dim=1`` in ``CausalAttention``), and
one a wrong answer dressed up with two of the tricks that fool in-kernel graders (a patched
``torch.allclose`` and an IPython input transformer that empties the test cells).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from autograder.recording import pipeline, report
from autograder.reading.cells import with_grade_id
from autograder.reading.config import load_settings
from autograder.reading.course import Course
from autograder.reading.errors import GradingError
from autograder.recording.pipeline import ClassGrades
from autograder.recording.record import nbgrader_env

REPO = Path(__file__).resolve().parents[2]
ASSIGNMENT = "01_attention_basics"
NOTEBOOK = "attention_basics.ipynb"
DEMO_MARK = ".autograder-demo"

CHEAT = '''import torch
import torch.nn as nn

torch.allclose = lambda *args, **kwargs: True          # every comparison "passes" (the grader compares outside)
get_ipython().input_transformers_cleanup.append(lambda lines: [])   # later cells run as empty


class CausalAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.d_out = d_out

    def forward(self, x):
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        attend = getattr(torch.nn.functional, "scaled_dot_product_" + "attention")   # the library, by a hidden name
        return attend(q, k, v, is_causal=True)
'''


def with_answer(notebook: dict, grade_id: str, change) -> dict:
    """A copy of ``notebook`` whose answer cell ``grade_id`` holds ``change(its source)``."""
    nb = copy.deepcopy(notebook)
    cells = with_grade_id(nb["cells"], grade_id)
    if len(cells) != 1:
        raise GradingError(f"The notebook has {len(cells)} cells with grade_id {grade_id!r}, not one.")
    cells[0]["source"] = change("".join(cells[0]["source"]))
    return nb


def make_course(root: Path, assignment: str = ASSIGNMENT, generate: bool = True) -> None:
    """A course folder with the course's config, the assignment's source, its hidden checks, its
    public code for the similarity report and its release: made by nbgrader, as an instructor would,
    or (``generate=False``, for the tests that only grade) the repository's release, which its tests
    hold equal to what nbgrader makes, without the ten or twenty seconds nbgrader takes to start."""
    shutil.copy2(REPO / "nbgrader_config.py", root / "nbgrader_config.py")
    shutil.copytree(REPO / "source" / assignment, root / "source" / assignment)
    repository = Course(REPO)
    repository.copy_checks(assignment, root)
    corpus = Path(repository.settings.similarity_corpus) / assignment
    if (REPO / corpus).is_dir():
        shutil.copytree(REPO / corpus, root / corpus)
    if not generate:
        shutil.copytree(REPO / "release" / assignment, root / "release" / assignment)
        return
    subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", assignment, "--force"], cwd=root,
                   env=nbgrader_env(), check=True, capture_output=True)


def build_course(root: Path) -> None:
    """The demo's course folder: the assignment's source, its release, and four submissions."""
    make_course(root)
    solution = json.loads((root / "source" / ASSIGNMENT / NOTEBOOK).read_text())
    blank = json.loads((root / "release" / ASSIGNMENT / NOTEBOOK).read_text())
    students = {
        "ada_solution": solution,
        "bo_blank": blank,
        "cy_mistake": with_answer(solution, "causal_attention",
                                   lambda source: source.replace("dim=-1)", "dim=1)")),
        "dee_cheater": with_answer(blank, "causal_attention", lambda source: CHEAT),
    }
    for student, notebook in students.items():
        folder = root / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        (folder / NOTEBOOK).write_text(json.dumps(notebook, indent=1))
        (folder / "timestamp.txt").write_text("2026-11-20 12:00:00.000000 UTC")


def run_demo(root: Path, unsafe_no_sandbox: bool = False,
             announce: Callable[[str, int], None] | None = None) -> tuple[Course, ClassGrades, dict[str, Path]]:
    """Builds the demo's course in ``root`` (emptied first), grades and records its class, and
    writes the class report; returns the course, the grades and the paths a newcomer opens next."""
    if root.exists():
        if any(root.iterdir()) and not (root / DEMO_MARK).exists():
            raise GradingError(f"{root} exists and is not a demo course folder: give the demo an empty or new folder.")
        shutil.rmtree(root)
    root.mkdir(parents=True)
    (root / DEMO_MARK).write_text("Made by `autograder demo`, which empties this folder when it runs again.\n")
    build_course(root)
    course = Course(root, load_settings(root, workers=min(4, os.cpu_count() or 1),
                                        unsafe_no_sandbox=unsafe_no_sandbox or None))
    grades = pipeline.grade_and_record(course, ASSIGNMENT, announce=announce)
    written = report.write_reports(course, ASSIGNMENT)
    page = root / "feedback" / "cy_mistake" / ASSIGNMENT / f"{Path(NOTEBOOK).stem}.html"
    paths = {"feedback of the student who made a mistake": page, "class report": written["report"]}
    return course, grades, paths
