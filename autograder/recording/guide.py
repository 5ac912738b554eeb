"""The TA's grading guide of an assignment: each written question with its points, its model
answer and grading notes, taken from the source notebooks (which students never get), as a page
to keep open beside formgrader: ``reports/<assignment>/grading_guide.html``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from autograder.reading.cells import marks, source_text
from autograder.reading.course import Course
from autograder.recording.feedback import PAGES

SOLUTION = re.compile(r"### BEGIN SOLUTION\s*(.*?)\s*### END SOLUTION", re.S)


def written_questions(course: Course, assignment: str) -> list[dict]:
    """Each written answer of the source notebooks: its notebook, grade_id, points, the question (the
    nearest markdown cell above it) and the model answer (its solution's text)."""
    found = []
    for path in sorted((course.root / "source" / assignment).glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        for index, cell in enumerate(cells):
            meta = marks(cell)
            if cell.get("cell_type") != "markdown" or not (meta.get("grade") and meta.get("solution")):
                continue
            question = next((source_text(c.get("source", "")) for c in reversed(cells[:index])
                             if c.get("cell_type") == "markdown"), "")
            model = SOLUTION.search(source_text(cell.get("source", "")))
            found.append({"notebook": path.stem, "grade_id": meta.get("grade_id", ""),
                          "points": meta.get("points", 0), "question": question,
                          "model": model.group(1) if model else source_text(cell.get("source", ""))})
    return found


def write_guide(course: Course, assignment: str) -> Path | None:
    """Writes the guide; None when the assignment has no written answer (or no source at hand)."""
    questions = written_questions(course, assignment)
    if not questions:
        return None
    path = course.reports(assignment) / "grading_guide.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(PAGES.get_template("grading_guide.html.j2").render(assignment=assignment, questions=questions))
    return path
