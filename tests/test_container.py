"""The TA container: the Dockerfile passes hadolint, and the image it builds (with podman, once per
test run) grades the demo class with no network and bubblewrap's sandbox inside, applies the course's
late, extension and blank-answer rules as nbgrader does, refuses to grade
without the options that sandbox needs, and holds the course's runtime only. Its Kubernetes Jobs
are checked in test_k8s.py."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import container_tools
import late_class
from conftest import image_folder

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "autograder" / "Dockerfile"


def instructions(name: str) -> list[str]:
    """The arguments of every ``name`` instruction of the Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    return [line.split(None, 1)[1] for line in text.splitlines() if line.startswith(name + " ")]


def test_the_dockerfile_passes_hadolint():
    hadolint = Path(sys.executable).with_name("hadolint")
    done = subprocess.run([str(hadolint), str(DOCKERFILE)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_container_runs_as_a_user_and_enters_the_autograder():
    assert instructions("USER") == ["1000"]
    assert instructions("ENTRYPOINT") == ['["autograder"]']
    assert any("useradd" in run and "--uid 1000" in run for run in instructions("RUN"))


def test_a_build_that_died_without_a_result_is_reported_with_its_log(tmp_path):
    """The container test waits for the background build; a build that was killed says so at once,
    with the end of its log, instead of leaving the test to wait out its time."""
    with open(tmp_path / "build.log", "wb") as log:
        dead = subprocess.Popen([sys.executable, "-c", "print('pip: no space left on device')"], stdout=log)
    dead.wait()
    (tmp_path / "pid").write_text(str(dead.pid))
    with pytest.raises(AssertionError, match="ended without a result(.|\n)*no space left on device"):
        container_tools.built_image(tmp_path, timeout=60)
    (tmp_path / container_tools.BUILD_RESULT).write_text('{"image": "localhost/x:test", "error": ""}')
    assert container_tools.built_image(tmp_path) == "localhost/x:test"


@pytest.fixture(scope="module")
def image(request):
    """The TA's image, built once per test run, in the background since the tests were collected
    (conftest's ``pytest_collection_finish``)."""
    problem = container_tools.podman_problem()
    if problem:
        pytest.skip(problem)
    folder = image_folder(request.config)
    container_tools.start_build(folder)  # started already, unless the collection hook did not run
    yield container_tools.built_image(folder)
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def course(tmp_path):
    """An empty course folder that the image's user (uid 1000) may write."""
    folder = tmp_path / "course"
    folder.mkdir()
    if os.geteuid() == 0:
        os.chown(folder, 1000, 1000)
    else:
        folder.chmod(0o777)
    return folder


def test_the_image_grades_the_demo_class_offline_with_the_sandbox_inside(image, course):
    done = container_tools.run(image, course, "demo")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Isolation: bubblewrap" in done.stdout
    assert re.search(r"ada_solution\s+10/10", done.stdout) and re.search(r"bo_blank\s+0/10", done.stdout)
    assert re.search(r"dee_cheater\s+0/10", done.stdout) and "Forbidden call" in done.stdout
    assert (course / "demo-course" / "reports" / "01_attention_basics" / "report.html").is_file()


def test_the_image_applies_the_course_rules_as_nbgrader_does(image, course):
    """The class of :mod:`late_class` (its due date set before the release exists), graded in the image
    under ``penalty_method = "zero"``: the penalties, times and zeros that test_course_rules.py holds
    both commands to on the host."""
    late_class.make_class(course)
    with (course / "nbgrader_config.py").open("a") as config:
        config.write('\nc.LateSubmissionPlugin.penalty_method = "zero"\n')
    late_class.nbgrader("generate_assignment", late_class.A, "--force", cwd=course)   # before an extension
    late_class.grant_extension(course)
    if os.geteuid() == 0:
        subprocess.run(["chown", "-R", "1000:1000", str(course)], check=True)
    done = container_tools.run(image, course, "grade", late_class.A)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    tables = late_class.gradebook_tables(course)
    seconds_late = {row[0]: row[4] for row in tables["submissions"]}
    penalties = {row[0]: row[2] for row in tables["notebooks"]}
    points = {student: sum(row[3] or 0 for row in tables["grades"] if row[0] == student) for student in seconds_late}
    assert (seconds_late["late"], penalties["late"], points["late"]) == (16 * 3600, 10, 10)
    assert (seconds_late["late_ext"], penalties["late_ext"]) == (0, None)
    assert (seconds_late[late_class.CANVAS_ID], penalties[late_class.CANVAS_ID]) == (1, 10)
    assert points["renamed"] == points["correct"] == 10
    blank = {row[2]: row[3:] for row in tables["grades"] if row[0] == "blank" and row[2] in late_class.WRITTEN}
    assert blank == dict.fromkeys(late_class.WRITTEN, (0.0, None, None, False))


def test_without_the_security_options_the_image_refuses_to_grade(image, course):
    done = container_tools.run(image, course, "demo", sandbox=False)
    assert done.returncode != 0
    assert "Refusing to run student code without a sandbox" in done.stdout + done.stderr
    assert "--unsafe-no-sandbox" in done.stdout + done.stderr


def test_the_image_holds_the_course_runtime_and_not_the_tests_tools(image):
    """requirements.txt only, CPU torch; at most 1.3 GB (as podman counts, on this test's base), of which
    about 100 MB is the sandbox's copy of the environment's files that name where it lives (its bytecode).
    The allocator of capped runs is built (autograder/running/kept_blocks.py), and the compiler gone."""
    probe = ("import importlib.util, shutil, torch; from autograder.running import kept_blocks; "
             "print(torch.__version__, [m for m in ('pytest', 'playwright', 'transformers', 'hypothesis', "
             "'kubernetes_validate') if importlib.util.find_spec(m)], kept_blocks.library() == kept_blocks.PREBUILT, "
             "shutil.which('cc'))")
    done = container_tools.podman("run", "--rm", "--network", "none", *container_tools.LIMITS, "--entrypoint", "python",
                                  image, "-c", probe)
    assert done.stdout.split() == ["2.13.0+cpu", "[]", "True", "None"], done.stdout
    assert container_tools.image_bytes(image) <= 1.3e9, container_tools.image_bytes(image)
