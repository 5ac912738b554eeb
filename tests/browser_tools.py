"""Debian's headless Chromium, driven by Playwright, for the browser tests.

Playwright's own browser download needs a network that CI does not have, so the tests use
``/usr/bin/chromium``, which ``make test`` installs (``make browser-packages``). A test is skipped
only where chromium cannot be installed: it is missing and we are not root, or there is no apt-get.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import pytest

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
