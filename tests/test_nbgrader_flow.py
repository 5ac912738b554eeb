"""nbgrader's whole flow on one machine, with the real command line: the exchange
(release, fetch, submit, collect, autograde, feedback there and back) and ``zip_collect``
of a download from an LMS.

nbgrader takes the student id from the OS user name on ``submit`` and ``fetch_feedback``;
``--student=ID`` overrides it, so one OS user can play two students. Each person also gets a
home folder of their own, as on separate accounts: nbgrader keeps a student's submissions
(and the secret that ``fetch_feedback`` needs to find its feedback) in a cache in that home.
"""

import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest
import notebook_tools as tools
from autograder.commands import demo
from autograder.recording import record
from autograder.running import sandbox
from autograder.reading.course import Course
from autograder.recording.record import nbgrader_env

pytestmark = pytest.mark.skipif(sandbox.detect_isolation().name != "bubblewrap", reason="needs bubblewrap")

A = "01_attention_basics"
NB = "attention_basics.ipynb"
COURSE = Course(tools.REPO_ROOT).settings.course_id


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """One course folder for both tests, since making one costs an nbgrader run; each test
    checks only its own students."""
    root = tmp_path_factory.mktemp("course")
    demo.make_course(root, A)
    return root


def nbgrader(*args, cwd: Path, home: Path) -> None:
    """Runs ``nbgrader ARGS`` in ``cwd`` as the person whose home folder is ``home``; no
    JUPYTER_* variable may point their config or cache elsewhere."""
    env = {k: v for k, v in nbgrader_env().items() if not k.startswith("JUPYTER_")}
    done = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=cwd, env={**env, "HOME": str(home)},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"nbgrader {' '.join(args)}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"


def scores(course: Path, students) -> dict[str, float]:
    """Totals from nbgrader's gradebook, which both ways of grading write."""
    with record.gradebook(Course(course)) as gb:
        return {s: gb.find_submission(A, s).score for s in students}


def test_release_fetch_submit_collect_grade_and_feedback_through_the_exchange(course, tmp_path):
    exchange, instructor = tmp_path / "exchange", tmp_path / "instructor"
    exchange.mkdir()
    instructor.mkdir()
    homes = {s: tmp_path / s for s in ("ada", "bo")}

    def as_instructor(*args):
        nbgrader(*args, f"--Exchange.root={exchange}", cwd=course, home=instructor)

    def as_students(*args):
        """Each student runs ``nbgrader ARGS``, side by side as in a real class."""
        def run(student):
            homes[student].mkdir(exist_ok=True)
            nbgrader(*args, f"--course={COURSE}", f"--Exchange.root={exchange}", f"--student={student}",
                     cwd=homes[student], home=homes[student])
        with ThreadPoolExecutor() as pool:
            list(pool.map(run, homes))

    as_instructor("release_assignment", A)
    as_students("fetch_assignment", A)
    fetched = homes["ada"] / A / NB
    nbformat.write(tools.filled_in(fetched, course / "source" / A / NB), fetched)  # bo hands in the blank release
    as_students("submit", A)

    # All submissions belong to one OS user here, which collect would report as cheating attempts.
    as_instructor("collect", A, "--CollectApp.check_owner=False")
    for student in homes:  # release_feedback needs the secret, late penalties the timestamp
        kept = {p.name for p in (course / "submitted" / student / A).iterdir()}
        assert kept == {NB, "timestamp.txt", "submission_secret.txt"}
    as_instructor("autograde", A)
    assert scores(course, homes) == {"ada": 10, "bo": 0}
    # The course's feedback command (in place of nbgrader generate_feedback): the grader's verdicts
    # with the hand grades and comments of the gradebook, which nbgrader's exchange then hands out.
    subprocess.run([sys.executable, "-m", "autograder", "feedback", A], cwd=course, env=nbgrader_env(), check=True,
                   capture_output=True)
    as_instructor("release_feedback", A)

    as_students("fetch_feedback", A)
    for student, total in (("ada", "10"), ("bo", "0")):
        pages = list((homes[student] / A / "feedback").glob("*/attention_basics.html"))
        assert len(pages) == 1, pages
        assert f"<b>{total} / 10</b> automatically graded points" in pages[0].read_text()


def test_zip_collect_of_a_canvas_download(course, tmp_path):
    """Canvas's "Download Submissions" zip holds ``<name>[_LATE]_<user id>_<file id>_<file name>``
    for every upload, with ``-1``, ``-2``, ... added to a file name uploaded again; the course's
    ``FileNameCollectorPlugin.named_regexp`` takes the user id as the student id."""
    archive = course / "downloaded" / A / "archive"
    archive.mkdir(parents=True)
    release_nb, source_nb = course / "release" / A / NB, course / "source" / A / NB
    with zipfile.ZipFile(archive / "submissions.zip", "w") as zf:
        zf.writestr("lovelaceada_1001_5550001_attention_basics.ipynb", nbformat.writes(tools.filled_in(release_nb, source_nb)))
        zf.writestr("bobo_LATE_1002_5550002_attention_basics-1.ipynb", release_nb.read_text())

    nbgrader("zip_collect", A, cwd=course, home=tmp_path)
    assert all((course / "submitted" / s / A / NB).is_file() for s in ("1001", "1002"))
    tools.grade_course(course, A, students=["1001", "1002"], workers=2, cell_timeout=10)
    assert scores(course, ("1001", "1002")) == {"1001": 10, "1002": 0}
