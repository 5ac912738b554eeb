"""Shared fixtures: one hostile class of assignment 01, graded once per test session, the student
kit with every notebook run in it (tests/kit_fixtures.py: each assignment's ``solved`` and
``released_run`` for its test module, whose ``ROW`` is its row of tests/assignments.py), and the
solution notebook; how the workers share the files; and the TA's image, built once per run, in the
background."""

import hashlib
import os
import tempfile
import uuid
from pathlib import Path

# Each of xdist's workers takes its share of the cores for torch's threads, set before anything imports
# torch (the notebooks' kernels inherit it too). With two workers on two cores, torch's default of one
# thread per core made each worker's threads wait on the other's: tests/test_attacks.py and
# tests/test_outside_truth_visible.py together took 415 s with it and 361 s without (2026-12-07).
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
if WORKERS:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // WORKERS)))

import pytest  # noqa: E402

import container_tools
import hostile_class
import notebook_tools as tools
from autograder.commands import demo
from autograder.running import sandbox
from autograder.reading.course import Course

CELL_TIMEOUT = "5"
pytest_plugins = ["kit_fixtures"]


def fingerprint(paths):
    return {str(p): hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in paths}


@pytest.fixture(scope="session")
def graded_class(tmp_path_factory):
    """The course folder, its cases by student, and the hashes of files no submission may change
    (the gradebook changes by grading; tests read its contents instead)."""
    if sandbox.detect_isolation().name != "bubblewrap":
        pytest.skip(f"needs bubblewrap: {sandbox.detect_isolation().detail}")
    root = tmp_path_factory.mktemp("hostile")
    demo.make_course(root, hostile_class.A, generate=False)
    cases = hostile_class.cases(root)
    hostile_class.write_submissions(root, cases)
    Course(root).secret()  # made before grading, so that its hash can be taken
    before = fingerprint([root / "nbgrader_config.py", root / "source" / hostile_class.A / hostile_class.NB,
                          root / "submitted" / "ada_solution" / hostile_class.A / hostile_class.NB,
                          root / ".grading" / "secret"])
    tools.grade_course(root, hostile_class.A, workers=2, cell_timeout=float(CELL_TIMEOUT))
    return root, {case.student: case for case in cases}, before


@pytest.fixture(scope="module")
def source_nb(request):
    """The test module's solution notebook."""
    return tools.read(request.module.ROW.source_path)


# --------------------------------------------------------------------------------------
# How xdist shares the files between workers (make test: tests/scheduling.py, in this order)
# --------------------------------------------------------------------------------------

LONGEST_FIRST = ["test_student_kit.py", "test_attacks.py", "test_audit.py", "test_outside_truth.py",
                 "test_outside_truth_visible.py", "test_grading.py",
                 "test_assignment_04.py", "test_service_hub.py", "test_notebook_fuzz.py",
                 "test_visible_and_hidden_agree.py", "test_hardening.py", "test_report.py", "test_assignment_01.py",
                 "test_benchmark_anchor.py", "test_adding_an_assignment.py"]
"""Files that take a minute or more (from --durations), handed out first, so that none starts
last and leaves the other worker idle. test_container.py is not among them: its image is built in
the background from the start (:func:`pytest_collection_finish`), and its tests take seconds."""


def pytest_collection_modifyitems(config, items):
    """The longest files first; a stable sort, so every worker collects the same order."""
    rank = {file: n for n, file in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile, refined (tests/scheduling.py)."""
    if config.getvalue("dist") == "loadfile":
        from scheduling import CourseScheduling
        return CourseScheduling(config, log)
    return None


# --------------------------------------------------------------------------------------
# The TA's image, built once per run, in the background (tests/container_tools.py)
# --------------------------------------------------------------------------------------

RUN_ID = pytest.StashKey[str]()


def pytest_configure(config):
    config.stash[RUN_ID] = config.workerinput["testrunuid"] if hasattr(config, "workerinput") else uuid.uuid4().hex


def image_folder(config) -> Path:
    """Where this run's image build writes its log and its outcome, the same for every worker."""
    return Path(tempfile.gettempdir()) / f"course-image-{config.stash[RUN_ID]}"


def pytest_collection_finish(session):
    """A run that holds a test of the TA image (test_container.py's ``image`` fixture) starts
    building the image now, so that the build's waits (the network, the disk) pass while other
    tests run."""
    if not session.config.option.collectonly and any("image" in getattr(item, "fixturenames", ())
                                                     for item in session.items):
        container_tools.start_build(image_folder(session.config))
