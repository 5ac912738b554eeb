"""The TA container: the Dockerfile passes hadolint; the image that docs/containers.md's own podman
blocks build (once per test run, with this machine's pip settings) grades a class with those blocks,
with no network and bubblewrap's sandbox inside, applies the course's late, extension and
blank-answer rules as nbgrader does, and holds the course's runtime only, with torch's CPU build; a
build that would fetch the GPU build stops at once. Each problem a TA can meet (a course folder the
grader may not write, or none, root where bubblewrap cannot start, no options for bubblewrap) is one
sentence and exit status 2. Its Kubernetes Jobs are checked in test_k8s.py."""

import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

import container_tools
import late_class
from autograder.commands import demo
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


@pytest.fixture(scope="module")
def demo_class(tmp_path_factory):
    """The demo's class of 01_attention_basics (four submissions), made once on the host; tests grade copies."""
    folder = tmp_path_factory.mktemp("demo") / "course"
    folder.mkdir()
    demo.build_course(folder)
    return folder


def copy_of(demo_class: Path, tmp_path: Path, owner: int) -> Path:
    """A copy of the demo's class, owned by uid and gid ``owner`` (a TA's user, or root)."""
    folder = tmp_path / "course"
    shutil.copytree(demo_class, folder)
    subprocess.run(["chown", "-R", f"{owner}:{owner}", str(folder)], check=True)
    return folder


def test_the_pages_podman_commands_grade_a_class_offline_with_the_sandbox_inside(image, demo_class, tmp_path):
    """The page's grading block, as written, in a course folder that a TA's user (uid 1000) owns:
    its ``--user`` is that owner, who writes the gradebook, the reports and the feedback."""
    course = copy_of(demo_class, tmp_path, 1000)
    done = container_tools.run_block(container_tools.page_blocks()[1], course)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Isolation: bubblewrap" in done.stdout
    assert re.search(r"ada_solution\s+10/10", done.stdout) and re.search(r"bo_blank\s+0/10", done.stdout)
    assert re.search(r"dee_cheater\s+0/10", done.stdout) and "Forbidden call" in done.stdout
    assert (course / "feedback" / "cy_mistake" / demo.ASSIGNMENT).is_dir()
    assert {path.stat().st_uid for path in (course / "gradebook.db", course / "reports")} == {1000}


def test_the_image_applies_the_course_rules_as_nbgrader_does(image, tmp_path):
    """The class of :mod:`late_class` (its due date set before the release exists), graded in the image
    under ``penalty_method = "zero"``: the penalties, times and zeros that test_course_rules.py holds
    both commands to on the host."""
    course = tmp_path / "course"
    course.mkdir()
    late_class.make_class(course)
    with (course / "nbgrader_config.py").open("a") as config:
        config.write('\nc.LateSubmissionPlugin.penalty_method = "zero"\n')
    late_class.nbgrader("generate_assignment", late_class.A, "--force", cwd=course)   # before an extension
    late_class.grant_extension(course)
    subprocess.run(["chown", "-R", "1000:1000", str(course)], check=True)   # the image's user
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


# What a TA can get wrong: the course folder's owner (uid and gid; None, no folder mounted), podman's
# --user, whether the sandbox's options are given, the command's options, and the sentence's start and end.
MISTAKES = {
    "the grader's user may not write the course folder": (
        0, None, True, [], "uid 1000 may not write /course ({course} on the host)",
        "--user set to the course folder's owner, as docs/containers.md shows (--user \"$(stat -c %u:%g "
        "/path/to/course)\" with podman as root or docker)."),
    "--user names a uid that may not write it": (
        1000, "2000:2000", True, [], "uid 2000 may not write /course ({course} on the host)",
        "with podman as root or docker)."),
    "--user is root, where bubblewrap cannot start": (
        0, "0:0", True, [], "bubblewrap cannot create a sandbox as root in a container",
        "--unsafe-no-sandbox grades without one."),
    "no course folder is mounted": (None, None, True, [], "/course is empty", "as docs/containers.md shows."),
    "--course names a folder that does not exist": (
        1000, None, True, ["--course", "/course/fall"],
        "The course folder /course/fall ({course}/fall on the host) does not exist", "or pass --course DIR."),
    "the container lacks the options bubblewrap needs": (
        1000, None, False, [], "bubblewrap cannot create a sandbox in this container",
        "--unsafe-no-sandbox grades without one."),
}


@pytest.mark.parametrize("mistake", MISTAKES)
def test_each_mistake_of_a_ta_is_one_sentence_and_exit_status_2(image, demo_class, tmp_path, mistake):
    owner, user, sandbox, options, start, end = MISTAKES[mistake]
    course = copy_of(demo_class, tmp_path, owner) if owner is not None else None
    done = container_tools.run(image, course, "grade", demo.ASSIGNMENT, *options, sandbox=sandbox, user=user)
    said = done.stderr.strip()
    assert done.returncode == 2 and not done.stdout.strip(), done.stdout[-3000:] + done.stderr[-3000:]
    assert len(said.splitlines()) == 1 and said.startswith("autograder grade: ") and said.endswith(end), said
    assert start.format(course=course) in said, said


def test_the_image_holds_the_course_runtime_and_not_the_tests_tools(image):
    """requirements.txt only, CPU torch (no CUDA, no nvidia package); at most 1.3 GB (as podman counts, on this
    test's base), of which about 100 MB is the sandbox's copy of the environment's files that name where it
    lives (its bytecode).
    The allocator of capped runs is built (autograder/running/kept_blocks.py), and the compiler gone."""
    probe = ("import importlib.metadata, importlib.util, shutil, torch; from autograder.running import kept_blocks; "
             "print(torch.__version__, torch.version.cuda, [d.name for d in importlib.metadata.distributions() "
             "if d.name.startswith('nvidia')], [m for m in ('pytest', 'playwright', 'transformers', 'hypothesis', "
             "'kubernetes_validate') if importlib.util.find_spec(m)], kept_blocks.library() == kept_blocks.PREBUILT, "
             "shutil.which('cc'))")
    done = container_tools.podman("run", "--rm", "--network", "none", *container_tools.LIMITS, "--entrypoint", "python",
                                  image, "-c", probe)
    assert done.stdout.split() == ["2.13.0+cpu", "None", "[]", "[]", "True", "None"], done.stdout
    assert container_tools.image_bytes(image) <= 1.3e9, container_tools.image_bytes(image)


def gpu_torch_wheel(folder: Path) -> Path:
    """A wheel that stands for torch's GPU build as the public index has it: the pinned version, and
    the nvidia packages in its metadata (what pip reads before it downloads anything)."""
    version = re.search(r"^torch==(\S+)", (container_tools.REPO / "requirements.txt").read_text(), re.M)[1]
    info = f"torch-{version}.dist-info"
    wheel = folder / f"torch-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\nRequires-Dist: "
                                             "nvidia-cuda-runtime-cu12==12.8.90; platform_system == 'Linux'\n")
        archive.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                          "Tag: py3-none-any\n")
        archive.writestr(f"{info}/RECORD", f"{info}/METADATA,,\n{info}/WHEEL,,\n{info}/RECORD,,\n")
    return wheel


def test_a_build_that_would_fetch_torchs_gpu_build_stops_at_once_and_says_what_to_do(image, tmp_path):
    """pip's settings given as environment variables only (no pip.conf: PIP_CONFIG_FILE=/dev/null), with
    one place to find torch, which offers the GPU build: the build script passes them to the build,
    whose first step stops it, before the compiler's or the runtime's packages are fetched."""
    gpu_torch_wheel(tmp_path)
    settings = {"PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(tmp_path)}
    started = time.monotonic()
    # --layers=false: no step from podman's cache (a cached check would pass), and no image left behind.
    done = subprocess.run([str(container_tools.REPO / "autograder" / "build-image.sh"), "--layers=false", "--build-arg",
                           "BASE_IMAGE=localhost/course-base:bookworm"], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **settings})
    took = time.monotonic() - started
    said = done.stdout + done.stderr
    # The sentence as echo prints it (the build's log shows its RUN line too, where its words are apart).
    assert done.returncode != 0, said[-3000:]
    assert "point pip at PyTorch's CPU wheel index, the one its install page gives" in said, said[-3000:]
    assert "gcc" not in said and "bubblewrap" not in said and took < 120, (took, said[-3000:])
