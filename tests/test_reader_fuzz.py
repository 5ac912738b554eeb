"""A property-based fuzzer (Hypothesis) of the trusted steps that read student text after grading:
``autograder similarity`` (and the fingerprints under it), ``autograder report``, ``autograder feedback``,
the regrade's comparison and the grading service's intake. tests/test_notebook_fuzz.py drives grading the
same way.

Whatever one submission holds (JSON nested 100,000 levels, an answer deeper than Python's parser, a 50 MB
string, a giant integer, bytes that are not UTF-8, lone surrogates, a BOM, NUL bytes, CR-only line ends,
UTF-16, the damage of tests/test_notebook_fuzz.py) and whatever its folder or file is named, each command
succeeds for the class and writes all its files, and the grader itself never faults: its faults log stays
empty. The last tests make a fault happen in one notebook and follow it to its flag and the faults log.

Each example is a copy of one small course folder (assignment 01, an honest classmate, a gradebook) with
one hostile submission added, its report as grading writes it (its messages and flag quoting student text),
and its autograded notebook as grading writes it, or the submitted bytes as they are (nbgrader's own autograde
copies a submission there). The examples are derandomized, so the run is the same on every machine.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import notebook_tools as tools
from autograder.recording import record, similarity
from autograder.reading.assignment import Assignment
from autograder.reading.cells import answer_cells, with_grade_id
from autograder.commands.cli import main
from autograder.reading.course import Course
from autograder.commands.demo import ASSIGNMENT as A, NOTEBOOK as NB, make_course
from autograder.reading.faults import LOG_NAME
from autograder.recording.fingerprints import fingerprint
from autograder.reading.notebook_data import parse_notebook
from autograder.reading.preflight import preflight
from autograder.recording.regrade import compare, summary, write_changes_csv
from autograder.reading.results import STATUSES, ItemResult, SubmissionResult, load_results, write_report
from autograder.service import intake, store
from similarity_class import deep_expression
from test_notebook_fuzz import damaged_notebooks
from transformer_lm.source_scan import parse_cell

STEM = Path(NB).stem
RELEASE = json.loads((tools.REPO_ROOT / "release" / A / NB).read_text())
SOLUTION = json.loads((tools.REPO_ROOT / "source" / A / NB).read_text())
ANSWERS = [cell for cell, _ in answer_cells(RELEASE["cells"])]
HONEST = "ann"
NOT_UTF8 = os.fsdecode(b"bad\xffname")
"""A folder name whose bytes are not UTF-8: Python reads them as lone surrogates."""
STUDENTS = ["bo", "=<img src=x onerror=alert(1)>&amp;\"'", "odd\nname", NOT_UTF8, "é" * 120, "-rf", "=SUM(A1:A9)"]
FILE_NAMES = [NB, "my homework (1).ipynb", os.fsdecode(b"\xff\xfe.ipynb"), "odd\nname.ipynb"]
QUOTED = 1000
"""The most of a student's text that a report quotes here (grading quotes less)."""
MISTAKE = "softmax over the wrong dimension"
"""A mistake as the hidden checks name it (in the course's words, not the student's)."""
NOT_TEXT = [b"\xff", b"\xff\xc3(", b"\xed\xa0\x80", b"\x00", b"\xef\xbb\xbf"]
"""Bytes that are not UTF-8 text, or not where they stand: a stray byte, a cut sequence, an encoded surrogate,
NUL, a BOM."""


def nested_blocks(depth: int) -> str:
    """``depth`` nested ifs: Python's parser takes 100 levels of indentation at most."""
    return "".join("    " * level + "if x:\n" for level in range(depth)) + "    " * depth + "pass\n"


PIECES = ["x = 1", "\n", "\r", "\r\n", "\x00", "\ud800", "\udcff", "\ufeff", "\x85", "\x1c", "\x0c", "\u2028", "'",
          '"""', "#", "    ", "def f():", "return x", "</pre><script>alert(1)</script>", "=HYPERLINK(1)", "%%bash",
          "!ls", "\\", "{{ x }}", "{%", "1" * 5000]
"""Characters and lines that mean something to a parser, a lexer, a page or a spreadsheet."""
TEXTS = (st.text(st.characters(categories=["L", "N", "P", "S", "Z", "Cc", "Cs"]), max_size=30)
         | st.lists(st.sampled_from(PIECES), max_size=40).map("".join)
         | st.sampled_from([3_000, 20_000]).map(deep_expression)
         | st.integers(1, 300).map(lambda n: "x = " + "(" * n + "1" + ")" * n + "\n")
         | st.integers(95, 105).map(nested_blocks)
         | st.sampled_from([10_000, 60_000]).map(lambda n: f"x = '{'a' * n}'\n")
         | st.sampled_from([4_301, 60_000]).map(lambda n: "x = " + "9" * n + "\n"))
"""Student text: any characters, and code that is deep, long or huge in the ways a parser minds."""


def notebook_bytes(notebook: dict, how: str = "utf-8", ascii_only: bool = True) -> bytes:
    """``notebook`` saved as a file: as JupyterLab saves it, with a BOM, as UTF-16, with CR-only line ends."""
    text = json.dumps(notebook, ensure_ascii=ascii_only, indent=1)
    if how == "CR":
        text = text.replace("\n", "\r")
    if how == "UTF-16":
        return text.encode("utf-16", "surrogatepass")
    return (b"\xef\xbb\xbf" if how == "BOM" else b"") + text.encode("utf-8", "surrogatepass")


def with_answers(answers: dict[str, str], start: dict = SOLUTION) -> dict:
    notebook = json.loads(json.dumps(start))
    for cell, source in answers.items():
        with_grade_id(notebook["cells"], cell)[0]["source"] = source
    return notebook


@st.composite
def hostile_notebooks(draw) -> bytes:
    """A notebook whose answers, an output or a metadata field hold hostile text, saved in an odd way,
    with bytes that are not UTF-8 inserted, or damaged as tests/test_notebook_fuzz.py damages one."""
    if draw(st.integers(0, 3)) == 0:
        return draw(damaged_notebooks())
    cells = draw(st.lists(st.sampled_from(ANSWERS), min_size=1, max_size=3, unique=True))
    notebook = with_answers({cell: draw(TEXTS) for cell in cells}, draw(st.sampled_from([RELEASE, SOLUTION])))
    code = next(cell for cell in notebook["cells"] if cell["cell_type"] == "code")
    if draw(st.booleans()):
        code["outputs"] = [{"output_type": "stream", "name": "stdout", "text": draw(TEXTS)}]
    if draw(st.booleans()):
        code["metadata"]["note"] = draw(TEXTS)
    how = draw(st.sampled_from(["utf-8", "utf-8", "BOM", "UTF-16", "CR"]))
    raw = notebook_bytes(notebook, how, draw(st.booleans()))
    if draw(st.booleans()):
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + draw(st.sampled_from(NOT_TEXT)) + raw[at:]
    return raw


class Hostile:
    """One hostile submission: the student's id (a folder name), the notebook's file name and bytes, the
    text its report quotes, and whether its autograded notebook is the submitted bytes as they are."""

    def __init__(self, student: str, filename: str, raw: bytes, text: str, copied: bool = False,
                 what: str = "generated"):
        self.student, self.filename, self.raw, self.text, self.copied, self.what = \
            student, filename, raw, text, copied, what

    def __repr__(self) -> str:  # Hypothesis prints it with a failing example: the bytes may be 50 MB
        return (f"Hostile({self.what}: {self.student!r}, {self.filename!r}, {len(self.raw):,} bytes "
                f"{self.raw[:60]!r}..., text {self.text[:60]!r}, copied={self.copied})")


submissions = st.builds(Hostile, st.sampled_from(STUDENTS), st.sampled_from(FILE_NAMES), hostile_notebooks(), TEXTS,
                        st.booleans())

DEEP_EXPRESSION = deep_expression(200_000)
NAMED = [
    Hostile("deep", NB, ('{"cells": ' + "[" * 100_000 + "]" * 100_000 + "}").encode(), "[" * 100_000, True,
            "JSON nested 100,000 levels"),
    Hostile("expr", NB, notebook_bytes(with_answers({"causal_attention": DEEP_EXPRESSION})), DEEP_EXPRESSION, False,
            "an answer of 200,000 terms, deeper than Python's parser"),
    Hostile("huge", NB, notebook_bytes(with_answers({"softmax_stable": "MARK"})).replace(b"MARK", b"x = '%s'" % (
        b"a" * 50_000_000)), "a", False, "a 50 MB string"),
    Hostile("giant", NB, notebook_bytes(with_answers({"softmax_stable": "x = " + "9" * 100_000 + "\n"})),
            "9" * 100_000, False, "a giant integer literal in a cell"),
    Hostile("giant_json", NB, json.dumps(SOLUTION).replace('"nbformat_minor": 5', '"nbformat_minor": ' + "9" * 5000)
            .encode(), "1e999", True, "a giant integer in the JSON"),
    Hostile("bytes", NB, notebook_bytes(with_answers({"softmax_stable": "x = 'MARK'\n"})).replace(b"MARK", NOT_TEXT[1]),
            "\udcff", True, "bytes that are not UTF-8"),
    Hostile("surrogate", NB, notebook_bytes(with_answers({"softmax_stable": "x = '\ud800'\n"})), "\ud800", True,
            "a lone surrogate escaped in JSON"),
    Hostile("raw_surrogate", NB, notebook_bytes(with_answers({"softmax_stable": "# \ud800\n"}), ascii_only=False),
            "\udfff", True, "a lone surrogate encoded as bytes"),
    Hostile("bom", NB, notebook_bytes(SOLUTION, "BOM"), "\ufeff", True, "a BOM"),
    Hostile("nul", NB, notebook_bytes(with_answers({"softmax_stable": "x = 1\x00\n"})) + b"\x00", "\x00", True,
            "NUL bytes"),
    Hostile("cr", NB, notebook_bytes(with_answers({"softmax_stable": "def softmax_stable(x):\r    return x\r"}), "CR"),
            "a\rb", False, "CR-only line ends"),
    Hostile("utf16", NB, notebook_bytes(SOLUTION, "UTF-16"), "utf-16", True, "UTF-16"),
    Hostile("nel", NB, notebook_bytes(with_answers({"softmax_stable": "def f():\x85    return 1\x1c\n"})), "\x85",
            False, "line breaks that Python's tokenizer does not break at"),
    Hostile(NOT_UTF8, FILE_NAMES[2], notebook_bytes(SOLUTION), NOT_UTF8, False, "names that are not UTF-8"),
]


def named_examples(test):
    """``test`` with an explicit example of each named input."""
    for hostile in NAMED:
        test = example(sub=hostile)(test)
    return test


def fuzz(examples: int):
    """Hypothesis's settings for ``examples`` generated examples besides the named ones, the same on every run."""
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


class Template:
    """The course folder each example copies, and its loaded assignment (a short repr for Hypothesis)."""

    def __init__(self, root: Path):
        self.root, self.assignment = root, Assignment.load(Course(root), A)

    def __repr__(self) -> str:
        return f"Template({A})"


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Template:
    """Assignment 01 with an honest student, graded as grading leaves it, and a gradebook."""
    root = tmp_path_factory.mktemp("readers")
    make_course(root, A, generate=False)
    folder = root / "submitted" / HONEST / A
    folder.mkdir(parents=True)
    (folder / NB).write_text(json.dumps(SOLUTION))
    made = Template(root)
    course = Course(root)
    result = report_of(made, HONEST, "Correct.")
    write_report(course, result)
    record.write_autograded(course, result, {STEM: preflight(folder / NB, made.assignment.release[STEM],
                                                             made.assignment.items[STEM])}, made.assignment.release)
    record.markings(course, A)  # makes the gradebook, once
    return made


def report_of(template: Template, student: str, text: str) -> SubmissionResult:
    """A report as grading writes it, whose messages and flag quote ``text`` (cut short, as grading quotes
    student text); the mistakes' names and hints are the hidden checks' own words."""
    text = text[:QUOTED]
    items = [ItemResult(item.grade_id, STEM, float(index % 2), 1.0, STATUSES[index % len(STATUSES)], text,
                        hint="Softmax over the keys.", mistake=MISTAKE if index % 3 else None,
                        answer=item.answer_id)
             for index, item in enumerate(template.assignment.items[STEM])]
    return SubmissionResult(student, A, sum(item.score for item in items), len(items), [f"{STEM}: {text}"], items,
                            checks_version="v1")


def class_with(template: Template, folder: Path, sub: Hostile) -> Course:
    """A copy of the template with ``sub`` submitted and graded."""
    shutil.copytree(template.root, folder)
    course = Course(folder)
    submitted = course.submission_folder(A, sub.student)
    submitted.mkdir(parents=True)
    (submitted / sub.filename).write_bytes(sub.raw)
    write_report(course, report_of(template, sub.student, sub.text))
    if sub.copied:
        autograded = folder / "autograded" / sub.student / A
        autograded.mkdir(parents=True)
        (autograded / NB).write_bytes(sub.raw)
        return course
    pre = preflight(submitted / sub.filename, template.assignment.release[STEM], template.assignment.items[STEM])
    if not pre.fatal:
        record.write_autograded(course, report_of(template, sub.student, "Graded."), {STEM: pre},
                                template.assignment.release)
    return course


@contextlib.contextmanager
def hostile_class(template: Template, tmp_path: Path, sub: Hostile):
    """The class of one example, in a folder of its own, removed once the example is done."""
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    try:
        yield class_with(template, folder / "course", sub)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def rows(path: Path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8", errors="replace") as f:
        return list(csv.reader(f))


def no_fault(course: Course) -> None:
    log = course.reports(A) / LOG_NAME
    assert not log.exists(), log.read_text(errors="replace")[-3000:]


def run(course: Course, command: str, capsys) -> str:
    """What ``autograder command`` prints for the class, which must succeed."""
    assert main([command, A, "--course", str(course.root)]) == 0
    return capsys.readouterr().out


def similarity_written(course: Course, student: str) -> None:
    folder = course.reports(A)
    assert (folder / "similarity.html").stat().st_size > 0
    assert len(rows(folder / "similarity.csv")) == 3   # the header, the honest student and the hostile one


def report_written(course: Course, student: str) -> None:
    folder = course.reports(A)
    assert (folder / "report.html").stat().st_size > 0 and (folder / "similarity.html").exists()
    assert len(rows(folder / "scores.csv")) == 3
    for each in (HONEST, student):
        json.loads((folder / "gradescope" / each / "results.json").read_text())


def feedback_written(course: Course, student: str) -> None:
    for each in (HONEST, student):
        assert (course.root / "feedback" / each / A / f"{STEM}.html").stat().st_size > 0


WRITTEN = {"similarity": similarity_written, "report": report_written, "feedback": feedback_written}
"""What each command writes for the class, checked once it ran: the hostile student's files among them."""


@pytest.mark.parametrize("command", sorted(WRITTEN))
@fuzz(20)
@named_examples
@given(sub=submissions)
def test_each_reader_succeeds_for_the_class_whatever_one_submission_holds(template, tmp_path, capsys, command, sub):
    """``autograder similarity``, ``report`` and ``feedback`` succeed, write their files for both students,
    and the grader never faults."""
    with hostile_class(template, tmp_path, sub) as course:
        run(course, command, capsys)
        WRITTEN[command](course, sub.student)
        no_fault(course)


@fuzz(100)
@named_examples
@given(sub=submissions)
def test_the_regrade_compares_whatever_one_report_holds(template, tmp_path, sub):
    """The regrade reads the old reports from disk and compares them with the new ones, whose messages and
    flags quote student text and whose student id is a folder's name."""
    shutil.copy(template.root / "nbgrader_config.py", tmp_path)
    course = Course(tmp_path)
    old = report_of(template, sub.student, sub.text)
    write_report(course, old)
    new = report_of(template, sub.student, sub.text[::-1])
    for item in new.items:
        item.score, item.status = 1.0 - item.score, "passed" if item.score == 0 else "failed"
    outcome = compare("v2", [sub.student], {r.student: r for r in load_results(course, A)}, [new])
    assert len(outcome.changes) == len(new.items)
    outcome.changes_csv = write_changes_csv(tmp_path / "changes.csv", outcome.changes)
    assert len(rows(outcome.changes_csv)) == 1 + len(new.items)
    assert all(isinstance(line, str) for line in summary(A, outcome))


@fuzz(100)
@named_examples
@given(sub=submissions)
def test_the_services_intake_refuses_or_takes_whatever_is_sent(template, sub):
    """A notebook sent for a check is taken (202) or refused with a message that says why (400, 413);
    the intake never raises."""
    course = Course(template.root)
    as_string = json.dumps({"filename": sub.filename, "notebook": sub.raw.decode("utf-8", "replace")}).encode()
    for body in (as_string, sub.raw):
        sent = intake.read_post(course, "application/json", body, 2**20)
        assert sent.status in (202, 400, 413) and (sent.taken or 0 < len(sent.message) < 1000)
        assert len(sent.filename) <= store.MAX_FILENAME
    sent = intake.read_sent(course, sub.filename, sub.raw, 2**20)
    assert sent.status in (202, 400, 413) and (sent.taken or 0 < len(sent.message) < 1000)


@settings(max_examples=200, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@example(source=DEEP_EXPRESSION[:similarity.MAX_ANSWER])
@example(source="def f():\x85    return 1\x1c\n    x = 2\x0c\n")
@example(source="x = " + "9" * 49_000)
@given(source=TEXTS)
def test_any_answer_has_a_fingerprint(source):
    """Every answer that similarity compares (up to MAX_ANSWER characters) has a fingerprint whose
    positions point into the answer as written."""
    made = fingerprint(source[:similarity.MAX_ANSWER], "def softmax_stable(x):\n    # YOUR CODE HERE\n")
    assert len(made.positions) == len(made.canonical) and made.positions.max(initial=0) <= len(made.raw_code)


FAULTY = "raise_a_fault_here = 1\n"
"""An answer on which the tests below make the grader fault."""


def fault_on(function, marker: str = FAULTY):
    """``function``, but raising where one of its arguments holds ``marker``: a bug of the grader that
    only one notebook meets."""
    def faulty(*args, **kwargs):
        if any(marker in str(arg) for arg in (*args, *kwargs.values())):
            raise RuntimeError("a bug of the grader")
        return function(*args, **kwargs)
    return faulty


def fault_logged(course: Course, student: str, what: str) -> None:
    log = (course.reports(A) / LOG_NAME).read_text()
    assert f"{student}: {what}\nTraceback" in log and "RuntimeError: a bug of the grader" in log


def test_a_fault_while_comparing_costs_that_notebook_alone(template, tmp_path, capsys, monkeypatch):
    """Similarity leaves the notebook out, with a note that says so and where the traceback is; the report
    is written, with the classmates' answers compared."""
    monkeypatch.setattr(similarity, "fingerprint", fault_on(similarity.fingerprint))
    sub = Hostile("bo", NB, notebook_bytes(with_answers({"softmax_stable": FAULTY})), "Correct.")
    with hostile_class(template, tmp_path, sub) as course:
        out = run(course, "similarity", capsys)
        assert (f"Note: bo: The grader itself failed while comparing {NB} (RuntimeError); its answers were not "
                f"compared. Compare them by hand, and send the traceback in {A}/{LOG_NAME}") in out
        fault_logged(course, "bo", f"comparing {NB}")
        table = {row[0]: row for row in rows(course.reports(A) / "similarity.csv")}
        assert table[HONEST][2:] != [""] * len(table[HONEST][2:]) and table["bo"][2:] == [""] * len(table["bo"][2:])
        run(course, "report", capsys)
        assert len(rows(course.reports(A) / "scores.csv")) == 3
        assert "causal_attention" in (course.reports(A) / "report.html").read_text()


def test_a_fault_of_the_similarity_report_costs_its_section_not_the_report(template, tmp_path, capsys, monkeypatch):
    from autograder.recording import report

    monkeypatch.setattr(report, "write_similarity", fault_on(report.write_similarity, A))
    with hostile_class(template, tmp_path, Hostile("bo", NB, notebook_bytes(SOLUTION), "Correct.")) as course:
        run(course, "report", capsys)
        page = (course.reports(A) / "report.html").read_text()
        assert "The grader itself failed while comparing the class&#39;s answers (RuntimeError); the report was " \
               "written without them." in page
        fault_logged(course, A, "comparing the class's answers")
        assert len(rows(course.reports(A) / "scores.csv")) == 3


def test_a_fault_while_writing_feedback_costs_that_students_pages_alone(template, tmp_path, capsys, monkeypatch):
    from autograder.recording import feedback

    monkeypatch.setattr(feedback, "render", fault_on(feedback.render, "Graded by a faulty grader."))
    with hostile_class(template, tmp_path, Hostile("bo", NB, notebook_bytes(SOLUTION),
                                                   "Graded by a faulty grader.")) as course:
        out = run(course, "feedback", capsys)
        assert ("Note: bo: The grader itself failed while writing the feedback pages (RuntimeError); the student's "
                "feedback pages were not written. Give them their results from the report") in out
        fault_logged(course, "bo", "writing the feedback pages")
        assert (course.root / "feedback" / HONEST / A / f"{STEM}.html").exists()
        assert not (course.root / "feedback" / "bo" / A / f"{STEM}.html").exists()


def test_an_unreadable_autograded_notebook_gives_a_page_without_code_and_a_note(template, tmp_path, capsys):
    with hostile_class(template, tmp_path, Hostile("bo", NB, b"{", "Correct.", copied=True)) as course:
        out = run(course, "feedback", capsys)
        assert f"Note: bo: the feedback page of {STEM} shows no code: autograded/bo/{A}/{NB} could not be read" in out
        assert (course.root / "feedback" / "bo" / A / f"{STEM}.html").exists()
        no_fault(course)


def test_the_commands_print_a_student_id_that_is_not_text(template, tmp_path):
    """A folder name that is not UTF-8 reaches a UTF-8 terminal as backslash escapes, not as a crash."""
    with hostile_class(template, tmp_path, Hostile(NOT_UTF8, NB, b"{", "Correct.")) as course:
        done = subprocess.run([sys.executable, "-m", "autograder", "similarity", A, "--course", str(course.root)],
                              capture_output=True, env={**os.environ, "PYTHONIOENCODING": "utf-8"})
        assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
        assert b"Note: bad\\udcffname: attention_basics.ipynb was not compared." in done.stdout


def test_the_fuzzer_reaches_each_kind_of_input():
    """The strategy is not vacuous: among its notebooks are unreadable ones, repaired ones and ones read as
    they are, with answers that Python cannot parse and answers too long to compare."""
    seen = set()

    @settings(max_examples=150, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    @given(raw=hostile_notebooks())
    def sample(raw):
        notes = []
        data, problem = parse_notebook(raw, notes)
        seen.add("unreadable" if problem else "repaired" if notes else "as it is")
        for _, source in answer_cells(data["cells"]) if data else []:
            seen.add("too long" if len(source) > similarity.MAX_ANSWER else "parsed" if parse_cell(source) else
                     "unparsable")

    sample()
    assert seen == {"unreadable", "repaired", "as it is", "too long", "parsed", "unparsable"}, seen
