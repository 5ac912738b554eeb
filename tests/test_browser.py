"""The student's side, in a real browser.

JupyterLab starts from a temporary copy of the course, with the nbgrader extensions that
students get from requirements.txt, and Playwright drives Debian's headless Chromium
(``/usr/bin/chromium``; Playwright's own browser download needs a network that CI does not
have). The test does what a student does with assignment 01: opens the release, runs all
cells and reads the first check's TODO message, then fills in the answers and presses
nbgrader's Validate button, which must report success.

Artefacts go to ``artifacts/browser/`` (ignored by git, kept by CI): screenshots ``run_all.png``
of the TODO message, ``validate.png`` of the success dialog and ``failure.png`` of the page
whenever the test fails, and the server's log ``jupyter-lab.log``.

``make test`` installs chromium first (``make browser-packages``). The test is skipped only
where chromium cannot be installed: it is missing and we are not root, or there is no apt-get.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

import browser_tools
import hub_tools
import notebook_tools as tools

ARTIFACTS = tools.REPO_ROOT / "artifacts" / "browser"
ASSIGNMENT = "01_attention_basics"
NOTEBOOK = "attention_basics.ipynb"
NOTEBOOK_PATH = f"release/{ASSIGNMENT}/{NOTEBOOK}"  # where the student finds it, relative to the course

# The first visible test (softmax_stable_test) calls softmax_stable, which still raises
# NotImplementedError in the release; transformer_lm.checks.call_student turns that into this.
FIRST_TODO = "TODO: softmax_stable is not written yet (it raises NotImplementedError)"
VALIDATE_SUCCESS = "Success! Your notebook passes all the tests."  # nbgrader 0.9's dialog

# JupyterLab on a shared 2-core machine: generous waits, each still far below CI's limit.
SERVER_START_S = 60
UI_S = 60


def _start_session(base: str, token: str) -> None:
    """Starts the notebook's kernel through Jupyter's REST API, before the page opens it.

    JupyterLab then finds the notebook's session and joins it, as when a student reopens a
    notebook. Left to start the kernel itself, JupyterLab failed now and then on this busy
    machine: while a kernel starts, Jupyter Server answers 500 to the kernel list
    (``last_activity`` is still None), JupyterLab then asks which kernel to use, and the chosen
    one replaces the first, dropping the cells queued by Run All.
    """
    body = json.dumps({"path": NOTEBOOK_PATH, "name": NOTEBOOK, "type": "notebook",
                       "kernel": {"name": "python3"}}).encode()
    request = urllib.request.Request(f"{base}/api/sessions", data=body, method="POST",
                                     headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=SERVER_START_S) as response:
        assert response.status == 201, response.read()


@pytest.fixture
def lab(tmp_path):
    """A JupyterLab server on a free port, serving a copy of the course's release of assignment 01.

    The copy holds the course's nbgrader_config.py, and the server runs from there, as when a
    student starts ``jupyter lab`` in the course folder (nbgrader's Validate reads the config of
    the server's working directory). Jupyter's config, settings, workspaces and runtime files go
    to the temporary folder, so that neither this machine's settings nor other runs interfere.
    The notebook's kernel is started before the test opens it (see :func:`_start_session`).
    The server is always stopped; its log is kept with the screenshots. Yields (base URL,
    token, course folder).
    """
    course = tmp_path / "course"
    (course / "release" / ASSIGNMENT).mkdir(parents=True)
    shutil.copy2(tools.REPO_ROOT / NOTEBOOK_PATH, course / NOTEBOOK_PATH)
    shutil.copy2(tools.REPO_ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
    home = tmp_path / "jupyter"
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ,
           "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
           "JUPYTER_CONFIG_DIR": str(home / "config"),
           "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
           "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
           "IPYTHONDIR": str(home / "ipython")}
    # One setting differs from a student's: no news or update checks, because there is no
    # network, and their toast would sit on the screenshots.
    notification = home / "settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    notification.parent.mkdir(parents=True)
    notification.write_text('{"fetchNews": "false", "checkForUpdates": false}')
    port, token = hub_tools.free_port(), secrets.token_hex(16)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    log = (ARTIFACTS / "jupyter-lab.log").open("w")
    server = subprocess.Popen(
        [str(Path(bin_dir) / "jupyter"), "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={course}", "--allow-root"],
        cwd=course, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("JupyterLab did not start:\n" + (ARTIFACTS / "jupyter-lab.log").read_text())
                time.sleep(0.25)
        _start_session(base, token)
        yield base, token, course
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


@pytest.fixture
def page():
    """A page of headless Chromium (:func:`browser_tools.chromium`)."""
    with browser_tools.chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(UI_S * 1000)
        yield page


def _menu(page, menu: str, item: str) -> None:
    """Clicks ``item`` in JupyterLab's menu ``menu``, as a student would."""
    page.locator("#jp-MainMenu").get_by_role("menuitem", name=menu, exact=True).click()
    page.locator(".lm-Menu .lm-Menu-itemLabel").get_by_text(item, exact=True).click()  # the name without its shortcut


def _wait_idle(page) -> None:
    """Waits until the notebook's kernel is connected and idle, as the status bar says. (The
    toolbar's execution indicator can say idle before the page has its kernel; Run All then asks
    for a kernel and drops the cells.)"""
    page.locator(".jp-StatusBar-Widget").get_by_text("Python 3 (ipykernel) | Idle", exact=True).wait_for()


def test_student_runs_the_release_then_validates_the_solution(page, lab):
    """``page`` comes first: where chromium cannot be installed, the test is skipped before
    JupyterLab starts."""
    base, token, course = lab
    (ARTIFACTS / "failure.png").unlink(missing_ok=True)  # an old run's failure would mislead
    try:
        # 1. The release of assignment 01, opened in JupyterLab.
        page.goto(f"{base}/lab/tree/{NOTEBOOK_PATH}?token={token}")
        page.locator(".jp-NotebookPanel .jp-Cell").first.wait_for()
        _wait_idle(page)

        # 2. Run all cells: the run stops at the first visible test, which says what to do.
        #    JupyterLab then shows the last cell, and renders cells out of view late (windowing),
        #    so the message is waited for in the page, then scrolled to, as a student scrolls
        #    back up to read it.
        _menu(page, "Run", "Run All Cells")
        todo = page.locator(".jp-OutputArea-output", has_text=FIRST_TODO)
        todo.wait_for(state="attached")
        _wait_idle(page)
        todo.scroll_into_view_if_needed()
        todo.wait_for(state="visible")
        page.screenshot(path=ARTIFACTS / "run_all.png")

        # 3. The answers written (here: copied from the solution, then the notebook reloaded
        #    from disk), nbgrader's Validate runs the notebook afresh and reports success.
        #    Saved first, so that reloading asks nothing; the solved notebook has no outputs, so
        #    the TODO message goes away once the reload is done. Validate saves the notebook
        #    before it runs it: a stale page would overwrite the answers and fail.
        _menu(page, "File", "Save Notebook")
        page.locator(".lm-TabBar-tab.jp-mod-dirty").wait_for(state="detached")
        nbformat.write(tools.filled_in(tools.REPO_ROOT / NOTEBOOK_PATH, tools.REPO_ROOT / "source" / ASSIGNMENT / NOTEBOOK),
                       course / NOTEBOOK_PATH)
        _menu(page, "File", "Reload Notebook from Disk")
        page.locator(".jp-OutputArea-output", has_text=FIRST_TODO).wait_for(state="detached")
        page.locator(".jp-NotebookPanel-toolbar .validate-button").click()
        # nbgrader runs the whole notebook in a fresh kernel: give it the time the course allows
        # a cell. Its answer is a dialog: success, or the cells that failed.
        dialog = page.locator(".jp-Dialog")
        dialog.wait_for(timeout=120_000)
        page.screenshot(path=ARTIFACTS / "validate.png")
        assert VALIDATE_SUCCESS in dialog.inner_text(), dialog.inner_text()
    except BaseException:
        page.screenshot(path=ARTIFACTS / "failure.png")
        raise
