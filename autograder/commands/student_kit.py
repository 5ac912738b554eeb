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
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

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

README = """\
# Self-attention in PyTorch: your course folder

Six assignments take you from a dot product to a small GPT and today's decoders; the lecture
notebooks go with them.

```
assignments/<assignment>/   the notebooks you fill in and submit, one per assignment
lectures/                   ungraded lecture notebooks: run them top to bottom
wheels/                     the course's package (transformer_lm: test values and the checks you run)
requirements.txt            what to install
jupyter-config/             the "Check with the grader" toolbar button (for a course that runs the service)
```

## Set up (once)

On a course JupyterHub everything is installed already: open `assignments/`. On your own
machine, with Python 3.11, run these from this folder (the folder this README is in):

```bash
python3.11 -m venv .venv
.venv/bin/pip install -r requirements.txt
# nbgrader's instructor tools (the formgrader, the course list, "Create Assignment") are not for
# students: turn them off, as nbgrader's documentation says; Validate and the assignment list stay.
.venv/bin/jupyter server extension disable --sys-prefix nbgrader.server_extensions.formgrader \\
    nbgrader.server_extensions.course_list
.venv/bin/jupyter labextension disable --level=sys_prefix @jupyter/nbgrader:formgrader \\
    @jupyter/nbgrader:course-list @jupyter/nbgrader:create-assignment
.venv/bin/jupyter labextension lock --level=sys_prefix @jupyter/nbgrader:formgrader \\
    @jupyter/nbgrader:course-list @jupyter/nbgrader:create-assignment
# the "Check with the grader" button (it works where your course runs the grading service):
mkdir -p .venv/share/jupyter/lab/settings && cp jupyter-config/overrides.json .venv/share/jupyter/lab/settings/
```

Then, each time you work on the course, start JupyterLab from this folder:

```bash
.venv/bin/jupyter lab
```

## Work on an assignment

1. Open `assignments/01_attention_basics/attention_basics.ipynb` first, then 02 to 06. Fill in
   every cell marked `# YOUR CODE HERE` (and `YOUR ANSWER HERE` for written answers); keep the
   notebook's name, the names and signatures it asks for, and the read-only cells as they are.
2. Run an answer cell, then the read-only test cell under it: it says what is wrong and names
   the likely mistake; an answer you have not written yet gets `TODO: <name> is not written yet`.
3. Before you submit, press **Validate** in the notebook's toolbar (or run
   `.venv/bin/nbgrader validate assignments/01_attention_basics/attention_basics.ipynb`): it runs
   the notebook top to bottom in a fresh kernel and lists the checks that fail.
4. Submit the saved notebook the way your course says (nbgrader's exchange, or an upload under
   its own file name).

Passing the visible checks is a good sign, not a grade: the grader runs the same kind of checks
on inputs you have not seen.
"""


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
    (out / "README.md").write_text(README)
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
