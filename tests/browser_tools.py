"""Debian's headless Chromium, driven by Playwright, and the JupyterLab it visits, for the browser tests.

Playwright's own browser download needs a network that CI does not have, so the tests use
``/usr/bin/chromium``, which ``make test`` installs (``make browser-packages``). A test is skipped
only where chromium cannot be installed: it is missing and we are not root, or there is no apt-get.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

import notebook_tools

CHROMIUM = Path("/usr/bin/chromium")
INSTALL = "apt-get install -y chromium chromium-driver"


def chromium_or_skip() -> Path:
    """Chromium's path; a skip only where it cannot be installed, a failure where it could."""
    if CHROMIUM.exists():
        return CHROMIUM
    can_install = hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get")
    if not can_install:
        pytest.skip(f"{CHROMIUM} is missing and cannot be installed here (needs root and apt-get): "
                    f"run `sudo {INSTALL}` to enable the browser test")
    pytest.fail(f"{CHROMIUM} is missing although this machine could install it: run `make browser-packages` "
                f"(or `{INSTALL}`); `make test` does it by itself")


@contextlib.contextmanager
def chromium():
    """A headless Chromium browser. ``--no-sandbox`` because CI runs as root, where Chromium's
    own sandbox refuses to start; the pages it visits are all on loopback."""
    from playwright.sync_api import sync_playwright

    path = chromium_or_skip()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(path), headless=True,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                                          "--disable-background-networking", "--no-first-run"])
        try:
            yield browser
        finally:
            browser.close()


# JupyterLab on a shared 2-core machine: generous waits, each still far below CI's limit.
SERVER_START_S = 60
UI_S = 60


def isolated_jupyter(home: Path, bin_dir: Path) -> dict:
    """The environment of a JupyterLab whose user config, settings, workspaces and runtime files
    live in ``home``, so that neither this machine's settings nor other runs interfere, and whose
    ``PATH`` starts with ``bin_dir`` (the environment the server and its kernels come from), with
    nothing of the course's environment (:func:`notebook_tools.outside_the_course`). One
    setting differs from a student's: no news or update checks, because there is no network, and
    their toast would sit on the screenshots."""
    notification = home / "settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    notification.parent.mkdir(parents=True, exist_ok=True)
    notification.write_text('{"fetchNews": "false", "checkForUpdates": false}')
    environ = notebook_tools.outside_the_course()
    return {**environ,
            "PATH": str(bin_dir) + os.pathsep + environ["PATH"],
            "JUPYTER_CONFIG_DIR": str(home / "config"),
            "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
            "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
            "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
            "IPYTHONDIR": str(home / "ipython")}


@contextlib.contextmanager
def jupyter_lab(bin_dir: Path, root: Path, home: Path, log_path: Path):
    """A JupyterLab server of the environment ``bin_dir`` on a free port, started in ``root`` as a
    student starts ``jupyter lab`` in their course folder; always stopped. Yields (base URL, token)."""
    import hub_tools

    port, token = hub_tools.free_port(), secrets.token_hex(16)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("w") as log:
        server = subprocess.Popen(
            [str(bin_dir / "jupyter"), "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
             f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}", "--allow-root"],
            cwd=root, env=isolated_jupyter(home, bin_dir), stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + SERVER_START_S
            while True:
                try:
                    with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2):
                        break
                except OSError:
                    if server.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError("JupyterLab did not start:\n" + log_path.read_text())
                    time.sleep(0.25)
            yield base, token
        finally:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def start_session(base: str, token: str, path: str) -> None:
    """Starts the kernel of the notebook at ``path`` through Jupyter's REST API, before the page
    opens it.

    JupyterLab then finds the notebook's session and joins it, as when a student reopens a
    notebook. Left to start the kernel itself, JupyterLab failed now and then on this busy
    machine: while a kernel starts, Jupyter Server answers 500 to the kernel list
    (``last_activity`` is still None), JupyterLab then asks which kernel to use, and the chosen
    one replaces the first, dropping the cells queued by Run All.
    """
    body = json.dumps({"path": path, "name": Path(path).name, "type": "notebook",
                       "kernel": {"name": "python3"}}).encode()
    request = urllib.request.Request(f"{base}/api/sessions", data=body, method="POST",
                                     headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=SERVER_START_S) as response:
        assert response.status == 201, response.read()


def menu(page, name: str, item: str) -> None:
    """Clicks ``item`` in JupyterLab's menu ``name``, as a student would."""
    page.locator("#jp-MainMenu").get_by_role("menuitem", name=name, exact=True).click()
    page.locator(".lm-Menu .lm-Menu-itemLabel").get_by_text(item, exact=True).click()  # the name without its shortcut


def wait_idle(page) -> None:
    """Waits until the notebook's kernel is connected and idle, as the status bar says. (The
    toolbar's execution indicator can say idle before the page has its kernel; Run All then asks
    for a kernel and drops the cells.)"""
    page.locator(".jp-StatusBar-Widget").get_by_text("Python 3 (ipykernel) | Idle", exact=True).wait_for()
