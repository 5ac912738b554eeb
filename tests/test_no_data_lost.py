"""No instructor command loses or invents data, each checked through the real command:

* ``make student-kit KIT=<a folder that holds something>`` leaves that folder as it was;
* ``autograder grade --student <a typo>`` refuses, names the folder it looked in, and writes nothing;
* formgrader's "Generate Feedback" button writes the grader's pages, not nbgrader's over them;
* ``nbgrader release_feedback`` goes on past a student without the exchange's receipts, and names them.

One course serves every test: ada submitted through nbgrader's exchange (her submission holds
``timestamp.txt`` and ``submission_secret.txt``), ben's came another way and holds neither. Both
hand in the blank release, which grades in seconds.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from nbgrader.utils import notebook_hash

import notebook_tools as tools
from autograder.commands import demo
from autograder.reading.course import Course
from autograder.recording.record import nbgrader_env
from autograder.running import sandbox

A = "01_attention_basics"
NB = "attention_basics"
SECRET = "4f1c0ffee"
COURSE = Course(tools.REPO_ROOT).settings.course_id

needs_bubblewrap = pytest.mark.skipif(sandbox.detect_isolation().name != "bubblewrap",
                                      reason="grading needs bubblewrap")

# What formgrader does when "Generate Feedback" is pressed for a whole assignment: its handler makes
# nbgrader's API with the course's config (nbgrader/server_extensions/formgrader/base.py) and calls
# generate_feedback, which runs nbgrader's GenerateFeedback converter.
PRESS_THE_BUTTON = """
import json, sys
from nbgrader.apps.api import NbGraderAPI
from nbgrader.apps.baseapp import NbGrader
from nbgrader.coursedir import CourseDirectory

app = NbGrader()
app.load_config_file()
print(json.dumps(NbGraderAPI(CourseDirectory(parent=app), parent=app).generate_feedback(sys.argv[1])))
"""


def run(*command, cwd: Path, home: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in nbgrader_env().items() if not k.startswith("JUPYTER_")}
    return subprocess.run(command, cwd=cwd, env={**env, "HOME": str(home or cwd)}, capture_output=True, text=True,
                          timeout=300)


def files(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` with its size and time of change."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("course")
    demo.make_course(root, A, generate=False)
    for student in ("ada", "ben"):
        folder = root / "submitted" / student / A
        folder.mkdir(parents=True)
        shutil.copy(root / "release" / A / f"{NB}.ipynb", folder)
    (root / "submitted" / "ada" / A / "timestamp.txt").write_text("2025-01-06 09:00:00.000000 UTC")
    (root / "submitted" / "ada" / A / "submission_secret.txt").write_text(SECRET)
    return root


@pytest.fixture(scope="module")
def graded(course):
    """The course after ``autograder grade`` of both students, which also writes their feedback pages."""
    done = run(sys.executable, "-m", "autograder", "grade", A, "--student", "ada", "--student", "ben",
               "--workers", "2", "--cell-timeout", "10", cwd=course)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return course


def test_make_student_kit_leaves_a_folder_that_holds_something_as_it_was(tmp_path):
    kit = tmp_path / "kit"
    kit.mkdir()
    (kit / "notes.md").write_text("the instructor's own notes")
    # -o: the environment stays as it is, whatever the age of its stamp; BIN: this Python's commands.
    done = run("make", "-o", ".venv/.installed", "student-kit", f"KIT={kit}", f"BIN={Path(sys.executable).parent}",
               cwd=tools.REPO_ROOT)
    assert done.returncode != 0
    assert f"{kit} is not empty" in done.stderr
    assert [p.name for p in kit.iterdir()] == ["notes.md"]
    assert (kit / "notes.md").read_text() == "the instructor's own notes"


def test_grading_a_student_without_a_submission_is_refused_and_writes_nothing(course):
    before = files(course)
    done = run(sys.executable, "-m", "autograder", "grade", A, "--student", "ada", "--student", "adaa", cwd=course)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"no submission of {A} for adaa (nothing in {course / 'submitted' / 'adaa' / A}; did you mean ada?)" \
        in done.stderr
    assert "Nothing was graded or written." in done.stderr
    assert files(course) == before


@needs_bubblewrap
def test_the_feedback_button_writes_the_graders_pages(graded):
    done = run(sys.executable, "-m", "autograder", "feedback", A, cwd=graded)
    assert done.returncode == 0, done.stderr
    written = {path: path.read_bytes() for path in (graded / "feedback").glob(f"*/{A}/*")}
    assert graded / "feedback" / "ada" / A / "submission_secret.txt" in written
    assert graded / "feedback" / "ben" / A / f"{NB}.html" in written

    done = run(sys.executable, "-c", PRESS_THE_BUTTON, A, cwd=graded)
    assert done.returncode == 0, done.stderr
    pressed = json.loads(done.stdout.splitlines()[-1])
    assert pressed["success"], pressed
    # The same pages, byte for byte, and the receipts that release_feedback needs are still there.
    assert {path: path.read_bytes() for path in (graded / "feedback").glob(f"*/{A}/*")} == written


@needs_bubblewrap
def test_release_feedback_goes_on_past_a_student_without_receipts_and_names_them(graded, tmp_path):
    exchange = tmp_path / "exchange"
    exchange.mkdir()
    done = run(sys.executable, "-m", "nbgrader", "release_feedback", A, f"--Exchange.root={exchange}", cwd=graded,
               home=tmp_path)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert (f"Feedback of ben not released: {graded / 'feedback' / 'ben' / A} has no timestamp.txt or "
            "submission_secret.txt") in said
    released = exchange / COURSE / "feedback"
    assert [p.name for p in released.iterdir()] == [f"{notebook_hash(secret=SECRET, notebook_id=NB)}.html"]
    assert released.joinpath(f"{notebook_hash(secret=SECRET, notebook_id=NB)}.html").read_bytes() == \
        (graded / "feedback" / "ada" / A / f"{NB}.html").read_bytes()
