"""``autograder student-kit OUT_DIR``: everything students need, and nothing that answers.

The course repository is the instructor's: it holds the solutions, the model answers, the hidden
checks and the reference. What students receive is built from it here, into one folder an
instructor publishes (a repository, a folder on an LMS, a JupyterHub single-user image):

* ``assignments/``: the release notebooks (made by ``nbgrader generate_assignment``);
* ``lectures/``: the lecture notebooks;
* ``wheels/``: the student part of ``transformer_lm`` as a wheel: the public test values, the
  visible checks judged on stored values, the plotting helpers, the scaffolds and the "Check with
  the grader" extension: the folder ``transformer_lm/`` without its ``instructor/`` subpackage
  (:func:`student_files`);
* ``requirements.txt`` (the pinned libraries and that wheel), ``jupyter-config/`` (the toolbar
  button of "Check with the grader") and a ``README.md`` for students.

:func:`leaks` reads every file of a kit (inside the wheel too) for what must never reach students;
the command refuses to leave a kit that holds any.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from string import Template

from autograder.reading.cells import marks
from autograder.reading.errors import GradingError

PACKAGE = "transformer_lm"
INSTRUCTOR = "instructor"
"""The subpackage of ``transformer_lm`` that stays with the instructor and the grader: the reference,
the mistakes' code, the kinds of check and the visible checks' table (which prepare with the reference)."""
STORED_VALUES = ("data/visible_checks.safetensors", "sandboxed/data/test_values.safetensors")
"""The files of stored values in the student package, which the instructor's script makes."""


def student_files(root: Path) -> list[str]:
    """The files of the student package: every file of ``transformer_lm/`` outside its instructor's
    subpackage (and outside Python's caches), as paths relative to the package."""
    package = root / PACKAGE
    return sorted(str(path.relative_to(package)) for path in package.rglob("*")
                  if path.is_file() and "__pycache__" not in path.parts
                  and path.relative_to(package).parts[0] != INSTRUCTOR)


STUDENT_REQUIREMENTS = ("torch", "numpy", "safetensors", "matplotlib", "tqdm", "jupyterlab", "notebook",
                        "nbgrader", "nbformat", "nbclient", "nbconvert", "ipykernel", "pycodestyle")
"""The pinned libraries of the course's requirements.txt that a student's environment needs."""

WHEEL_PROJECT = """\
[build-system]
requires = ["setuptools>=77"]
build-backend = "setuptools.build_meta"

[project]
name = "transformer-lm-student"
version = "{version}"
description = "The student part of the self-attention course: public test values and visible checks"
requires-python = ">=3.10"
dependencies = ["torch>=2.13", "safetensors>=0.4", "matplotlib>=3.8", "jupyter_server>=2", "nbconvert>=7",
                "pycodestyle>=2.11"]

[project.entry-points."nbconvert.exporters"]
check_with_grader = "transformer_lm.grader_check:CheckExporter"

[tool.setuptools]
packages = ["transformer_lm", "transformer_lm.sandboxed"]

[tool.setuptools.package-data]
transformer_lm = ["data/*.safetensors", "data/*.json", "sandboxed/data/*.safetensors"]

[tool.setuptools.data-files]
"etc/jupyter/jupyter_server_config.d" = ["jupyter-config/transformer_lm.json"]
"""

README = Path(__file__).resolve().parent / "kit_README.md.txt"
"""The kit's README, with the course's list of assignments put in (:func:`kit_readme`)."""
QUICK_START = ("<!-- The list below is made from the course's release/ folder by `python -m "
               "autograder.commands.student_kit`: do not edit it by hand. -->", "<!-- End of the list. -->")
"""The lines around the list of assignments in docs/student-quick-start.md."""


def course_assignments(root: Path) -> list[tuple[str, str]]:
    """Each assignment of the course, in order: its notebook in the kit, ``assignments/<folder>/<notebook>``
    (from ``release/``, which nbgrader makes from ``source/``), and its title, the notebook's first
    heading without its "Assignment NN:"."""
    found = []
    for path in sorted((root / "release").glob("*/*.ipynb")):
        lines = ["".join(cell["source"]) for cell in json.loads(path.read_text())["cells"]
                 if cell["cell_type"] == "markdown"]
        heading = next((line for text in lines for line in text.splitlines() if line.startswith("# ")), "")
        title = re.sub(r"^# (Assignment \d+: )?", "", heading) or path.parent.name
        found.append((f"assignments/{path.parent.name}/{path.name}", title))
    return found


def assignment_list(root: Path) -> str:
    """The course's assignments as a Markdown list: each notebook's path in the kit, and its title."""
    return "\n".join(f"{number}. `{path}`: {title}"
                     for number, (path, title) in enumerate(course_assignments(root), 1))


def kit_readme(root: Path) -> str:
    """The kit's README, listing the course's assignments."""
    first = course_assignments(root)[0][0] if course_assignments(root) else "assignments/<assignment>/<notebook>"
    return Template(README.read_text()).substitute(assignments=assignment_list(root), first=first,
                                                   first_windows=first.replace("/", "\\"))


def with_assignment_list(page: str, root: Path) -> str:
    """``page`` (docs/student-quick-start.md) with the course's list of assignments between its
    :data:`QUICK_START` lines, indented as they are."""
    pattern = re.compile(rf"^( *){re.escape(QUICK_START[0])}\n.*?^ *{re.escape(QUICK_START[1])}$", re.M | re.S)
    indent = pattern.search(page).group(1)
    lines = [QUICK_START[0], *assignment_list(root).splitlines(), QUICK_START[1]]
    return pattern.sub(lambda _: "\n".join(indent + line for line in lines), page, count=1)


def repository_root() -> Path:
    """The course repository this package was installed from (the instructor's checkout)."""
    return Path(__file__).resolve().parents[2]


def build(out: Path, root: Path | None = None) -> Path:
    """Builds the kit into ``out`` (which must not exist or be empty) and returns the wheel's path.
    A folder that holds anything is refused rather than emptied: it may hold work of the
    instructor's, and nothing old may stay in a kit."""
    root = root or repository_root()
    out = out.resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise GradingError(f"{out} is not empty: the kit goes only into a new or empty folder, so that nothing "
                           "old stays in it and nothing of yours is lost. Give another folder, or delete this one "
                           "yourself.")
    made = not out.exists()
    for name in STORED_VALUES:
        if not (root / PACKAGE / name).is_file():
            raise GradingError(f"{PACKAGE}/{name} is missing; an instructor makes the stored values with: "
                               "python -m transformer_lm.instructor.make_test_values")
    out.mkdir(parents=True, exist_ok=True)
    wheel = _build_wheel(root, out / "wheels")
    for notebook in sorted((root / "release").glob("*/*.ipynb")):
        _copy(notebook, out / "assignments" / notebook.parent.name / notebook.name)
    for notebook in sorted((root / "notebooks").glob("*.ipynb")):
        _copy(notebook, out / "lectures" / notebook.name)
    _copy(root / "jupyter-config" / "overrides.json", out / "jupyter-config" / "overrides.json")
    (out / "requirements.txt").write_text(_requirements(root, wheel.name))
    (out / "README.md").write_text(kit_readme(root))
    found = leaks(out, root)
    if found:
        _remove_kit(out, made)
        raise GradingError("the kit would hold what students must never receive, so it was removed:\n  "
                           + "\n  ".join(found))
    return wheel


def _remove_kit(out: Path, made: bool) -> None:
    """Removes what the build wrote into ``out``, and ``out`` itself only where the build made it:
    an empty folder the instructor gave stays theirs."""
    for path in out.iterdir():
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    if made:
        out.rmdir()


def _copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)


def _version(root: Path) -> str:
    import tomllib

    return tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]


def _build_wheel(root: Path, wheels: Path) -> Path:
    """The student files of the package, built into a wheel by pip and setuptools."""
    with tempfile.TemporaryDirectory() as scratch:
        project = Path(scratch)
        for name in student_files(root):
            _copy(root / PACKAGE / name, project / PACKAGE / name)
        _copy(root / "jupyter-config" / "transformer_lm.json", project / "jupyter-config" / "transformer_lm.json")
        (project / "pyproject.toml").write_text(WHEEL_PROJECT.format(version=_version(root)))
        built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                                "--wheel-dir", str(wheels), str(project)], capture_output=True, text=True)
        if built.returncode:
            raise GradingError(f"pip could not build the student package's wheel:\n{built.stderr[-2000:]}")
    [wheel] = wheels.glob("*.whl")
    return wheel


def _requirements(root: Path, wheel: str) -> str:
    """The course's pins of :data:`STUDENT_REQUIREMENTS`, then the wheel."""
    pins = [line for line in (root / "requirements.txt").read_text().splitlines()
            if line.split("==")[0].strip().lower() in STUDENT_REQUIREMENTS]
    return ("# Install from this folder: pip install -r requirements.txt (Python 3.11). torch==2.13.0 is the CPU "
            "build.\n" + "\n".join(pins) + f"\n./wheels/{wheel}\n")


# --------------------------------------------------------------------------------------
# What must never reach students
# --------------------------------------------------------------------------------------

SHORTEST_LEAK = 31
"""A solution's line counts as leaked from this many characters (stripped): shorter ones
(``return x``, ``super().__init__()``) are what any answer writes."""


def written_lines(root: Path):
    """Every line of the notebooks in ``source/``, stripped, as ``(inside, cell type, line)``: inside
    is whether it lies in a ``### BEGIN SOLUTION`` region or a written question's model answer. The
    markers themselves are left out."""
    for path in sorted((root / "source").glob("*/*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            inside = cell["cell_type"] == "markdown" and marks(cell).get("solution") is True
            for line in "".join(cell["source"]).split("\n"):
                stripped = line.strip()
                if stripped.startswith(("### BEGIN SOLUTION", "### END SOLUTION")):
                    inside = stripped.startswith("### BEGIN")
                else:
                    yield inside, cell["cell_type"], stripped


def solution_lines(root: Path) -> set[str]:
    """The lines of every ``### BEGIN SOLUTION`` region in ``source/``, and of every written
    question's model answer, that are a solution's own: long enough, not comments, and not also
    written outside the solutions (a line the notebook gives students anyway, in a demonstration
    or a scaffold, gives nothing away)."""
    answers, given = set(), set()
    for inside, _, line in written_lines(root):
        if len(line) >= SHORTEST_LEAK and not line.startswith("#"):
            (answers if inside else given).add(line)
    return answers - given


def answer_names(root: Path) -> set[str]:
    """The functions and classes the release notebooks ask students to write: the top-level
    definitions of their answer cells."""
    names = set()
    for path in sorted((root / "release").glob("*/*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] != "code" or not marks(cell).get("solution"):
                continue
            try:
                tree = ast.parse("".join(cell["source"]))
            except SyntaxError:
                continue
            names |= {node.name for node in tree.body
                      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    return names


def reference_sources(root: Path) -> dict[str, str]:
    """What of the reference (the packages ``transformer_lm/instructor/reference/`` and
    ``transformer_lm/instructor/concepts/``) must never reach students, by name: each of its modules whole
    (``reference/gpt.py``), and each top-level function and class on its own (``GPT``), wherever it
    is pasted."""
    sources = {}
    for path in sorted(p for folder in ("reference", "concepts")
                       for p in (root / PACKAGE / INSTRUCTOR / folder).glob("*.py")):
        text = path.read_text()
        sources[f"{path.parent.name}/{path.name}"] = text
        sources.update({node.name: ast.get_source_segment(text, node) for node in ast.parse(text).body
                        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))})
    return sources


def _texts(kit: Path):
    """``(where, text)`` of every text file of the kit, the wheel's files included."""
    for path in sorted(p for p in kit.rglob("*") if p.is_file()):
        where = str(path.relative_to(kit))
        if path.suffix == ".whl":
            with zipfile.ZipFile(path) as wheel:
                for member in wheel.namelist():
                    data = wheel.read(member)
                    if not member.endswith(".safetensors"):
                        yield f"{where}!{member}", data.decode("utf-8", "replace")
        elif path.suffix != ".safetensors":
            yield where, path.read_bytes().decode("utf-8", "replace")


def leaks(kit: Path, root: Path | None = None) -> list[str]:
    """Every place in ``kit`` that holds a solution's line, a model answer, a hidden checks file, a
    module or a definition of the reference, or a module that defines a name students must write;
    empty when there is none."""
    root = root or repository_root()
    solutions, names = solution_lines(root), answer_names(root)
    hidden = {p.read_text() for p in (root / "autograder" / "checks").rglob("*.py")}
    reference = reference_sources(root)
    items = {line.strip() for text in hidden for line in text.split("\n") if "Item(" in line and len(line.strip()) > 30}
    found = []
    for where, text in _texts(kit):
        if text in hidden or any(item in text for item in items):
            found.append(f"{where}: a hidden checks file")
        if where.endswith(".ipynb"):
            text = "\n".join("".join(cell["source"]) for cell in json.loads(text)["cells"])
        for number, line in enumerate(text.split("\n"), 1):
            if line.strip() in solutions:
                found.append(f"{where}:{number}: a line of a solution: {line.strip()[:80]}")
        held = [name for name, source in reference.items() if source in text]
        if held:
            found.append(f"{where}: holds the reference's {', '.join(held)}")
        if where.endswith(".py"):
            defined = {node.name for node in ast.walk(ast.parse(text))
                       if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
            for name in sorted(defined & names):
                found.append(f"{where}: defines {name}, which a notebook asks students to write")
    return found


if __name__ == "__main__":
    # Writes the course's list of assignments into docs/student-quick-start.md, from the repository root.
    quick_start = repository_root() / "docs" / "student-quick-start.md"
    quick_start.write_text(with_assignment_list(quick_start.read_text(), repository_root()))
