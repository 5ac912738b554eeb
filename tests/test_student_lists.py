"""The lists of assignments that students read, the kit's README and docs/student-quick-start.md,
are made from the course's release folders and their notebooks' titles, never typed by hand; and
both give the set-up for Linux, macOS and Windows."""

import json
import shutil

import notebook_tools as tools
from autograder.commands import student_kit

ROOT = tools.REPO_ROOT
QUICK_START = ROOT / "docs" / "student-quick-start.md"


def a_course_with_one_more_assignment(root):
    """The course's release folders, and a new assignment whose notebook's title is its first heading."""
    shutil.copytree(ROOT / "release", root / "release")
    notebook = {"cells": [{"cell_type": "markdown", "id": "title", "metadata": {},
                           "source": ["# Assignment 07: ALiBi, attention that extrapolates\n", "\n", "Words."]}],
                "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (root / "release" / "07_alibi").mkdir()
    (root / "release" / "07_alibi" / "alibi.ipynb").write_text(json.dumps(notebook))
    return root


def test_the_quick_start_lists_the_course_s_assignments_as_the_course_makes_them():
    page = QUICK_START.read_text()
    assert page == student_kit.with_assignment_list(page, ROOT), \
        "docs/student-quick-start.md's list of assignments is out of date: python -m autograder.commands.student_kit"
    for path, title in student_kit.course_assignments(ROOT):
        assert f"`{path}`: {title}" in page


def test_a_new_assignment_joins_both_lists_with_its_title(tmp_path):
    course = a_course_with_one_more_assignment(tmp_path)
    line = "7. `assignments/07_alibi/alibi.ipynb`: ALiBi, attention that extrapolates"
    assert line in student_kit.kit_readme(course)
    listed = student_kit.with_assignment_list(QUICK_START.read_text(), course)
    assert f"   {line}\n   <!-- End of the list. -->" in listed
    assert line not in QUICK_START.read_text() and line not in student_kit.kit_readme(ROOT)


def test_the_set_up_is_given_for_linux_macos_and_windows():
    readme = student_kit.kit_readme(ROOT)
    linux = readme.split("## Set up (once)", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    assert linux.startswith("python3.11 -m venv .venv\n.venv/bin/pip install -r requirements.txt\n")
    assert "On macOS, in Terminal, the same block as on Linux" in readme
    windows = readme.split("```powershell\n", 1)[1].split("```", 1)[0]
    assert windows.startswith("py -3.11 -m venv .venv\n.venv\\Scripts\\python -m pip install -r requirements.txt\n")
    assert " @jupyter" not in windows and "'@jupyter/nbgrader:formgrader'" in windows   # PowerShell reads @ alone
    for page in (readme, QUICK_START.read_text()):
        assert "source .venv/bin/activate" in page and ".venv\\Scripts\\activate" in page
        assert "not run by those tests" in page
