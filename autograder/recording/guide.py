"""The TA's grading guide of an assignment, a page to keep open beside formgrader:
``reports/<assignment>/grading_guide.html``. It holds each written question with its points, its
model answer and grading notes, and every deduction the notebooks promise, with who takes it and
from which cell. It is made from the source notebooks, which students never get, and the hidden
checks.

Markdown is rendered as nbgrader renders it and cleaned of anything active
(:func:`autograder.reading.sanitize.markdown_html`); LaTeX stays as text, which MathJax typesets
in the browser, as in nbconvert's HTML. The page's one script is MathJax 3, from its CDN, drawing
SVG (so it loads no fonts), and its settings, which the page's Content-Security-Policy allows by
their hash; without a network, the LaTeX shows as written.

A deduction comes from one of two places:

* the grader takes PEP 8's itself (an item's ``style_deduction`` in the hidden checks): the guide
  lists it so that no TA takes it again;
* a deduction that a TA takes by hand is written in the source notebook, in the metadata of the
  graded cell whose points it comes off (its test cell, which has a score box in formgrader)::

      "autograder": {"deductions": [{"points": 1, "for": "shape comments missing or wrong"}]}

  ``points`` is a number, ``for`` says in words what loses them; an entry that is not of that form
  is not listed. nbgrader copies the metadata into the release, where it changes nothing.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path

from markupsafe import Markup

from autograder.reading.cells import marks, source_text
from autograder.reading.course import Course, load_items
from autograder.reading.errors import GradingError
from autograder.reading.sanitize import markdown_html
from autograder.recording.feedback import PAGES

SOLUTION = re.compile(r"### BEGIN SOLUTION\s*(.*?)\s*### END SOLUTION", re.S)
MATHJAX = "https://cdn.jsdelivr.net/npm/mathjax@3.2.2/es5/"
"""MathJax 3, pinned: the folder its script loads the TeX extensions a formula needs from."""
MATHJAX_CONFIG = "window.MathJax = {tex: {inlineMath: [['$', '$'], ['\\\\(', '\\\\)']]}};"
"""MathJax's settings: ``$...$`` is inline math, as in Jupyter."""


def written_questions(course: Course, assignment: str) -> list[dict]:
    """Each written answer of the source notebooks: its notebook, grade_id, points, the question (the
    nearest markdown cell above it) and the model answer (its solution's text), both as HTML."""
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
                          "points": meta.get("points", 0), "question": Markup(markdown_html(question)),
                          "model": Markup(markdown_html(model.group(1) if model else source_text(cell.get("source", ""))))})
    return found


def deductions(course: Course, assignment: str) -> tuple[list[dict], str]:
    """Every deduction the source notebooks promise, in the order of their cells: its notebook, the
    graded cell it comes off, its points, what loses them and who takes them (``by``: ``grader`` or
    ``TA``); and a note when the hidden checks, which hold the grader's, could not be read."""
    try:
        styled = {item.test_id: item for item in load_items(course, assignment) if item.style_deduction}
        note = ""
    except GradingError as error:
        styled, note = {}, f"The grader's own deductions are not listed: {error}"
    found = []
    for path in sorted((course.root / "source" / assignment).glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            cell_id = marks(cell).get("grade_id", "")
            where = {"notebook": path.stem, "cell": cell_id}
            if cell_id in styled:
                item = styled[cell_id]
                found.append({**where, "points": item.style_deduction, "by": "grader",
                              "for": f"PEP 8 problems in the answer cell {item.answer_id}, when {item.grade_id} passes"})
            promised = (cell.get("metadata", {}).get("autograder") or {}).get("deductions") or []
            found += [{**where, "points": entry["points"], "for": entry["for"], "by": "TA"} for entry in promised
                      if isinstance(entry, dict) and isinstance(entry.get("points"), (int, float))
                      and isinstance(entry.get("for"), str)]
    return found, note


def script_source(script: str) -> str:
    """A Content-Security-Policy source that allows the inline ``script`` and nothing else inline."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode() + "'"


def write_guide(course: Course, assignment: str) -> Path | None:
    """Writes the guide; None when the assignment has neither a written answer nor a deduction that
    a TA takes (or no source at hand)."""
    questions = written_questions(course, assignment)
    taken, note = deductions(course, assignment)
    if not questions and not any(entry["by"] == "TA" for entry in taken):
        return None
    path = course.reports(assignment) / "grading_guide.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(PAGES.get_template("grading_guide.html.j2").render(
        assignment=assignment, questions=questions, deductions=taken, note=note, mathjax=MATHJAX,
        mathjax_config=Markup(MATHJAX_CONFIG), config_source=script_source(MATHJAX_CONFIG)))
    return path
