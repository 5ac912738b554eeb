"""What `autograder report` hands to an LMS, read back as the LMS reads it.

A class of three is graded by `nbgrader autograde` (through the course's trusted hook) with a due date
and nbgrader's "zero" late penalty: ada on time, bo a day late, and 1003, filed under a Canvas user id as
`nbgrader zip_collect` files a Canvas download, on time with the blank release. nbgrader itself records
the timestamps and bo's penalty in the gradebook. Then the exports are checked: Canvas's gradebook CSV
parsed by the rules of Canvas's importer, the Gradescope results against Gradescope's autograder
specification, and the autograder archive run as Gradescope runs it, once per submission.
"""

import contextlib
import csv
import io
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import zipfile

import pytest
from nbgrader.plugins.export import CsvExportPlugin

from autograder.commands.cli import main
from autograder.commands.demo import make_course
from autograder.reading.course import Course
from autograder.recording import record
from autograder.running import sandbox

pytestmark = pytest.mark.skipif(sandbox.detect_isolation().name != "bubblewrap", reason="needs bubblewrap")

A = "01_attention_basics"
NB = "attention_basics.ipynb"
COLUMN = "Attention basics (48213)"
DUE = "2025-01-02 00:00:00 UTC"
ROSTER = {  # nbgrader's student fields, as `nbgrader db student add` or `import` sets them
    "ada": {"first_name": "Ada", "last_name": "Lovelace", "email": "ada@example.edu", "lms_user_id": "2001"},
    "bo": {"first_name": "Bo", "last_name": "Li", "email": "Bo.Li@example.edu", "lms_user_id": "2002"},
    "1003": {},
}
SUBMITTED = {"ada": ("source", "2025-01-01 10:00:00.000000 UTC"), "bo": ("source", "2025-01-03 10:00:00.000000 UTC"),
             "1003": ("release", "2025-01-01 11:00:00.000000 UTC")}

# Gradescope's autograder specification: the keys of results.json and of each test, and their values.
RESULTS_KEYS = {"score", "execution_time", "output", "output_format", "test_output_format", "test_name_format",
                "visibility", "stdout_visibility", "extra_data", "tests", "leaderboard"}
TEST_KEYS = {"score", "max_score", "status", "name", "name_format", "number", "output", "output_format", "tags",
             "visibility", "extra_data"}
VISIBILITIES = {"hidden", "after_due_date", "after_published", "visible"}
FORMATS = {"text", "html", "simple_format", "md", "ansi"}


def nbgrader(*args, cwd):
    done = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=cwd, env=record.nbgrader_env(),
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The course folder after `autograder report`, and what the command printed."""
    root = tmp_path_factory.mktemp("lms")
    make_course(root, A, generate=False)
    for student, (kind, timestamp) in SUBMITTED.items():
        folder = root / "submitted" / student / A
        folder.mkdir(parents=True)
        shutil.copy(root / kind / A / NB, folder / NB)
        (folder / "timestamp.txt").write_text(timestamp)
    with record.gradebook(Course(root)) as gb:
        gb.update_or_create_assignment(A, duedate=DUE)
        for student, fields in ROSTER.items():
            gb.update_or_create_student(student, **fields)
    nbgrader("generate_assignment", A, "--force", cwd=root)
    nbgrader("autograde", A, "--LateSubmissionPlugin.penalty_method=zero", cwd=root)
    said = io.StringIO()
    with contextlib.redirect_stdout(said):
        assert main(["report", A, "--course", str(root), "--canvas-column", COLUMN]) == 0
    return root, said.getvalue()


def canvas_import(path):
    """The rows of a gradebook CSV as Canvas's importer takes them: a header whose first columns are
    Student, ID, then SIS User ID and SIS Login ID, ending with Section; a row whose first cell holds
    "Points Possible"; then one row per student. Returns the assignment columns as (title, id),
    their points possible and, per student row, its identifying cells and its grades."""
    rows = list(csv.reader(path.open(newline="", encoding="utf-8")))
    header = rows[0]
    assert "Student" in header[0] and "ID" in header[1], header
    assert re.match(r"SIS\s+User\s+ID", header[2]) and re.match(r"SIS\s+Login\s+ID", header[3]), header
    assert "Section" in header[4], header
    assignments = [re.fullmatch(r"(.*) \((\d+)\)", name).groups() for name in header[5:]]
    assert "Points Possible" in rows[1][0], rows[1]
    points = [float(cell) for cell in rows[1][5:]]
    students = [{"Student": row[0], "ID": row[1], "SIS User ID": row[2], "SIS Login ID": row[3], "Section": row[4],
                 "grades": row[5:]} for row in rows[2:]]
    assert all(len(row) == len(header) for row in rows)
    return assignments, points, students


def test_canvas_csv_is_what_canvas_imports_with_the_late_penalty_taken(exported):
    root, _ = exported
    assignments, points, students = canvas_import(root / "reports" / A / "canvas.csv")
    assert assignments == [("Attention basics", "48213")] and points == [10.0]
    assert students == [   # in student id order
        {"Student": "1003", "ID": "1003", "SIS User ID": "", "SIS Login ID": "1003", "Section": "",
         "grades": ["0.00"]},
        {"Student": "Lovelace, Ada", "ID": "2001", "SIS User ID": "", "SIS Login ID": "ada", "Section": "",
         "grades": ["10.00"]},
        {"Student": "Li, Bo", "ID": "2002", "SIS User ID": "", "SIS Login ID": "bo", "Section": "",
         "grades": ["0.00"]},   # bo's 10 points, less nbgrader's late penalty of 10
    ]


def test_every_export_totals_as_nbgrader_export_does(exported, tmp_path):
    root, _ = exported
    with record.gradebook(Course(root)) as gb:
        CsvExportPlugin(to=str(tmp_path / "nbgrader.csv"), assignment=[A]).export(gb)
    nbgrader_rows = {row["student_id"]: row for row in csv.DictReader((tmp_path / "nbgrader.csv").open())}
    assert {s: (float(r["raw_score"]), float(r["late_submission_penalty"])) for s, r in nbgrader_rows.items()} == {
        "ada": (10.0, 0.0), "bo": (10.0, 10.0), "1003": (0.0, 0.0)}   # nbgrader took off bo's points
    score = {s: float(r["score"]) for s, r in nbgrader_rows.items()}
    _, _, students = canvas_import(root / "reports" / A / "canvas.csv")
    assert {s["SIS Login ID"]: float(s["grades"][0]) for s in students} == score
    table = {row["student"]: row for row in csv.DictReader((root / "reports" / A / "scores.csv").open(newline=""))}
    assert {s: float(row["total"]) for s, row in table.items()} == score
    assert (table["bo"]["late_penalty"], table["ada"]["late_penalty"], table["bo"]["max_total"]) == ("10", "0", "10")
    for student in ROSTER:
        results = json.loads((root / "reports" / A / "gradescope" / student / "results.json").read_text())
        assert results["score"] == score[student]


def test_gradescope_results_follow_gradescopes_specification(exported):
    root, _ = exported
    for student in ROSTER:
        results = json.loads((root / "reports" / A / "gradescope" / student / "results.json").read_text())
        assert set(results) <= RESULTS_KEYS and isinstance(results["score"], float)
        assert results["visibility"] in VISIBILITIES
        assert {results["output_format"], results["test_output_format"]} <= FORMATS
        assert results["tests"] and all(set(test) <= TEST_KEYS for test in results["tests"])
        for test in results["tests"]:
            assert isinstance(test["name"], str) and isinstance(test["number"], str) and isinstance(test["output"], str)
            assert 0 <= test["score"] <= test["max_score"] and test["status"] in ("passed", "failed")
    bo = json.loads((root / "reports" / A / "gradescope" / "bo" / "results.json").read_text())
    assert sum(test["score"] for test in bo["tests"]) == 10 and bo["score"] == 0
    assert "Late: nbgrader's late-submission penalty takes 10 of 10 points, for a total of 0." in bo["output"]


def gradescope_run(archive, root, email):
    """What Gradescope does for one submission: the archive unpacked in source/, run_autograder copied
    beside it, the submitter's metadata written (its documented shape), run_autograder run."""
    with zipfile.ZipFile(archive) as zipped:
        zipped.extractall(root / "source")
        modes = {info.filename: info.external_attr >> 16 for info in zipped.infolist()}
    assert modes["setup.sh"] & stat.S_IXUSR and modes["run_autograder"] & stat.S_IXUSR
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
    (root / "submission_metadata.json").write_text(json.dumps({
        "id": 123456, "created_at": "2025-01-03T10:00:00.000000-00:00",
        "assignment": {"id": 25828, "title": A, "total_points": "10.0"}, "submission_method": "upload",
        "users": [{"email": email, "id": 1234, "name": "A student"}], "previous_submissions": []}, indent=2))
    return subprocess.run(["sh", str(root / "run_autograder"), str(root)], capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"]})


def test_the_gradescope_archive_hands_each_submitter_their_grade(exported, tmp_path):
    root, said = exported
    archive = root / "reports" / A / "gradescope_autograder.zip"
    for student, email in (("ada", "ada@example.edu"), ("bo", "bo.li@example.edu")):   # Gradescope's email case
        ran = gradescope_run(archive, tmp_path / student, email)
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert (tmp_path / student / "results" / "results.json").read_text() == \
            (root / "reports" / A / "gradescope" / student / "results.json").read_text()
    ran = gradescope_run(archive, tmp_path / "stranger", "stranger@example.edu")
    assert ran.returncode == 1 and not (tmp_path / "stranger" / "results").exists()
    assert "No grade in this archive for the email of this submission's account" in ran.stdout
    assert "Left out of the Gradescope archive, for want of an email in the gradebook: 1003" in said


def test_the_same_grades_make_the_same_archive(exported):
    root, _ = exported
    archive = root / "reports" / A / "gradescope_autograder.zip"
    before = archive.read_bytes()
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["report", A, "--course", str(root), "--canvas-column", COLUMN]) == 0
    assert archive.read_bytes() == before
