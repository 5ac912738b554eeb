"""What students receive (autograder student-kit) holds no answer, and works on its own.

The kit is built into a temporary folder and its package installed into a fresh virtual
environment that cannot import the course repository: the third-party libraries come from the
course's environment (a .pth line, whose own .pth files, the repository's editable install among
them, Python does not read), the course's package only from the kit's wheel. There, run by
tests/kit_runner.py:

* every release notebook runs with its answers blank and every visible check says TODO;
* with the solutions' answers put in, every visible check passes;
* every lecture notebook runs top to bottom;
* every stored check, given what each of its catalogued mistakes gives, fails and names it.

Demonstration cells (tagged ``skip-grading``: training runs, plots) are left out of the assignments'
runs; the assignments' own tests run them.

The leak test reads every file of the kit, inside the wheel too, for a solution's line, a model
answer, a hidden checks file, a module or a definition of the reference, and a module that defines
what a notebook asks students to write; a kit with each of those planted in it is refused.
"""

import ast
import json
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import nbformat
import pytest

import notebook_tools as tools
from autograder import student_kit
from autograder.errors import GradingError
from autograder.preflight import SKIP_TAG

ROOT = tools.REPO_ROOT
ASSIGNMENTS = sorted(p.name for p in (ROOT / "release").iterdir() if p.is_dir())


def without_demonstrations(nb):
    nb.cells = [cell for cell in nb.cells if SKIP_TAG not in cell.get("metadata", {}).get("tags", [])]
    return nb


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    folder = tmp_path_factory.mktemp("kit") / "student-kit"
    made = subprocess.run([sys.executable, "-m", "autograder", "student-kit", str(folder)], capture_output=True,
                          text=True, cwd=tmp_path_factory.getbasetemp())
    assert made.returncode == 0, made.stderr
    assert "It holds no solution" in made.stdout
    return folder


@pytest.fixture(scope="module")
def kit_python(kit, tmp_path_factory):
    """A fresh virtual environment with the kit's package installed from its wheel."""
    env = tmp_path_factory.mktemp("kitenv") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    python = env / "bin" / "python"
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / "course_libraries.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    [wheel] = (kit / "wheels").glob("*.whl")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                    "--no-index", str(wheel)], check=True)
    return python


@pytest.fixture(scope="module")
def kit_runs(kit, kit_python, tmp_path_factory):
    """Every release notebook blank and filled in, and every lecture, run in the kit's environment."""
    work = tmp_path_factory.mktemp("runs")
    jobs = []
    for assignment in ASSIGNMENTS:
        [released] = (kit / "assignments" / assignment).glob("*.ipynb")
        [source] = (ROOT / "source" / assignment).glob("*.ipynb")
        for kind, nb in (("blank", tools.read(released)), ("filled", tools.filled_in(released, source))):
            path = work / f"{assignment}-{kind}.ipynb"
            nbformat.write(without_demonstrations(nb), path)
            jobs.append({"path": str(path), "out": str(path), "cwd": str(released.parent), "allow_errors": True})
    for lecture in sorted((kit / "lectures").glob("*.ipynb")):
        jobs.append({"path": str(lecture), "out": str(work / lecture.name), "cwd": str(lecture.parent),
                     "allow_errors": True})
    (work / "jobs.json").write_text(json.dumps({"notebooks": jobs, "names": True}))
    ran = subprocess.run([kit_python, ROOT / "tests" / "kit_runner.py", work / "jobs.json", work / "out.json"],
                         capture_output=True, text=True, cwd=work)
    assert ran.returncode == 0, ran.stderr[-3000:]
    return work, json.loads((work / "out.json").read_text())


def test_the_kit_holds_what_students_need_and_nothing_of_the_instructors(kit):
    assert sorted(p.name for p in kit.iterdir()) == ["README.md", "assignments", "jupyter-config", "lectures",
                                                     "requirements.txt", "wheels"]
    assert sorted(p.name for p in (kit / "assignments").iterdir()) == ASSIGNMENTS
    assert len(list((kit / "lectures").glob("*.ipynb"))) == len(list((ROOT / "notebooks").glob("*.ipynb")))
    [wheel] = (kit / "wheels").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        files = {name for name in archive.namelist() if name.startswith("transformer_lm/")}
    assert files == {f"transformer_lm/{name}" for name in student_kit.STUDENT_FILES}
    assert f"./wheels/{wheel.name}" in (kit / "requirements.txt").read_text().splitlines()
    for path in kit.rglob("*"):
        assert not {"source", "autograder", "submitted", "autograded", "reports", "gradebook.db"} & set(path.parts)
    assert student_kit.leaks(kit) == []


def reference_definition(name: str) -> str:
    """The source of a top-level definition of the reference package."""
    for path in sorted((ROOT / "transformer_lm" / "reference").glob("*.py")):
        text = path.read_text()
        for node in ast.parse(text).body:
            if getattr(node, "name", None) == name:
                return ast.get_source_segment(text, node) + "\n"
    raise KeyError(name)


def test_a_kit_with_an_answer_planted_in_it_is_refused(kit, tmp_path):
    """Each kind of leak, planted in a copy of the kit, is found where it is."""
    planted = tmp_path / "kit"
    shutil.copytree(kit, planted)
    [solution] = sorted(student_kit.solution_lines(ROOT), key=len)[-1:]
    hidden = (ROOT / "autograder" / "checks" / "01_attention_basics.py").read_text()
    (planted / "lectures" / "notes.py").write_text(f"def softmax_stable(x):\n    pass\n\n# {solution}\n{solution}\n")
    (planted / "lectures" / "checks.txt").write_text(hidden)
    [wheel] = (planted / "wheels").glob("*.whl")
    modules = sorted((ROOT / "transformer_lm" / "reference").glob("*.py"))
    with zipfile.ZipFile(wheel, "a") as archive:
        for module in modules:
            archive.write(module, f"transformer_lm/reference/{module.name}")
    (planted / "lectures" / "attention.py").write_text("import torch\n\n\n" + reference_definition("masked_softmax"))
    found = "\n".join(student_kit.leaks(planted))
    assert "lectures/notes.py: defines softmax_stable" in found
    assert "lectures/notes.py:5: a line of a solution" in found and "notes.py:4" not in found   # the comment is not
    assert "lectures/checks.txt: a hidden checks file" in found
    assert f"{wheel.name}!transformer_lm/reference/gpt.py: defines GPT" in found
    for module in modules:   # attention.py and __init__.py define no name a notebook asks for
        assert f"{wheel.name}!transformer_lm/reference/{module.name}: holds the reference's reference/{module.name}" \
            in found
    assert "lectures/attention.py: holds the reference's masked_softmax\n" in found + "\n"
    with pytest.raises(GradingError, match="not empty"):
        student_kit.build(kit)


def test_the_kits_package_is_the_only_course_code_its_environment_sees(kit_runs, kit_python):
    _, out = kit_runs
    assert str(kit_python.parent.parent) in out["package"], out["package"]
    assert out["hidden"] == []


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_in_the_kit_the_blank_release_says_todo_and_the_solutions_pass(kit_runs, assignment):
    work, _ = kit_runs
    blank = tools.read(work / f"{assignment}-blank.ipynb")
    tests = {tools.grade_id(cell) for cell in tools.graded_cells(blank, kind="grade")
             if cell.cell_type == "code"}
    tools.assert_every_check_says_todo(blank, tests)
    filled = tools.read(work / f"{assignment}-filled.ipynb")
    failed = [(tools.grade_id(cell), tools.errors(cell)) for cell in filled.cells
              if cell.cell_type == "code" and tools.errors(cell)]
    assert failed == []
    passed = "".join(tools.text_outputs(cell) for cell in filled.cells if tools.grade_id(cell) in tests)
    assert "Correct" in passed


def test_in_the_kit_every_lecture_runs(kit_runs, kit):
    work, _ = kit_runs
    for lecture in sorted((kit / "lectures").glob("*.ipynb")):
        ran = tools.read(work / lecture.name)
        failed = [(cell.id, tools.errors(cell)) for cell in ran.cells if cell.cell_type == "code" and tools.errors(cell)]
        assert failed == [], lecture.name


def test_in_the_kit_every_stored_check_names_its_mistakes(kit_runs):
    _, out = kit_runs
    # A case that cannot tell two mistakes apart (the same values) names the first: either is right there.
    wrong = [found for found in out["names"] if found["status"] != "failed"
             or (found["named"] != found["given"] and not found["same_values"])]
    assert wrong == []
    named = {found["given"] for found in out["names"]}
    assert len(named) >= 33, sorted(named)   # 33 when the kit was first built
