"""A real JupyterHub for the grading service's tests, on loopback ports, stopped after use.

The Hub runs with configurable-http-proxy from npm (``make hub-packages``), the dummy
authenticator (any password), the simple local spawner (each user's JupyterLab server a process
of this machine, at home folders under the test's folder) and the grading service configured by
the lines docs/service.md gives (``docs/jupyterhub_config.py``, with the course's paths put in). Six
students on the course's roster (``mallory`` sends what a hostile student would), an admin, and a
Hub user off the roster (``oscar``). A test service ``tester`` holds a token that may create users'
tokens.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

import notebook_tools as tools
from autograder.commands import demo
from autograder.reading.course import Course
from autograder.recording.record import gradebook

PROXY = tools.REPO_ROOT / ".venv" / "node" / "node_modules" / ".bin" / "configurable-http-proxy"
HUB_CONFIG = tools.REPO_ROOT / "docs" / "jupyterhub_config.py"
STUDENTS, ADMIN, OUTSIDER = ("alice", "bob", "carol", "dan", "erin", "mallory"), "teacher", "oscar"
USERS = (*STUDENTS, ADMIN, OUTSIDER)
START_S = 90


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_course(root: Path, assignment: str, check_settings: str) -> Path:
    """A course folder of ``assignment`` whose config ends with ``check_settings`` (lines of
    ``c.CheckService``), with the students on its roster (nbgrader's gradebook)."""
    root.mkdir(parents=True, exist_ok=True)
    demo.make_course(root, assignment, generate=False)
    with (root / "nbgrader_config.py").open("a") as config:
        config.write("\n" + check_settings + "\n")
    with gradebook(Course(root)) as book:
        for student in STUDENTS:
            book.update_or_create_student(student)
    return root


def hub_config(course: Path, service_port: int) -> str:
    """The lines docs/service.md gives of jupyterhub_config.py for ``course``."""
    text = HUB_CONFIG.read_text()
    autograder = Path(sys.executable).parent / "autograder"
    for name, value in (("COURSE", repr(str(course))), ("AUTOGRADER", repr(str(autograder))),
                        ("SERVICE_PORT", str(service_port))):
        text, count = re.subn(rf"^{name} = .*$", f"{name} = {value}", text, count=1, flags=re.M)
        assert count == 1, f"{HUB_CONFIG} no longer sets {name}"
    return text


@dataclass
class Hub:
    url: str  # the public address, through the proxy
    folder: Path
    course: Path
    tester_token: str
    process: subprocess.Popen
    log: Path
    service_port: int  # the service's own port, which students' servers reach without the proxy

    @property
    def service(self) -> str:
        return f"{self.url}/services/autograder/"

    def api(self, method: str, path: str, body: dict | None = None) -> dict:
        request = urllib.request.Request(f"{self.url}/hub/api/{path}", method=method,
                                         data=None if body is None else json.dumps(body).encode(),
                                         headers={"Authorization": f"token {self.tester_token}"})
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read() or b"{}")

    def token_for(self, user: str) -> str:
        """A token of ``user`` that may use the grading service, as their JupyterLab server holds."""
        return self.api("POST", f"users/{user}/tokens", {"scopes": ["access:services!service=autograder"],
                                                          "note": "test"})["token"]

    def home(self, user: str) -> Path:
        return self.folder / "homes" / user

    def service_pid(self) -> int:
        """The process id of ``autograder serve`` (a child of the Hub)."""
        out = subprocess.run(["pgrep", "-P", str(self.process.pid), "-f", "autograder serve"], capture_output=True,
                             text=True).stdout.split()
        assert out, "the grading service is not running"
        return int(out[0])


def wait_for(url: str, seconds: float, process: subprocess.Popen, log: Path, ok=(200,)) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status in ok:
                    return
        except urllib.error.HTTPError as error:
            if error.code in ok:
                return
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not answer in {seconds} s; the Hub's log:\n" + log.read_text()[-8000:])
        time.sleep(0.25)


def start_hub(folder: Path, course: Path) -> Hub:
    """Starts JupyterHub in ``folder`` with the grading service of ``course``; returns once the
    service answers through the proxy."""
    if not PROXY.exists():
        if shutil.which("npm"):
            pytest.fail(f"{PROXY} is missing: run `make hub-packages` (make test does it)")
        pytest.skip("npm is missing, so JupyterHub's proxy is too: run `sudo apt-get install nodejs npm`, then "
                    "`make hub-packages`")
    folder.mkdir(parents=True, exist_ok=True)
    port, service_port, tester_token = free_port(), free_port(), secrets.token_hex(32)
    bin_dir = Path(sys.executable).parent
    jupyter = folder / "jupyter"
    settings = jupyter / "settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text('{"fetchNews": "false", "checkForUpdates": false}')  # no network: no news toast
    tracker = jupyter / "settings" / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    tracker.parent.mkdir(parents=True, exist_ok=True)
    tracker.write_text('{"windowingMode": "none"}')  # every cell in the page, where the test can find it
    for user in USERS:
        (folder / "homes" / user).mkdir(parents=True, exist_ok=True)
    test_lines = f"""
# The test's own lines: loopback ports, dummy logins, local processes, a token for the test.
c.JupyterHub.bind_url = "http://127.0.0.1:{port}"
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{free_port()}"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{free_port()}"
c.ConfigurableHTTPProxy.command = [{str(PROXY)!r}]
c.JupyterHub.db_url = "sqlite:///{folder / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = {str(folder / 'cookie_secret')!r}
c.JupyterHub.pid_file = {str(folder / 'jupyterhub.pid')!r}
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allowed_users = {set(STUDENTS) | {OUTSIDER}!r}
c.Authenticator.admin_users = {{{ADMIN!r}}}
c.JupyterHub.spawner_class = "simple"
c.SimpleLocalProcessSpawner.home_dir_template = {str(folder / 'homes' / '{username}')!r}
c.Spawner.cmd = [{str(bin_dir / 'jupyterhub-singleuser')!r}]
c.Spawner.args = ["--allow-root"]
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120
c.Spawner.environment.update({{"PATH": {str(bin_dir) + os.pathsep + os.environ.get("PATH", "")!r},
                              "JUPYTERLAB_SETTINGS_DIR": {str(jupyter / 'settings')!r},
                              "JUPYTERLAB_WORKSPACES_DIR": {str(jupyter / 'workspaces')!r}}})
c.JupyterHub.services.append({{"name": "tester", "api_token": {tester_token!r}}})
c.JupyterHub.load_roles.append({{"name": "tester", "services": ["tester"],
                                "scopes": ["admin:users", "tokens", "admin:servers", "list:users"]}})
"""
    config = folder / "jupyterhub_config.py"
    config.write_text(hub_config(course, service_port) + test_lines)
    log = folder / "jupyterhub.log"
    env = {**os.environ, "PATH": str(bin_dir) + os.pathsep + os.environ.get("PATH", "")}
    with log.open("w") as out:
        process = subprocess.Popen([str(bin_dir / "jupyterhub"), "-f", str(config)], cwd=folder, env=env,
                                   stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    hub = Hub(f"http://127.0.0.1:{port}", folder, course, tester_token, process, log, service_port)
    try:
        wait_for(f"{hub.url}/hub/health", START_S, process, log)
        wait_for(hub.service, START_S, process, log, ok=(200, 302))
    except BaseException:
        stop_hub(hub)
        raise
    return hub


def stop_hub(hub: Hub) -> None:
    """Stops the Hub and everything it started (proxy, service, workers, users' servers)."""
    for user in USERS:
        try:
            hub.api("DELETE", f"users/{user}/server")
        except OSError:
            pass
    hub.process.terminate()
    try:
        hub.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(hub.process.pid, 9)  # whatever is left of its session
    except ProcessLookupError:
        pass
    hub.process.wait()
