"""What students receive (autograder student-kit), as a student meets it: it holds no answer, and
works on its own.

A student's copy of the kit is set up by the kit README's own steps: a fresh virtual environment
made from the kit's requirements.txt alone (the pinned libraries, from the package registry, and
the kit's wheel), which sees neither the course's environment nor its repository, with nbgrader's
instructor tools turned off. There, run by tests/kit_runner.py once per test session
(tests/kit_fixtures.py, whose runs the assignments' and the lectures' own tests read too):

* every release notebook runs with its answers blank and every visible check says TODO (its
  demonstrations run too, and fail where they call an answer not written yet);
* with the solutions' answers put in, every release notebook runs top to bottom without an error,
  demonstrations included, and every visible check passes;
* every lecture notebook runs top to bottom (judged by ``tests/test_lecture_notebooks.py``, on these runs);
* every stored check, given what each of its catalogued mistakes gives, fails and names it;
* the kernel imports the kit's package and nothing of the instructor's.

Every path a notebook names is in the kit. In JupyterLab, in headless Chromium, a student walks
assignment 01 from the kit's environment: no instructor tool shows, a mistake is named, its fix
passes, "Check with the grader" says no service is connected, and Validate passes the solution.

The leak test reads every file of the kit, inside the wheel too, for a solution's line, a model
answer, a hidden checks file, a module or a definition of the reference, and a module that defines
what a notebook asks students to write; a kit with each of those planted in it is refused.
"""

import ast
import json
import re
import shutil
import sysconfig
import time
import zipfile
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import pytest

import browser_tools
import notebook_tools as tools
from autograder.commands import student_kit
from autograder.reading.errors import GradingError
from transformer_lm import grader_check

pytestmark = pytest.mark.timeout(1800)  # the first run test sets up the kit's environment and runs every notebook
ROOT = tools.REPO_ROOT
SOLVED_ONLY = "each row sums to 1"   # a comment of context_vectors' answer, which the release does not have
ASSIGNMENTS = sorted(p.name for p in (ROOT / "release").iterdir() if p.is_dir())


def test_the_kit_holds_what_students_need_and_nothing_of_the_instructors(kit):
    assert sorted(p.name for p in kit.iterdir()) == ["README.md", "assignments", "jupyter-config", "lectures",
                                                     "requirements.txt", "wheels"]
    assert sorted(p.name for p in (kit / "assignments").iterdir()) == ASSIGNMENTS
    assert len(list((kit / "lectures").glob("*.ipynb"))) == len(list((ROOT / "notebooks").glob("*.ipynb")))
    [wheel] = (kit / "wheels").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        files = {name for name in archive.namelist() if name.startswith("transformer_lm/")}
    assert files == {f"transformer_lm/{name}" for name in student_kit.student_files(ROOT)}
    assert f"./wheels/{wheel.name}" in (kit / "requirements.txt").read_text().splitlines()
    for path in kit.rglob("*"):
        assert not {"source", "autograder", "submitted", "autograded", "reports", "gradebook.db"} & set(path.parts)
    assert student_kit.leaks(kit) == []


def reference_definition(name: str) -> str:
    """The source of a top-level definition of the reference package."""
    for path in sorted((ROOT / "transformer_lm" / "instructor" / "reference").glob("*.py")):
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
    modules = sorted((ROOT / "transformer_lm" / "instructor" / "reference").glob("*.py"))
    with zipfile.ZipFile(wheel, "a") as archive:
        for module in modules:
            archive.write(module, f"transformer_lm/instructor/reference/{module.name}")
    (planted / "lectures" / "attention.py").write_text("import torch\n\n\n" + reference_definition("masked_softmax"))
    found = "\n".join(student_kit.leaks(planted))
    assert "lectures/notes.py: defines softmax_stable" in found
    assert "lectures/notes.py:5: a line of a solution" in found and "notes.py:4" not in found   # the comment is not
    assert "lectures/checks.txt: a hidden checks file" in found
    assert f"{wheel.name}!transformer_lm/instructor/reference/gpt.py: defines GPT" in found
    for module in modules:   # attention.py and __init__.py define no name a notebook asks for
        where = f"{wheel.name}!transformer_lm/instructor/reference/{module.name}"
        assert f"{where}: holds the reference's reference/{module.name}" in found
    assert "lectures/attention.py: holds the reference's masked_softmax\n" in found + "\n"
    with pytest.raises(GradingError, match="not empty"):
        student_kit.build(kit)


def test_the_kits_package_is_the_only_course_code_its_environment_sees(kit_runs, course_folder):
    work, out = kit_runs
    [kernel] = [json.loads(tools.text_outputs(cell)) for cell in tools.read(work / "probe.ipynb").cells]
    venv = str(course_folder / ".venv")
    for seen in (out, kernel):   # the runner's process, and the notebooks' kernel
        assert seen["package"].startswith(venv), seen["package"]
        assert seen["hidden"] == []
        assert not [p for p in seen["path"] if str(ROOT) in p or sysconfig.get_paths()["purelib"] in p], seen["path"]
    assert kernel["python"].startswith(venv)


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


def test_in_the_kit_every_stored_check_names_its_mistakes(kit_runs):
    _, out = kit_runs
    # A case that cannot tell two mistakes apart (the same values) names the first: either is right there.
    wrong = [found for found in out["names"] if found["status"] != "failed"
             or (found["named"] != found["given"] and not found["same_values"])]
    assert wrong == []
    named = {found["given"] for found in out["names"]}
    assert len(named) >= 33, sorted(named)   # 33 when the kit was first built


QUOTED = re.compile(r"`([^`\s]+)`|\]\(([^)\s]+)\)")
UNDER_A_FOLDER = re.compile(r"(?<![\w./-])((?:notebooks|lectures|assignments|release|source|autograder|wheels|"
                            r"jupyter-config)/[\w./-]*)")


def named_paths(nb) -> set[str]:
    """The paths a notebook names: a quoted name or a link of a notebook, and anything under a
    folder of the course's (the kit's, or the repository's, which students do not have). A file of
    another project that a notebook cites as a source (``models/llama/modeling_llama.py`` of
    transformers) is not one."""
    found = set()
    for cell in nb.cells:
        text = "".join(cell.source)
        for match in QUOTED.finditer(text):
            name = match.group(1) or match.group(2)
            if "://" in name or name.startswith(("#", "mailto:")):
                continue
            if Path(name).suffix == ".ipynb":
                found.add(name)
        found.update(match.rstrip(".") for match in UNDER_A_FOLDER.findall(text))
    return found


def test_every_path_a_notebook_names_is_in_the_kit(kit):
    """Relative to the kit's folder, or to the notebook's own; lectures are ``lectures/`` there, and
    ``autograder``, ``release`` and ``source`` are the instructor's."""
    notebooks = sorted(kit.glob("assignments/*/*.ipynb")) + sorted(kit.glob("lectures/*.ipynb"))
    missing = []
    for notebook in notebooks:
        for name in sorted(named_paths(tools.read(notebook))):
            if not ((kit / name).exists() or (notebook.parent / name).exists()):
                missing.append(f"{notebook.relative_to(kit)} names {name}")
    assert missing == []
    assert named_paths(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(
        "Lecture 3 (`notebooks/03_causal_masking.ipynb`); run autograder validate release/x.ipynb; "
        "`d_k/2`, `scores/sqrt(d)`, https://example.org/x.ipynb, [b](02_why_scaling.ipynb)")])) == {
        "notebooks/03_causal_masking.ipynb", "release/x.ipynb", "02_why_scaling.ipynb"}


ARTIFACTS = ROOT / "artifacts" / "browser"
NOTEBOOK_PATH = "assignments/01_attention_basics/attention_basics.ipynb"
FIRST_TODO = "TODO: softmax_stable is not written yet (it raises NotImplementedError)"
NAIVE_SOFTMAX = """def softmax_stable(x):
    exps = torch.exp(x)                            # (..., n)
    return exps / exps.sum(dim=-1, keepdim=True)   # (..., n) / (..., 1)
"""
OVERFLOW_NAMED = "an overflow. Row (0,) of x holds [1000, 1001, 1002]"
VALIDATE_SUCCESS = "Success! Your notebook passes all the tests."  # nbgrader 0.9's dialog


@pytest.fixture
def page():
    """A page of headless Chromium (:func:`browser_tools.chromium`); skipped, before anything
    starts, only where chromium cannot be installed."""
    with browser_tools.chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(browser_tools.UI_S * 1000)
        yield page


def write_answer(page, first_line: str, source: str) -> None:
    """Types ``source`` over the answer cell that starts with ``first_line``, then runs it and the
    test cell under it, as a student does with Shift+Enter."""
    cell = page.locator(".jp-Cell", has_text=first_line)
    cell.scroll_into_view_if_needed()
    cell.locator(".cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(source)
    page.keyboard.press("Shift+Enter")
    page.keyboard.press("Shift+Enter")


def test_a_student_walks_the_kit_in_jupyterlab(page, course_folder, tmp_path):
    """From the kit's own environment: JupyterLab shows no instructor tool; assignment 01 runs to
    its first check, which says what to write; a softmax without the max subtraction is refused,
    the overflow named; the fix passes; "Check with the grader" says, in a student's words, that
    no service is connected; the solved notebook passes nbgrader's Validate. Screenshots and the
    server's log go to ``artifacts/browser/`` (ignored by git, kept by CI)."""
    bin_dir = course_folder / ".venv" / "bin"
    (ARTIFACTS / "failure.png").unlink(missing_ok=True)  # an old run's failure would mislead
    with browser_tools.jupyter_lab(bin_dir, course_folder, tmp_path / "jupyter", ARTIFACTS / "jupyter-lab.log") \
            as (base, token):
        browser_tools.start_session(base, token, NOTEBOOK_PATH)
        try:
            walk(page, base, token, course_folder)
        except BaseException:
            for number, shown in enumerate(page.context.pages):
                shown.screenshot(path=ARTIFACTS / f"failure{'-' + str(number) if number else ''}.png")
            raise


def saved_with(path: Path, text: str, since: int) -> None:
    """Waits until a save of the notebook at ``path`` that JupyterLab made after the moment ``since``
    (the file's ``st_mtime_ns`` before it) is whole and holds ``text``: the tab is clean as soon as
    the save is sent, while the file may still be half written; and a tab that was clean already
    (the grader's check saves too) says nothing about the save just asked for."""
    deadline = time.monotonic() + browser_tools.UI_S
    while True:
        try:
            if path.stat().st_mtime_ns != since and any(
                    text in "".join(cell["source"]) for cell in json.loads(path.read_text())["cells"]):
                return
        except ValueError:
            pass
        assert time.monotonic() < deadline, f"{path} was not saved again with {text!r}"
        time.sleep(0.25)


def walk(page, base: str, token: str, folder: Path) -> None:
    page.goto(f"{base}/lab/tree/{NOTEBOOK_PATH}?token={token}")
    page.locator(".jp-NotebookPanel .jp-Cell").first.wait_for()
    browser_tools.wait_idle(page)

    # No instructor tool: nbgrader's menu lists only the assignment list, the right sidebar has no
    # "Create Assignment", the formgrader's pages are not served; Validate is in the toolbar.
    page.locator("#jp-MainMenu").get_by_role("menuitem", name="Nbgrader", exact=True).click()
    shown = [text for text in page.locator(".lm-Menu .lm-Menu-itemLabel").all_inner_texts() if text.strip()]
    page.keyboard.press("Escape")
    assert shown == ["Assignment List"], shown
    tabs = [tab.get_attribute("title") or "" for tab in page.locator(".jp-SideBar .lm-TabBar-tab").all()]
    assert tabs and not [title for title in tabs if "Create Assignment" in title], tabs
    with pytest.raises(urllib.error.HTTPError, match="404"):
        urllib.request.urlopen(f"{base}/formgrader?token={token}", timeout=30)
    assert page.locator(".jp-NotebookPanel-toolbar .validate-button").count() == 1

    # Run All stops at the first check, which says what to write.
    browser_tools.menu(page, "Run", "Run All Cells")
    todo = page.locator(".jp-OutputArea-output", has_text=FIRST_TODO)
    todo.wait_for(state="attached")
    browser_tools.wait_idle(page)
    todo.scroll_into_view_if_needed()
    page.screenshot(path=ARTIFACTS / "run_all.png")

    # A mistake, its message; the fix, and the check passes.
    write_answer(page, "def softmax_stable(x):", NAIVE_SOFTMAX)
    test_cell = page.locator(".jp-Cell", has_text='checks.check("softmax_stable", softmax_stable)')
    refused = test_cell.locator(".jp-OutputArea-output", has_text=OVERFLOW_NAMED)
    refused.wait_for()
    page.screenshot(path=ARTIFACTS / "mistake.png")
    solved = tools.read(ROOT / "source" / "01_attention_basics" / "attention_basics.ipynb")
    write_answer(page, "def softmax_stable(x):", tools.cell_by_grade_id(solved, "softmax_stable").source)
    test_cell.locator(".jp-OutputArea-output", has_text="Correct").wait_for()
    page.screenshot(path=ARTIFACTS / "fixed.png")

    # "Check with the grader" where the course runs no grading service.
    with page.context.expect_page() as opened:
        page.locator(".jp-NotebookPanel-toolbar").get_by_text("Check with the grader", exact=True).click()
    told = opened.value
    told.get_by_text("Checks are not set up here").wait_for()
    assert grader_check.NOT_CONNECTED in told.locator("body").inner_text().replace("\n", " ")
    told.close()

    # The answers all written (copied from the solution, the page loaded afresh), nbgrader's Validate
    # runs the notebook in a fresh kernel and reports success. Validate saves the page's notebook before
    # it runs it, so a stale page would fail: the page is reloaded whole, as a student reopening the
    # notebook, and shows an answer only the solution has before Validate is pressed. The save asked
    # for is awaited on disk: the grader's check had saved already, and the menu's save, still on its
    # way, once wrote the typed notebook over the solved one.
    before = (folder / NOTEBOOK_PATH).stat().st_mtime_ns
    browser_tools.menu(page, "File", "Save Notebook")
    page.locator(".lm-TabBar-tab.jp-mod-dirty").wait_for(state="detached")
    saved_with(folder / NOTEBOOK_PATH, "exps = torch.exp(shifted)", since=before)   # the fix, typed in
    release = ROOT / "release" / "01_attention_basics" / "attention_basics.ipynb"
    assert SOLVED_ONLY not in release.read_text()
    nbformat.write(tools.filled_in(release, solved), folder / NOTEBOOK_PATH)
    page.reload()
    page.locator(".jp-Cell", has_text=SOLVED_ONLY).wait_for(state="attached")
    browser_tools.wait_idle(page)
    page.locator(".jp-NotebookPanel-toolbar .validate-button").click()
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(timeout=120_000)   # nbgrader runs the whole notebook in a fresh kernel
    page.screenshot(path=ARTIFACTS / "validate.png")
    assert VALIDATE_SUCCESS in dialog.inner_text(), dialog.inner_text()
