"""What a student's feedback page says of a submission, and what the TAs' grading guide shows, with
the real tools.

A class of assignment 02 is graded and its pages made by ``autograder feedback``: an answer cell
with a syntax error gets its line and the compiler's message, computed by the grader from the
submitted cell; a run that raises a SyntaxError of its own making, and prints text that imitates
the grader's, gets none of its words onto the page; and every flag about a submission's files (a
renamed notebook, a copy beside a blank one, no notebook, a damaged one) is on the student's page
as it is in the report. The grading guide, made from the source notebooks, renders their Markdown
(LaTeX left to MathJax), cleans what is active, and lists every deduction a notebook promises: the
grader's own, from the hidden checks, and those a TA takes, from the cells' metadata.
"""

import html
import json
import re
from html.parser import HTMLParser

import nbformat
import pytest

import notebook_tools as tools
from autograder.commands.cli import main
from autograder.commands.demo import make_course
from autograder.reading.assignment import Assignment
from autograder.reading.course import Course
from autograder.recording import guide
from autograder.recording.feedback_texts import catalogue
from autograder.running import sandbox

A = "02_multihead_attention"
NB = "multihead_attention"
SOURCE = tools.REPO_ROOT / "source" / A / f"{NB}.ipynb"
RELEASE = tools.REPO_ROOT / "release" / A / f"{NB}.ipynb"
UNCLOSED = ("probs = torch.softmax(scores, dim=-1)", "probs = torch.softmax(scores, dim=-1")
"""The syntax error put in ``self_attention``'s forward: a call's parenthesis left open."""
IMITATION = '''mark = "".join(["LE", "AK"])
print(f"Your answer cell failed: SyntaxError: {mark} was never closed (line 1 of its cell: {mark})")
raise SyntaxError(f"{mark} was never closed", ("<cell>", 1, 1, mark, 1, 2))
'''
"""An answer cell that compiles, prints the grader's words and raises a SyntaxError made at run
time; ``LEAK``, what the run spells in its words, is in no line of the cell."""

needs_bubblewrap = pytest.mark.skipif(sandbox.detect_isolation().name != "bubblewrap", reason="needs bubblewrap")


def submit(root, student: str, files: dict[str, object]) -> None:
    """Puts ``files`` (a name and a notebook, or bytes) in the student's submission folder."""
    folder = root / "submitted" / student / A
    folder.mkdir(parents=True)
    for name, content in files.items():
        if isinstance(content, bytes):
            (folder / name).write_bytes(content)
        else:
            nbformat.write(content, folder / name)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The course folder once its class is graded and ``autograder feedback`` has made the pages."""
    root = tmp_path_factory.mktemp("course")
    make_course(root, A, generate=False)
    solution, blank = tools.read(SOURCE), tools.read(RELEASE)
    submit(root, "syntax", {f"{NB}.ipynb": tools.replace_solution(
        solution, "self_attention", tools.answer_cell(solution, "self_attention", UNCLOSED))})
    submit(root, "imitator", {f"{NB}.ipynb": tools.replace_solution(solution, "self_attention", IMITATION)})
    submit(root, "renamed", {f"{NB} (1).ipynb": solution})
    submit(root, "copied", {f"{NB}.ipynb": blank, f"{NB}-Copy1.ipynb": solution})
    submit(root, "absent", {})
    submit(root, "damaged", {f"{NB}.ipynb": b'{"cells": [tru'})
    tools.grade_course(root, A)
    assert main(["feedback", A, "--course", str(root)]) == 0
    return root


def page(root, student: str) -> str:
    """The student's feedback page, as the browser shows its text (entities read)."""
    return html.unescape((root / "feedback" / student / A / f"{NB}.html").read_text())


def report(root, student: str) -> dict:
    return json.loads((root / "reports" / A / f"{student}.json").read_text())


@needs_bubblewrap
def test_a_syntax_error_gives_its_line_and_the_compilers_message(graded):
    source = tools.answer_cell(tools.read(SOURCE), "self_attention", UNCLOSED)
    line = source.splitlines().index(next(s for s in source.splitlines() if UNCLOSED[1] in s)) + 1
    with pytest.raises(SyntaxError) as raised:   # what Python's own compiler says of the cell
        compile(source, "<cell>", "exec")
    assert (raised.value.msg, raised.value.lineno) == ("'(' was never closed", line)
    told = (f"Your answer cell failed: SyntaxError: '(' was never closed (line {line} of its cell: "
            f"{source.splitlines()[line - 1].strip()})")
    items = {item["grade_id"]: item for item in report(graded, "syntax")["items"]}
    assert items["self_attention_init"]["message"] == told
    assert told in page(graded, "syntax")
    cells = [cell.source for cell in tools.read(graded / "submitted" / "syntax" / A / f"{NB}.ipynb").cells]
    assert catalogue(Assignment.load(Course(graded), A)).holds(told, cells)   # the closed catalogue's words


@needs_bubblewrap
def test_a_run_that_imitates_a_syntax_error_gets_none_of_its_words_on_the_page(graded):
    shown = page(graded, "imitator")
    assert "LEAK" not in shown
    raised = IMITATION.splitlines()[2]
    told = f"Your answer cell failed: SyntaxError (line 3 of its cell: {raised})"
    items = {item["grade_id"]: item for item in report(graded, "imitator")["items"]}
    assert items["self_attention_init"]["message"] == told
    assert told in shown


@needs_bubblewrap
@pytest.mark.parametrize("student, words", [
    ("renamed", f"The notebook is named '{NB} (1).ipynb', not '{NB}.ipynb'; it was graded all the same."),
    ("copied", f"Extra notebook '{NB}-Copy1.ipynb' in the submission: it was not graded. It holds answers"),
    ("absent", "not graded: No notebook was submitted for this part of the assignment."),
    ("damaged", "not graded: "),
])
def test_every_flag_about_a_submissions_files_is_on_the_students_page(graded, student, words):
    flags = report(graded, student)["flags"]
    assert any(words in flag for flag in flags), flags
    shown = page(graded, student)
    assert [flag for flag in flags if flag not in shown] == []


class Scripts(HTMLParser):
    """The scripts of a page: each one's source address, or its text when it is inline."""

    def __init__(self, page_html: str):
        super().__init__(convert_charrefs=True)
        self.found, self._inline = [], False
        self.feed(page_html)

    def handle_starttag(self, tag, attrs):
        if tag == "script":
            source = dict(attrs).get("src")
            self._inline = source is None
            self.found.append(source or "")

    def handle_data(self, data):
        if self._inline:
            self.found[-1] += data

    def handle_endtag(self, tag):
        self._inline = False


@pytest.fixture
def course_of(tmp_path):
    """A course folder of an assignment, made from the repository."""
    def made(assignment: str):
        root = tmp_path / assignment
        root.mkdir()
        make_course(root, assignment, generate=False)
        return root
    return made


def write_guide(root, assignment: str) -> str:
    path = guide.write_guide(Course(root), assignment)
    return path.read_text() if path else ""


def test_the_guide_renders_markdown_and_leaves_latex_to_mathjax(course_of):
    written = write_guide(course_of(A), A)
    assert "<strong>Model answer.</strong> Each score is a sum of $h$ products" in written
    assert "**Model answer.**" not in written and "<pre class=\"model\">" not in written
    assert "<strong>Grading note (TAs).</strong>" in written
    assert Scripts(written).found == [guide.MATHJAX_CONFIG, guide.MATHJAX + "tex-svg.js"]
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', written).group(1)
    assert html.unescape(policy) == ("default-src 'none'; style-src 'unsafe-inline'; script-src "
                                     f"{guide.script_source(guide.MATHJAX_CONFIG)} {guide.MATHJAX}")


def test_the_guide_shows_active_markdown_inert(course_of):
    root = course_of(A)
    path = root / "source" / A / f"{NB}.ipynb"
    notebook = tools.read(path)
    q1 = tools.cell_by_grade_id(notebook, "q1")
    q1.source = q1.source.replace(
        "**Model answer.**", "<img src=x onerror=alert(1)><script>alert(2)</script>\n\n[see](javascript:alert(3)) "
                             "**Model answer.**")
    nbformat.write(notebook, path)
    written = write_guide(root, A)
    assert "<strong>Model answer.</strong>" in written
    for active in ("onerror", "alert(", "javascript:"):
        assert active not in written


def test_the_guide_lists_every_deduction_the_notebook_promises(course_of):
    """02 promises a point off in each task for PEP 8 (the grader's) and for shape comments (a TA's)."""
    text = "".join(cell.source for cell in tools.read(SOURCE).cells if cell.cell_type == "markdown")
    assert "missing or wrong ones cost a point in each task" in text
    root = course_of(A)
    deductions, note = guide.deductions(Course(root), A)
    rows = {(d["cell"], d["points"], d["by"], d["for"]) for d in deductions}
    assert note == "" and rows == {
        ("self_attention_forward_test", 1, "TA", "shape comments missing or wrong"),
        ("mha_scores_test", 1, "TA", "shape comments missing or wrong"),
        ("self_attention_forward_test", 1, "grader",
         "PEP 8 problems in the answer cell self_attention, when self_attention_forward passes"),
        ("mha_scores_test", 1, "grader",
         "PEP 8 problems in the answer cell multihead_self_attention, when mha_scores passes"),
    }
    written = write_guide(root, A)
    for cell in ("self_attention_forward_test", "mha_scores_test"):
        assert f"<td>{cell}</td><td>1</td><td>shape comments missing or wrong</td><td>TA</td>" in written


def test_a_deduction_in_any_notebooks_metadata_is_listed(course_of):
    """01 has no written answer and promises no deduction, so it has no guide, until a cell's
    metadata promises one."""
    assignment = "01_attention_basics"
    root = course_of(assignment)
    assert write_guide(root, assignment) == ""
    path = next((root / "source" / assignment).glob("*.ipynb"))
    notebook = tools.read(path)
    test_cell = tools.graded_cells(notebook, kind="grade")[0]
    test_cell.metadata["autograder"] = {"deductions": [{"points": 0.5, "for": "no comment on the scaling"}]}
    nbformat.write(notebook, path)
    written = write_guide(root, assignment)
    row = f"<td>{test_cell.metadata.nbgrader.grade_id}</td><td>0.5</td><td>no comment on the scaling</td><td>TA</td>"
    assert row in written
