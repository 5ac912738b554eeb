"""The course's nbgrader rules, applied alike by ``autograder grade`` and ``nbgrader autograde``.

One class of assignment 02 (it has written answers) holds a correct, a wrong, a blank, a renamed, a
copied-cell, a late and an extended submission, and a Canvas download's ``_LATE`` one. The course
sets a due date as nbgrader's docs do (``nbgrader db assignment add``, before the release is
generated) and ``penalty_method = "zero"``. The class is graded once by each command, each in a
copy of the course, and the gradebooks must be the same table by table; then the late students
are graded again by both under a late-submission plugin of the course's own.
"""

import contextlib
import datetime
import io
import shutil

import pytest

from autograder.commands.cli import main
from autograder.reading.course import Course
from autograder.recording import record
from autograder.running import sandbox
from late_class import (A, CANVAS_ID, DUE, NB, WRITTEN, by_key, grant_extension, gradebook_tables, make_class,
                        nbgrader, submissions, use_plugin)

pytestmark = pytest.mark.skipif(sandbox.detect_isolation().name != "bubblewrap", reason="needs bubblewrap")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The class graded by each command under ``penalty_method = "zero"``, then its late students
    again under the course's own plugin: each gradebook's tables at both times, and what the
    first ``autograder grade`` (of one student, before anything generated the release) returned."""
    base = tmp_path_factory.mktemp("base")
    make_class(base)
    Course(base).secret()  # the copies share the course's secret, and so their hidden inputs
    with (base / "nbgrader_config.py").open("a") as config:
        config.write('\nc.LateSubmissionPlugin.penalty_method = "zero"\n')
    ours, theirs = tmp_path_factory.mktemp("autograder") / "course", tmp_path_factory.mktemp("nbgrader") / "course"
    shutil.copytree(base, ours)
    shutil.copytree(base, theirs)

    first = main(["grade", A, "--student", "correct", "--course", str(ours)])
    grant_extension(ours)
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        assert main(["grade", A, "--course", str(ours)]) == 0
    nbgrader("generate_assignment", A, "--force", cwd=theirs)
    grant_extension(theirs)
    said = nbgrader("autograde", A, cwd=theirs)
    zero = {"autograder": gradebook_tables(ours), "nbgrader": gradebook_tables(theirs)}
    pages = {student: (ours / "feedback" / student / A / f"{NB}.html").read_text() for student in ("late", "late_ext")}
    grades_csv = (ours / "reports" / A / "grades.csv").read_text()

    for root in (ours, theirs):
        use_plugin(root)
    assert main(["grade", A, "--student", "late", "--student", "late_ext", "--course", str(ours)]) == 0
    nbgrader("autograde", A, "--student=late*", "--force", cwd=theirs)
    own = {"autograder": gradebook_tables(ours), "nbgrader": gradebook_tables(theirs)}
    return {"zero": zero, "own": own, "first": first, "said": said.stdout + said.stderr, "pages": pages,
            "grades_csv": grades_csv, "printed": printed.getvalue(), "base": base, "theirs": theirs}


@pytest.mark.parametrize("stage", ["zero", "own"])
def test_both_commands_write_the_same_gradebook_table_by_table(graded, stage):
    ours, theirs = graded[stage]["autograder"], graded[stage]["nbgrader"]
    assert ours.keys() == theirs.keys()
    for table in ours:
        assert ours[table] == theirs[table], table
    students = {row[0] for row in ours["submissions"]}
    assert students == {*submissions(), CANVAS_ID}


def test_late_work_gets_nbgraders_penalty_its_time_is_recorded_and_every_export_shows_it(graded):
    tables = graded["zero"]["autograder"]
    submitted = by_key(tables["submissions"], 2)
    assert submitted[("late", A)][0] == datetime.datetime(2026, 1, 21, 9, 0)
    assert submitted[("late", A)][2] == 16 * 3600
    assert submitted[("late_ext", A)][1] == datetime.timedelta(days=2) and submitted[("late_ext", A)][2] == 0
    assert submitted[("correct", A)][2] == 0
    penalties = by_key(tables["notebooks"], 2)
    points = sum(row[3] for row in tables["grades"] if row[0] == "late" and row[3] is not None)
    assert points == 10 and penalties[("late", NB)][0] == points   # "zero": all its points off
    assert penalties[("late_ext", NB)][0] is None and penalties[("correct", NB)][0] is None
    assert f"late,{A},{NB},late_submission_penalty,-10.0,0,late," in graded["grades_csv"]
    assert "Submitted 16 h after the due date: late penalty 10 points." in graded["pages"]["late"]
    assert "Note: late: Submitted 16 h after the due date: late penalty 10 points." in graded["printed"]
    assert "after the due date" not in graded["pages"]["late_ext"]
    halved = by_key(graded["own"]["autograder"]["notebooks"], 2)
    assert halved[("late", NB)][0] == 5 and halved[("late_ext", NB)][0] is None


def test_an_unchanged_written_answer_scores_0_at_once_and_a_written_one_waits(graded):
    grades = by_key(graded["zero"]["autograder"]["grades"], 3)
    comments = by_key(graded["zero"]["autograder"]["comments"], 3)
    for q in WRITTEN:
        assert grades[("blank", NB, q)] == (0.0, None, None, False)
        assert comments[("blank", NB, q)] == (record.NO_RESPONSE, "")
        assert grades[("correct", NB, q)] == (None, None, None, True)


def test_a_due_date_set_before_the_release_is_generated_does_not_stop_grading(graded):
    assert graded["first"] == 0
    assert by_key(graded["zero"]["autograder"]["assignments"], 1)[(A,)] == (DUE,)


def test_a_renamed_notebook_gets_the_same_grade_from_both_commands(graded):
    for command in ("autograder", "nbgrader"):
        grades = graded["zero"][command]["grades"]
        points = {student: sum(row[3] or 0 for row in grades if row[0] == student)
                  for student in ("renamed", "correct")}
        assert points == {"renamed": 10, "correct": 10}, command
    folder = graded["theirs"] / "submitted" / "renamed" / A
    assert sorted(p.name for p in folder.glob("*.ipynb")) == [f"{NB} (1).ipynb", f"{NB}.ipynb"]
    assert f"is not named {NB}.ipynb: graded as a copy named {NB}.ipynb beside it" in graded["said"]
    assert "No notebooks found" not in graded["said"]


def test_canvas_late_mark_becomes_a_time_one_second_past_the_due_date(graded):
    stamp = (graded["base"] / "submitted" / CANVAS_ID / A / "timestamp.txt").read_text()
    assert stamp == "2026-01-20 17:00:01"
    submitted = by_key(graded["zero"]["autograder"]["submissions"], 2)
    assert submitted[(CANVAS_ID, A)][2] == 1
    penalties = by_key(graded["zero"]["autograder"]["notebooks"], 2)
    assert penalties[(CANVAS_ID, NB)][0] == 10
