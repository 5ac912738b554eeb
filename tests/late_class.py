"""A class of assignment 02 that holds every case of the course's nbgrader rules: a correct, a
wrong, a blank, a renamed, a copied-cell, a late and an extended submission, and a Canvas download's
``_LATE`` one, with a due date set as nbgrader's docs set it (``nbgrader db assignment add``, before
the release is generated). Graded by both commands in test_course_rules.py and in the TA's image in
test_container.py."""

import datetime
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
from nbgrader.api import Course as GradebookCourse

import notebook_tools as tools
from autograder.commands import demo
from autograder.reading.cells import grade_id
from autograder.reading.course import Course
from autograder.recording import record

A = "02_multihead_attention"
NB = "multihead_attention"
DUE = datetime.datetime(2026, 1, 20, 17, 0)
ON_TIME, LATE = "2026-01-20 16:00:00 UTC", "2026-01-21 09:00:00 UTC"
CANVAS_ID = "1003"
WRITTEN = ("q1", "q2", "q3", "q4", "q5")
PLUGIN = '''from nbgrader.plugins import LateSubmissionPlugin


class HalfOff(LateSubmissionPlugin):
    """Half the points off a late notebook."""

    def late_submission_penalty(self, student_id, score, total_seconds_late):
        return score / 2
'''


def nbgrader(*args, cwd: Path) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=cwd, env=record.nbgrader_env(),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"nbgrader {' '.join(args)}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done


def submissions() -> dict[str, tuple[str, nbformat.NotebookNode, str]]:
    """Each student's file name, notebook and submission time."""
    release, source = tools.REPO_ROOT / "release" / A / f"{NB}.ipynb", tools.REPO_ROOT / "source" / A / f"{NB}.ipynb"
    good = tools.filled_in(release, source)
    wrong = demo.with_answer(good, "self_attention", lambda s: s.replace("hidden ** 0.5", "hidden"))
    copied = tools.read(good)
    at = next(i for i, c in enumerate(copied.cells) if grade_id(c) == "self_attention")
    copied.cells.insert(at + 1, nbformat.from_dict({**copied.cells[at], "id": "pasted"}))
    return {"correct": (f"{NB}.ipynb", good, ON_TIME), "wrong": (f"{NB}.ipynb", nbformat.from_dict(wrong), ON_TIME),
            "blank": (f"{NB}.ipynb", tools.read(release), ON_TIME), "renamed": (f"{NB} (1).ipynb", good, ON_TIME),
            "copied": (f"{NB}.ipynb", copied, ON_TIME), "late": (f"{NB}.ipynb", good, LATE),
            "late_ext": (f"{NB}.ipynb", good, LATE)}


def make_class(root: Path) -> None:
    """The course with its due date set before the release is generated, the submissions, and
    Canvas's download collected with ``zip_collect``."""
    demo.make_course(root, A, generate=False)
    nbgrader("db", "assignment", "add", A, f"--duedate={DUE:%Y-%m-%d %H:%M:%S} UTC", cwd=root)
    for student, (name, notebook, time) in submissions().items():
        folder = root / "submitted" / student / A
        folder.mkdir(parents=True)
        nbformat.write(notebook, folder / name)
        (folder / "timestamp.txt").write_text(time)
    archive = root / "downloaded" / A / "archive"
    archive.mkdir(parents=True)
    with zipfile.ZipFile(archive / "submissions.zip", "w") as zf:
        zf.writestr(f"lovelace_LATE_{CANVAS_ID}_5550003_{NB}-1.ipynb", nbformat.writes(submissions()["correct"][1]))
    nbgrader("zip_collect", A, cwd=root)


def grant_extension(root: Path) -> None:
    with record.gradebook(Course(root)) as gb:
        gb.update_or_create_student("late_ext")
        gb.update_or_create_submission(A, "late_ext")
        gb.grant_extension(A, "late_ext", days=2)


def use_plugin(root: Path) -> None:
    (root / "late_rules.py").write_text(PLUGIN)
    with (root / "nbgrader_config.py").open("a") as config:
        config.write('\nc.AssignLatePenalties.plugin_class = "late_rules.HalfOff"\n')


def gradebook_tables(root: Path) -> dict[str, list[tuple]]:
    """Every table of the gradebook that grading writes, each row keyed by names, not by ids."""
    with record.gradebook(Course(root)) as gb:
        submissions = [s for a in gb.assignments for s in a.submissions]
        notebooks = [(s, nb) for s in submissions for nb in s.notebooks]
        return {
            "courses": sorted((c.id,) for c in gb.db.query(GradebookCourse)),
            "students": sorted((s.id, s.first_name, s.last_name, s.email, s.lms_user_id) for s in gb.students),
            "assignments": sorted((a.name, a.duedate) for a in gb.assignments),
            "submissions": sorted((s.student.id, s.assignment.name, s.timestamp, s.extension, s.total_seconds_late)
                                  for s in submissions),
            "notebooks": sorted((s.student.id, nb.name, nb.late_submission_penalty, nb.flagged) for s, nb in notebooks),
            "grades": sorted((s.student.id, nb.name, g.name, g.auto_score, g.manual_score, g.extra_credit,
                              g.needs_manual_grade) for s, nb in notebooks for g in nb.grades),
            "comments": sorted((s.student.id, nb.name, c.name, c.auto_comment or "", c.manual_comment or "")
                               for s, nb in notebooks for c in nb.comments),
        }


def by_key(rows: list[tuple], width: int) -> dict[tuple, tuple]:
    return {row[:width]: row[width:] for row in rows}
