"""docs/adding-an-assignment.md, run as written in a fresh clone of the repository, and the command
it starts with, ``autograder new-assignment``.

The page's own blocks are the steps: every ``bash`` block runs in order in the clone, and every
``python`` block whose first line names a file (``# path``), a cell of a notebook (``# path, cell
grade_id``) or a row of the test table (``# tests/assignments.py, the row of NAME``) is what the
author writes there, in place of the TODOs ``new-assignment`` left. The clone's ``.venv`` runs this
test's own environment, and ``PYTHONPATH`` puts the clone's packages first, as an editable install
in the clone would. The new assignment (ALiBi: one function, two mistakes, one alternative) must
audit at 100% and 100%, grade the solution 10 and the blank release 0, and pass its own tests.
"""

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import notebook_tools as tools
from autograder.commands import audit, cli
from autograder.commands.new_assignment import TABLE_END
from autograder.reading.course import Course
from autograder.reading.errors import GradingError
from autograder.running import sandbox

REPO = tools.REPO_ROOT
PAGE = REPO / "docs" / "adding-an-assignment.md"
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)
HEADER = re.compile(r"# (\S+?)(?:, cell (\w+)|, the row of (\w+))?")
ASSIGNMENT = "07_alibi"
STEP_S = 900


def git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def fresh_clone(root: Path) -> set[str]:
    """``git clone`` of the repository into ``root``, with the working tree's uncommitted changes put
    in (none, once they are committed); returns the paths so put in."""
    git("clone", "--quiet", str(REPO), str(root))
    changed = set(git("ls-files", "--modified", "--others", "--exclude-standard", "-z").split("\0")) - {""}
    for name in changed:
        if (REPO / name).is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, root / name)
        else:
            (root / name).unlink(missing_ok=True)
    return changed


def environment_of_this_test(venv: Path) -> None:
    """A ``.venv`` whose programs run this test's environment's: each a script that runs the
    program of the same name there, so that ``sys.prefix`` (and the sandbox's copy of the
    environment, kept under it) stays that environment's own. ``make``'s stamp is new."""
    (venv / "bin").mkdir(parents=True)
    for program in sorted((Path(sys.prefix) / "bin").iterdir()):
        if program.is_file() and os.access(program, os.X_OK):
            script = venv / "bin" / program.name
            script.write_text(f'#!/bin/sh\nexec "{program}" "$@"\n')
            script.chmod(0o755)
    (venv / ".installed").touch()


def write_block(clone: Path, header: re.Match, body: str) -> None:
    """Puts what a ``python`` block of the page holds where its first line says, over a TODO."""
    path, cell, row = clone / header.group(1), header.group(2), header.group(3)
    text = path.read_text()
    assert "TODO" in text, f"{path.relative_to(clone)}: new-assignment left no TODO to write"
    if cell:
        notebook = nbformat.read(path, as_version=4)
        tools.cell_by_grade_id(notebook, cell).source = body.rstrip("\n")
        nbformat.write(notebook, path)
    elif row:
        start = text.index(f'    Assignment(\n        "{row}"')
        path.write_text(text[:start] + body.rstrip("\n") + text[text.index(TABLE_END):])
    else:
        path.write_text(body)


def run_bash(clone: Path, block: str) -> str:
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block], cwd=clone, capture_output=True, text=True,
                          timeout=STEP_S, env={**os.environ, "PYTHONPATH": str(clone)})
    assert done.returncode == 0, f"the page's block failed:\n{block}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def documented_files(page: str) -> set[str]:
    """The files of the page's table of files, with the step that makes each."""
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    return {path for row in rows for path in re.findall(r"`([^`]+)`", row.split("|")[1])}


@pytest.mark.skipif(sandbox.detect_isolation().name != "bubblewrap", reason="needs bubblewrap")
def test_the_page_run_as_written_in_a_fresh_clone_adds_an_assignment_that_audits_and_grades(tmp_path):
    clone = tmp_path / "course"
    put_in = fresh_clone(clone)
    environment_of_this_test(clone / ".venv")
    page = PAGE.read_text()
    said, written = [], 0
    for language, body in BLOCK.findall(page):
        header = HEADER.fullmatch(body.splitlines()[0]) if language == "python" else None
        if language == "bash":
            said.append(run_bash(clone, body))
        elif header:
            write_block(clone, header, body.split("\n", 1)[1])
            written += 1
    assert "autograder new-assignment" in BLOCK.findall(page)[0][1] and written == 6

    audit = next(text for text in said if "mutants caught" in text)
    [everything] = [line for line in audit.splitlines() if line.startswith("| **all** |")]
    assert everything.count("100%") >= 3 and not re.search(r"\((?!100%)\d+%\)", everything), audit
    reports = {student: json.loads((clone / "reports" / ASSIGNMENT / f"{student}.json").read_text())
               for student in ("solution", "blank")}
    assert {student: (report["total"], report["max_total"]) for student, report in reports.items()} == \
        {"solution": (10, 10), "blank": (0, 10)}
    summary = said[-1].strip().splitlines()[-1]
    assert re.search(r"\d+ passed", summary) and not re.search(r"failed|skipped|error", summary), said[-1]

    changed = {line[3:] for line in git("status", "--porcelain", "--untracked-files=all", cwd=clone).splitlines()}
    made = changed - put_in
    assert made <= documented_files(page), f"files the page does not list: {made - documented_files(page)}"
    assert f"release/{ASSIGNMENT}/alibi.ipynb" in made and "transformer_lm/data/visible_checks.safetensors" in made


def new_assignment(course: Path, capsys, *args: str) -> tuple[int, str]:
    """``autograder new-assignment ARGS --course COURSE``: its exit status, and what it said on stderr."""
    status = cli.main(["new-assignment", *args, "--course", str(course)])
    return status, capsys.readouterr().err


def files_of(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def small_course(tmp_path):
    """A course folder with the repository's config, its test table and one assignment's source folder."""
    course = tmp_path / "course"
    (course / "tests").mkdir(parents=True)
    (course / "source" / "01_attention_basics").mkdir(parents=True)
    shutil.copy2(REPO / "nbgrader_config.py", course)
    shutil.copy2(REPO / "tests" / "assignments.py", course / "tests")
    return course


@pytest.mark.parametrize("args, said", [
    (("7_alibi",), "'7_alibi' is not a name for an assignment"),
    (("07_Alibi",), "'07_Alibi' is not a name for an assignment"),
    (("01_again",), "The course has 01_attention_basics already, so the number 01 is taken. Choose a number no "
                    "assignment has, such as 02_again."),
    (("07_alibi", "--concept", "ALiBi"), "'ALiBi' is not a name for a concept"),
])
def test_new_assignment_refuses_a_malformed_or_taken_name_and_writes_nothing(small_course, capsys, args, said):
    before = files_of(small_course)
    status, err = new_assignment(small_course, capsys, *args)
    assert status == 2 and said in err, err
    assert files_of(small_course) == before


def test_new_assignment_writes_every_file_with_a_todo_and_never_overwrites_one(small_course, capsys):
    mine = small_course / "tests" / "test_assignment_08.py"
    mine.write_text("# the author's own file\n")
    before = files_of(small_course)
    status, err = new_assignment(small_course, capsys, "08_alibi")
    assert status == 2 and f"{mine} exists already" in err and "Nothing was written" in err, err
    assert files_of(small_course) == before

    status, err = new_assignment(small_course, capsys, "09_alibi", "--concept", "alibi_attention")
    assert status == 0, err
    written = {"source/09_alibi/alibi.ipynb", "autograder/checks/09_alibi.py", "autograder/checks/audit/09_alibi.py",
               "tests/test_assignment_09.py", "transformer_lm/instructor/concepts/alibi_attention.py"}
    assert set(files_of(small_course)) - set(before) == written
    for name in written:
        text = (small_course / name).read_text()
        assert "TODO" in text, name
        if name.endswith(".py"):
            ast.parse(text)
    notebook = nbformat.read(small_course / "source/09_alibi/alibi.ipynb", as_version=4)
    assert notebook.metadata["language_info"] == {"name": "python"} and notebook.metadata["kernelspec"]["name"] == \
        "python3"
    assert [tools.grade_id(cell) for cell in notebook.cells if "nbgrader" in cell.metadata] == \
        ["setup", "alibi_attention", "alibi_attention_test"]
    table = (small_course / "tests" / "assignments.py").read_text()
    ast.parse(table)
    assert table.count('"09_alibi", "alibi.ipynb"') == 1 and table.index('"09_alibi"') < table.index(TABLE_END)

    made = files_of(small_course)
    status, err = new_assignment(small_course, capsys, "09_alibi", "--concept", "alibi_attention")
    assert status == 2 and "the number 09 is taken" in err, err
    assert files_of(small_course) == made


VERSION = ("from pathlib import Path\n"
           "from autograder.reading.course import COURSE_CODE, Course, checks_version\n"
           "print(COURSE_CODE, checks_version(Course(Path({repo!r})), '01_attention_basics'))\n")


def test_the_checks_version_changes_with_a_fix_in_a_concept_module(tmp_path):
    """``--regrade`` grades again what older checks graded: a fix in a concept module (as in the
    reference or the mistakes' code) makes another version, in a scratch copy of the package."""
    code = tmp_path / "code"
    shutil.copytree(REPO / "transformer_lm", code / "transformer_lm", ignore=shutil.ignore_patterns("__pycache__"))
    concept = code / "transformer_lm" / "instructor" / "concepts" / "tiny.py"
    concept.write_text("def tiny(x):\n    return x + 1\n")

    def version() -> str:
        done = subprocess.run([sys.executable, "-c", VERSION.format(repo=str(REPO))], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120, env={**os.environ, "PYTHONPATH": f"{code}:{REPO}"})
        assert done.returncode == 0, done.stderr
        package, made = done.stdout.split()
        assert package == str(code / "transformer_lm")
        return made

    first = version()
    concept.write_text("def tiny(x):\n    return x + 2\n")
    assert version() != first
    concept.write_text("def tiny(x):\n    return x + 1\n")  # the same bytes again: the same version
    assert version() == first


def test_an_assignment_without_a_bank_is_told_the_functions_a_bank_defines(small_course):
    with pytest.raises(GradingError) as refused:
        audit.load_bank(Course(small_course), "09_alibi", {"cells": []})
    said = str(refused.value)
    assert "mutants(answer) and alternatives(answer)" in said and "autograder new-assignment" in said, said
    assert "MUTANTS" not in said and "ALTERNATIVES" not in said
