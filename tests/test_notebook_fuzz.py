"""A property-based fuzzer of submitted notebooks (Hypothesis): whatever a student's file holds,
reading it never raises, and what the grader builds from it is well formed.

Each example starts from the release or the solution of assignment 01 and damages it the ways a
hand-edited or broken file can be damaged: a field of any JSON type where nbformat's schema types
one (metadata, source, outputs, cell_type, execution_count, id, attachments, nbgrader's fields,
tags), values anywhere in the tree replaced or deleted, cells that are not objects, lone
surrogates, huge numbers, deep nesting, and bytes cut off or inserted. Every example goes through
what grading does before and after the sandbox: preflight, the runner's plan (sent to the sandbox
as JSON), the style check of each answer and the autograded notebook (written by nbformat); and,
sent as JSON, as a body or as a form's file, through the grading service's intake. The grading of such notebooks in the sandbox itself is in
the hostile class (``tests/hostile_class.py``, cases ``bad_*``).

The examples are derandomized, so the run is the same on every machine and in CI.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import notebook_tools as tools
from autograder.reading import notebook_data
from autograder.recording import record
from autograder.reading.assignment import Assignment
from autograder.reading.cells import answer_cells
from autograder.reading.course import Course
from autograder.reading.preflight import preflight
from autograder.reading.results import SubmissionResult
from autograder.running.run_plan import plan_of
from autograder.service import intake, store
from transformer_lm.style import style_problems

A, NB = "01_attention_basics", "attention_basics"
EXAMPLES = 1000
INTAKE_EXAMPLES = 300
STARTS = {name: json.loads((tools.REPO_ROOT / name / A / f"{NB}.ipynb").read_text()) for name in ("release", "source")}
TYPED = ["metadata", "source", "outputs", "cell_type", "execution_count", "id", "attachments", "metadata.nbgrader",
         "metadata.tags", "metadata.nbgrader.grade_id", "metadata.nbgrader.solution", "metadata.nbgrader.grade",
         "metadata.nbgrader.locked", "metadata.nbgrader.points"]
"""The fields of a cell that nbformat's schema (or nbgrader's) types, as dotted paths."""

TEXT = st.text(st.characters(categories=["L", "N", "P", "S", "Z", "Cc", "Cs"]), max_size=12)
SCALARS = (st.none() | st.booleans() | st.integers(-2**80, 2**80) | st.floats() | TEXT
           | st.sampled_from(["code", "markdown", "raw", "softmax_stable", "skip-grading", "", "\ud800"]))
PIECES = [b"{", b"}", b"[", b"]", b'"', b"\\", b"\\ud800", b"\xff", b"\x00", b"1e999", b"9" * 5000, b"null",
          b'"cells"', b'"nbformat": 4', b'{"nbgrader": {"grade_id": 7}}', b"[" * 100]
"""Bytes that break JSON, or a notebook's structure, where they land."""
FILE_NAMES = st.text(max_size=2000) | st.lists(st.sampled_from(["a", "/", "\\", "..", "\x00", "\ud800", "é", "%s"]),
                                               max_size=300).map("".join)
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
                    max_leaves=8)


def _set_field(cell: dict, path: str, value) -> None:
    *parents, last = path.split(".")
    node = cell
    for name in parents:
        if not isinstance(node.get(name), dict):
            node[name] = {}
        node = node[name]
    node[last] = value


def _random_walk(draw, notebook: dict) -> None:
    """Replaces or deletes a value at a random place of the notebook's tree."""
    parent, key, node = None, None, notebook
    while isinstance(node, (dict, list)) and node and draw(st.integers(0, 3)):
        key = draw(st.sampled_from(sorted(node, key=str)) if isinstance(node, dict) else st.integers(0, len(node) - 1))
        parent, node = node, node[key]
    if parent is None:
        return
    if draw(st.booleans()):
        parent[key] = draw(JSON)
    elif isinstance(parent, dict):
        del parent[key]
    else:
        parent.pop(key)


@st.composite
def damaged_notebooks(draw) -> bytes:
    """A notebook file as a broken editor, a script or a hostile student could write it."""
    notebook = json.loads(json.dumps(STARTS[draw(st.sampled_from(sorted(STARTS)))]))
    cells = notebook["cells"]
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["field", "field", "walk", "cell", "deep"]))
        index = draw(st.integers(0, len(cells) - 1)) if cells else 0
        if kind == "field" and cells and isinstance(cells[index], dict):
            _set_field(cells[index], draw(st.sampled_from(TYPED)), draw(JSON))
        elif kind == "walk":
            _random_walk(draw, notebook)
        elif kind == "cell":
            cells.insert(index, draw(JSON))
        elif kind == "deep" and cells and isinstance(cells[index], dict):
            cells[index]["metadata"] = "DEEP"  # nested below, in the text: json.dumps cannot nest this deep
    depth = draw(st.sampled_from([3, 70, 5000]))
    text = json.dumps(notebook).replace('"DEEP"', "[" * depth + "]" * depth)
    raw = text.encode("utf-8", "surrogatepass")
    cut = draw(st.sampled_from(["none"] * 8 + ["cut", "insert"]))
    if cut == "cut":
        raw = raw[:draw(st.integers(0, len(raw)))]
    elif cut == "insert":
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + draw(st.binary(max_size=8) | st.sampled_from(PIECES)) + raw[at:]
    return raw


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    from autograder.commands import demo

    root = tmp_path_factory.mktemp("fuzz")
    demo.make_course(root, A, generate=False)
    return Graded(Course(root))


class Graded:
    """The course and its loaded assignment (a short repr: Hypothesis prints it with a failing example)."""

    def __init__(self, course: Course):
        self.course, self.assignment = course, Assignment.load(course, A)

    def __repr__(self) -> str:
        return f"Graded({A})"


def check_one(graded: Graded, folder: Path, raw: bytes) -> None:
    """Everything grading does with a submitted file outside the sandbox, none of which may raise."""
    course, assignment = graded.course, graded.assignment
    path = folder / f"{NB}.ipynb"
    path.write_bytes(raw)
    notes = []
    data, problem = notebook_data.read_notebook(path, notes)
    assert (data is None) != (problem is None)
    assert all(isinstance(note, str) and len(note) < 500 for note in notes)
    if data is not None:
        nbformat.validate(nbformat.from_dict(data))
    items = assignment.items[NB]
    pre = preflight(path, assignment.release[NB], items)
    assert all(isinstance(flag, str) and len(flag) < 1000 for flag in pre.flags)
    if pre.fatal:
        return
    assert all(isinstance(cell.source, str) for cell in pre.cells)
    prepared = {pid: assignment.prepared[pid] for pid in assignment.probe_item if pid not in assignment.stand_ins}
    plan, _ = plan_of(pre, prepared, {pid: assignment.probe_item[pid] for pid in prepared})
    json.dumps(plan)
    for _, source in answer_cells(pre.notebook["cells"]):
        style_problems(source)
    result = SubmissionResult("fuzzed", A, 0.0, 0.0)
    record.write_autograded(course, result, {NB: pre}, assignment.release)
    nbformat.validate(nbformat.read(course.root / "autograded" / "fuzzed" / A / f"{NB}.ipynb", as_version=4))


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(raw=damaged_notebooks())
def test_no_damaged_notebook_makes_the_grader_raise(course, tmp_path, raw):
    check_one(course, tmp_path, raw)


@st.composite
def posts(draw) -> tuple[str, bytes]:
    """A POST to the service: a damaged notebook as a JSON string, as the JSON body itself, or as a
    form's file, under a file name of up to 2000 characters of any kind."""
    raw, name = draw(damaged_notebooks()), draw(FILE_NAMES | st.just(NB + ".ipynb"))
    how = draw(st.sampled_from(["json", "body", "form"]))
    if how == "json":
        text = raw.decode("utf-8", "replace")
        return "application/json", json.dumps({"filename": name, "notebook": text}).encode()
    if how == "body":
        return "application/json", raw
    boundary = "fuzzboundary"
    form = (f'--{boundary}\r\nContent-Disposition: form-data; name="notebook"; filename="{name}"\r\n'
            f"Content-Type: application/octet-stream\r\n\r\n").encode("utf-8", "surrogatepass") + raw + \
        f"\r\n--{boundary}--\r\n".encode()
    return f"multipart/form-data; boundary={boundary}", form


@settings(max_examples=INTAKE_EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(post=posts())
def test_the_services_intake_answers_every_post(course, post):
    """Whatever is posted, the service's intake answers with 202, 400 or 413 and a bounded message
    and file name; it never raises (a 500)."""
    content_type, body = post
    sent = intake.read_post(course.course, content_type, body, 2**20)
    assert sent.status in (202, 400, 413)
    assert len(sent.message) < 1000 and len(sent.filename) <= store.MAX_FILENAME
    assert sent.taken == bool(sent.assignment)


def test_the_fuzzer_reaches_each_kind_of_damage(course, tmp_path):
    """The strategy is not vacuous: among its examples are notebooks that cannot be read, notebooks
    repaired with notes, and notebooks read as they are."""
    outcomes = set()

    @settings(max_examples=200, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(raw=damaged_notebooks())
    def sample(raw):
        notes = []
        data, problem = notebook_data.parse_notebook(raw, notes)
        outcomes.add("unreadable" if problem else "repaired" if notes else "as it is")

    sample()
    assert outcomes == {"unreadable", "repaired", "as it is"}, outcomes
