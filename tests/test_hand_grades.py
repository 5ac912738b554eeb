"""The instructor's and TA's loop with the real tools: a class is graded, a TA grades a written
answer and comments in the gradebook (as formgrader does, through nbgrader's Gradebook), the
feedback is made, one student is regraded, the feedback is made again; the student's page holds
the hand grade and both comments, nothing a TA wrote is lost, and the exports count the written
points and mark the ones still waiting."""

import csv
import json

import pytest

import notebook_tools as tools
from autograder.recording import record
from autograder.running import sandbox
from autograder.commands.cli import main
from autograder.reading.course import Course

pytestmark = pytest.mark.skipif(sandbox.detect_isolation().name != "bubblewrap", reason="needs bubblewrap")

A = "02_multihead_attention"
NB = "multihead_attention"


@pytest.fixture(scope="module")
def looped(tmp_path_factory):
    """The course folder after the whole loop, and the reports of its first grading."""
    root = tmp_path_factory.mktemp("course")
    source = tools.read(tools.REPO_ROOT / "source" / A / f"{NB}.ipynb")
    blank = tools.read(tools.REPO_ROOT / "release" / A / f"{NB}.ipynb")
    reports = tools.grade_class(A, root, {"ada": source, "bo": blank})
    course = Course(root)
    with record.gradebook(course) as gb:   # what formgrader writes when a TA grades Q1 and comments
        gb.find_grade("q1", NB, A, "ada").manual_score = 1.0
        gb.find_comment("q1", NB, A, "ada").manual_comment = "Right: **each head** sees its own subspace."
        gb.find_comment("multihead_self_attention", NB, A, "ada").manual_comment = "Clean reshapes <b>well done</b>."
        gb.db.commit()
    assert main(["feedback", A, "--course", str(root)]) == 0
    first_page = (root / "feedback" / "ada" / A / f"{NB}.html").read_text()
    assert main(["grade", A, "--student", "ada", "--course", str(root)]) == 0   # a regrade after hand grading
    assert main(["feedback", A, "--course", str(root)]) == 0
    assert main(["report", A, "--course", str(root)]) == 0
    return root, reports, first_page


def test_the_feedback_page_holds_the_hand_grade_and_the_comments_after_a_regrade(looped):
    root, _, first_page = looped
    page = (root / "feedback" / "ada" / A / f"{NB}.html").read_text()
    for text in (first_page, page):
        assert "points of written answers graded by hand (4 still waiting for a TA)" in text
        assert "<td>q1</td><td>1 / 1</td>" in text and "<td>q2</td><td>waiting for a TA</td>" in text
        assert "Right: **each head** sees its own subspace." in text
        assert "Clean reshapes &lt;b&gt;well done&lt;/b&gt;." in text   # a TA's comment is text, never markup


def test_a_regrade_keeps_what_the_ta_wrote(looped):
    root, _, _ = looped
    with record.gradebook(Course(root)) as gb:
        grade = gb.find_grade("q1", NB, A, "ada")
        assert (grade.manual_score, grade.needs_manual_grade) == (1.0, False)
        assert gb.find_grade("q2", NB, A, "ada").needs_manual_grade
        assert gb.find_comment("q1", NB, A, "ada").manual_comment.startswith("Right")


def test_autograder_report_writes_the_tas_grading_guide(looped):
    root, _, _ = looped
    guide = (root / "reports" / A / "grading_guide.html").read_text()
    assert guide.count("<h3>Model answer and grading notes</h3>") == 5
    assert "<h2>q1 (1 point), in multihead_attention</h2>" in guide
    assert "Each score is a sum of $h$ products" in guide   # the model answer, which the release never holds
    assert "Each score is a sum of $h$ products" not in (root / "release" / A / f"{NB}.ipynb").read_text()


def test_the_exports_hold_the_written_points_and_mark_those_waiting(looped):
    root, reports, _ = looped
    rows = {row["student"]: row for row in csv.DictReader((root / "reports" / A / "scores.csv").open(newline=""))}
    ada, bo = rows["ada"], rows["bo"]
    assert (ada["q1"], ada["q2"], ada["waiting"]) == ("1", "waiting", "4")
    assert float(ada["total"]) == reports["ada"]["total"] + 1
    assert float(ada["max_total"]) == reports["ada"]["max_total"] + 5
    assert (bo["q1"], bo["waiting"]) == ("0", "0")   # written answers left blank: 0 at once, as in nbgrader
    scope = json.loads((root / "reports" / A / "gradescope" / "ada" / "results.json").read_text())
    q1 = next(test for test in scope["tests"] if test["name"] == "q1")
    assert (q1["score"], q1["max_score"]) == (1.0, 1.0) and scope["score"] == reports["ada"]["total"] + 1
    page = (root / "reports" / A / "report.html").read_text()
    assert "Written answers, graded by hand" in page
    assert '<tr><td>q1</td><td class="n">1</td><td class="n">2</td>' in page   # ada's by a TA, bo's blank one


def test_the_report_says_when_feedback_predates_hand_grades_and_autograder_feedback_catches_up(looped, capsys):
    """Run last: it grades one more written answer by hand, after the feedback was made."""
    root, _, _ = looped
    with record.gradebook(Course(root)) as gb:
        gb.find_grade("q2", NB, A, "ada").manual_score = 0.5
        gb.db.commit()
    capsys.readouterr()
    assert main(["report", A, "--course", str(root)]) == 0
    said = capsys.readouterr().out
    assert "The feedback pages of 1 student(s) predate hand grades or comments recorded since (ada)" in said, said
    assert main(["feedback", A, "--course", str(root)]) == 0
    assert "<td>q2</td><td>0.5 / 1</td>" in (root / "feedback" / "ada" / A / f"{NB}.html").read_text()
    capsys.readouterr()
    assert main(["report", A, "--course", str(root)]) == 0
    assert "predate" not in capsys.readouterr().out


def test_a_deduction_a_ta_takes_on_an_item_reaches_the_page_and_every_export(looped):
    """Run after the others: a TA takes the point the notebook promises for missing shape comments off
    an item the grader passed, in formgrader's score box of its test cell (the grading guide lists it)."""
    root, reports, _ = looped
    item = next(i for i in reports["ada"]["items"] if i["grade_id"] == "self_attention_forward")
    assert item["score"] == item["max_score"] > 1
    with record.gradebook(Course(root)) as gb:
        gb.find_grade("self_attention_forward_test", NB, A, "ada").manual_score = item["max_score"] - 1
        total = gb.find_submission(A, "ada").score
        gb.db.commit()
    assert main(["feedback", A, "--course", str(root)]) == 0
    assert main(["report", A, "--course", str(root)]) == 0
    page = (root / "feedback" / "ada" / A / f"{NB}.html").read_text()
    assert (f"<td>self_attention_forward</td><td>{item['max_score'] - 1:g} / {item['max_score']:g}, set by your TA "
            f"(the grader gave {item['max_score']:g})</td>") in page
    assert f"<b>{reports['ada']['total'] - 1:g} / {reports['ada']['max_total']:g}</b> automatically graded" in page
    rows = {row["student"]: row for row in csv.DictReader((root / "reports" / A / "scores.csv").open(newline=""))}
    assert float(rows["ada"]["total"]) == total == reports["ada"]["total"] + 1.5 - 1   # q1, q2 by hand, less 1
    canvas = list(csv.reader((root / "reports" / A / "canvas.csv").open(newline="")))
    ada = next(row for row in canvas if "ada" in row)
    assert float(ada[-1]) == total
    scope = json.loads((root / "reports" / A / "gradescope" / "ada" / "results.json").read_text())
    forward = next(test for test in scope["tests"] if test["name"] == "self_attention_forward")
    assert (forward["score"], scope["score"]) == (item["max_score"] - 1, total)
