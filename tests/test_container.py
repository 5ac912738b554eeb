"""The TA container, checked without a container engine: the Dockerfile passes hadolint and its
steps build an environment whose entry command grades the demo class. Its Kubernetes Jobs are
checked in test_k8s.py."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autograder import sandbox

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "autograder" / "Dockerfile"


def instructions(name: str) -> list[str]:
    """The arguments of every ``name`` instruction of the Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    return [line.split(None, 1)[1] for line in text.splitlines() if line.startswith(name + " ")]


def test_the_dockerfile_passes_hadolint():
    hadolint = Path(sys.executable).with_name("hadolint")
    done = subprocess.run([str(hadolint), str(DOCKERFILE)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_container_runs_as_a_user_and_enters_the_autograder():
    assert instructions("USER") == ["1000"]
    assert instructions("ENTRYPOINT") == ['["autograder"]']
    assert any("useradd" in run and "--uid 1000" in run for run in instructions("RUN"))


def test_the_entry_command_grades_in_an_environment_built_by_the_dockerfile_steps(tmp_path):
    """Its COPY steps and its pip install, done here in a fresh virtual environment; then the
    entry command runs the demo, the course's main job, as the container would."""
    if sandbox.detect_isolation().name != "bubblewrap":
        pytest.skip(f"the demo needs bubblewrap: {sandbox.detect_isolation().detail}")
    work = tmp_path / "opt" / "course"
    work.mkdir(parents=True)
    for copy in instructions("COPY"):
        *sources, dest = copy.split()
        for source in sources:
            target = work / dest / Path(source).name if dest.endswith("/") else work / dest
            if (REPO / source).is_dir():
                shutil.copytree(REPO / source, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(REPO / source, target)
    installs = [run for run in instructions("RUN") if "pip install" in run]
    assert installs == ["python -m pip install -r requirements.txt"]
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # The same files as the image's install, without compiling their bytecode (PIP_NO_COMPILE): a
    # minute sooner on this machine (about 70 s against 130 s), which keeps CI within its budget.
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "-r", "requirements.txt"],
                   cwd=work, check=True, env={**os.environ, "PIP_NO_COMPILE": "1"})
    entry = venv / "bin" / "autograder"
    done = subprocess.run([str(entry), "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "grade" in done.stdout
    env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "MPLBACKEND": "Agg"}
    done = subprocess.run([str(entry), "demo"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(r"ada_solution\s+10/10", done.stdout) and re.search(r"bo_blank\s+0/10", done.stdout)
