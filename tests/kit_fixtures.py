"""The student kit as a student sets it up, and every notebook students receive run there once per
test session: the blank releases, the releases with the solutions' answers put in, and the lectures.

``tests/test_student_kit.py`` holds the kit to what it promises; the assignments' test modules read
their solution's run (``solved``) and their blank release's (``released_run``) from these runs, and
``tests/test_lecture_notebooks.py`` its lectures', so that each notebook runs once, in the environment
students have. Registered by ``tests/conftest.py``; the files that use these fixtures go to one of
``make test``'s workers together (``tests/scheduling.py``)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import notebook_tools as tools
from assignments import BY_NAME

ROOT = tools.REPO_ROOT
INLINE_FIGURES = {"MPLBACKEND": "module://matplotlib_inline.backend_inline"}
"""The kernels draw their figures into the notebook, whatever backend the tests' environment names."""
KERNEL_PROBE = "import json, kit_runner\nprint(json.dumps(kit_runner.what_it_sees()))"
"""What the notebooks' kernel sees, asked as the runner asks its own process (the kernel starts in the
runner's folder)."""


@pytest.fixture(scope="session")
def kit(tmp_path_factory):
    folder = tmp_path_factory.mktemp("kit") / "student-kit"
    made = subprocess.run([sys.executable, "-m", "autograder", "student-kit", str(folder)], capture_output=True,
                          text=True, cwd=tmp_path_factory.getbasetemp())
    assert made.returncode == 0, made.stderr
    assert "It holds no solution" in made.stdout
    return folder


def readme_steps(folder: Path, heading: str) -> str:
    """The shell lines of the first ``bash`` block under ``heading`` in the kit's README, as a
    student copies them."""
    section = (folder / "README.md").read_text().split(f"## {heading}", 1)[1]
    return section.split("```bash\n", 1)[1].split("```", 1)[0]


@pytest.fixture(scope="session")
def course_folder(kit, tmp_path_factory):
    """A student's copy of the kit, set up by the kit README's own steps, run as written from the
    folder: a fresh virtual environment made from the kit's requirements.txt alone (the pinned
    libraries and the kit's wheel), with nothing of the course's environment or repository on its
    paths, and nbgrader's instructor tools turned off."""
    folder = tmp_path_factory.mktemp("student") / "course"
    shutil.copytree(kit, folder)
    steps = readme_steps(folder, "Set up (once)")
    made = subprocess.run(["bash", "-euo", "pipefail", "-c", steps], cwd=folder, env=tools.outside_the_course(),
                          capture_output=True, text=True)
    assert made.returncode == 0, f"the README's set-up failed:\n{steps}\n{made.stdout[-3000:]}{made.stderr[-3000:]}"
    return folder


@pytest.fixture(scope="session")
def kit_python(course_folder):
    return course_folder / ".venv" / "bin" / "python"


@pytest.fixture(scope="session")
def kit_runs(course_folder, kit_python, tmp_path_factory):
    """In the student's environment, every notebook top to bottom with errors left in its outputs:
    each release blank (``<assignment>-blank.ipynb``) and with the solutions' answers put in
    (``<assignment>-filled.ipynb``, each cell within its assignment's ``cell_timeout``), every lecture
    (by its own name), and a probe of what the kernel imports (``probe.ipynb``); and the runner's
    answer (``kit_runner.py``)."""
    work = tmp_path_factory.mktemp("runs")
    jobs = []
    for assignment in sorted(p.name for p in (course_folder / "assignments").iterdir() if p.is_dir()):
        [released] = (course_folder / "assignments" / assignment).glob("*.ipynb")
        [source] = (ROOT / "source" / assignment).glob("*.ipynb")
        for kind, nb, timeout in (("blank", tools.read(released), 120),
                                  ("filled", tools.filled_in(released, source), BY_NAME[assignment].cell_timeout)):
            path = work / f"{assignment}-{kind}.ipynb"
            nbformat.write(nb, path)
            jobs.append({"path": str(path), "out": str(path), "cwd": str(released.parent), "allow_errors": True,
                         "timeout": timeout})
    for lecture in sorted((course_folder / "lectures").glob("*.ipynb")):
        jobs.append({"path": str(lecture), "out": str(work / lecture.name), "cwd": str(lecture.parent),
                     "allow_errors": True, "timeout": 120})
    probe = work / "probe.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(KERNEL_PROBE)]), probe)
    jobs.append({"path": str(probe), "out": str(probe), "cwd": str(work), "allow_errors": False, "timeout": 120})
    (work / "jobs.json").write_text(json.dumps({"notebooks": jobs, "names": True}))
    shutil.copy(ROOT / "tests" / "kit_runner.py", work)   # run from here: no folder of the course is on its path
    ran = subprocess.run([kit_python, work / "kit_runner.py", work / "jobs.json", work / "out.json"],
                         capture_output=True, text=True, cwd=work, env={**tools.outside_the_course(), **INLINE_FIGURES})
    assert ran.returncode == 0, ran.stderr[-3000:]
    return work, json.loads((work / "out.json").read_text())


@pytest.fixture(scope="module")
def solved(request, kit_runs):
    """The test module's release with the solution's answers put in, as the student kit ran it."""
    return tools.read(kit_runs[0] / f"{request.module.ROW.name}-filled.ipynb")


@pytest.fixture(scope="module")
def released_run(request, kit_runs):
    """The test module's blank release, as the student kit ran it."""
    return tools.read(kit_runs[0] / f"{request.module.ROW.name}-blank.ipynb")
