"""Mistakes in commands are caught, not passed over: an assignment the course does not have, a
folder that is not a course, and a second grading run of an assignment while one is going on
each exit non-zero with a message that says what was expected; so does a grading service started
outside a JupyterHub."""

import contextlib
import io
import shutil

import pytest

import notebook_tools as tools
from autograder.commands.cli import main
from autograder.reading.course import Course


def run(*argv) -> tuple[int, str]:
    """``autograder ARGV``: its exit status and what it printed on stderr."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = main(list(argv))
    return status, err.getvalue()


@pytest.fixture
def course(tmp_path):
    shutil.copy2(tools.REPO_ROOT / "nbgrader_config.py", tmp_path)
    for folder in ("source", "release"):
        shutil.copytree(tools.REPO_ROOT / folder / "02_multihead_attention", tmp_path / folder / "02_multihead_attention")
    Course(tools.REPO_ROOT).copy_checks("02_multihead_attention", tmp_path)
    return tmp_path


@pytest.mark.parametrize("command", ["grade", "report", "feedback", "merge"])
def test_a_misspelt_assignment_exits_2_and_names_the_closest(course, command):
    status, said = run(command, "02_multihead_atention", "--course", str(course))
    assert status == 2
    assert "has no assignment '02_multihead_atention'. Did you mean 02_multihead_attention?" in said, said


def test_a_folder_that_is_not_a_course_exits_2_and_says_where_to_run(tmp_path):
    status, said = run("grade", "02_multihead_attention", "--course", str(tmp_path))
    assert status == 2
    assert f"{tmp_path} is not a course folder: it has no nbgrader_config.py" in said, said


def test_a_course_folder_that_does_not_exist_exits_2_and_names_it(tmp_path):
    status, said = run("grade", "02_multihead_attention", "--course", str(tmp_path / "fall"))
    assert status == 2
    assert f"The course folder {tmp_path / 'fall'} does not exist: run this in the course folder" in said, said


def test_a_second_grading_run_of_the_same_assignment_refuses(course):
    with Course(course).grading_lock("02_multihead_attention"):
        status, said = run("grade", "02_multihead_attention", "--course", str(course), "--unsafe-no-sandbox")
    assert status == 2
    assert "Another run is grading 02_multihead_attention in this course (pid " in said, said
    with Course(course).grading_lock("02_multihead_attention", (0, 2)):   # a shard holds only its own slice
        with Course(course).grading_lock("02_multihead_attention", (1, 2)):
            pass


def test_serve_outside_a_hub_or_a_course_exits_2_and_says_what_it_needs(course, tmp_path, monkeypatch):
    for name in ("JUPYTERHUB_SERVICE_URL", "JUPYTERHUB_SERVICE_PREFIX", "JUPYTERHUB_API_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    status, said = run("serve", "--course", str(course))
    assert status == 2 and "runs as a JupyterHub service" in said and "jupyterhub_config.py" in said, said
    empty = tmp_path / "empty"
    empty.mkdir()
    status, said = run("serve", "--course", str(empty))
    assert status == 2 and "has no nbgrader_config.py" in said, said
