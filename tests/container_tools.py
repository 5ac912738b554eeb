"""The TA's image built with podman and run, as docs/containers.md, "Grading in a container", says.

Where podman cannot pull the official Python image (no registry reachable), the base is made
here by ``autograder/make-base-image.sh`` (debootstrap, then ``podman import``) and passed to
the Dockerfile as ``BASE_IMAGE``. The build sees this machine's pip configuration (its index, its
local wheels and its CA certificates), mounted read-only, as pip here does; none of it is kept in
the image. A test run builds the image once, in a process of its own started when the tests are
collected (:func:`start_build`), and the container test waits for it (:func:`built_image`).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
IMAGE = "localhost/self-attention-grader:test"
OFFICIAL_BASE = "python:3.11-slim-bookworm"
MADE_BASE = "localhost/course-base:bookworm"
# podman as root asks the runtime for limits above what some hosts allow ("error setting rlimit");
# these are ample for grading.
LIMITS = ["--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"]
# What lets bubblewrap build a sandbox inside the container (podman's names for the
# docker options of docs/containers.md: unmask=ALL is docker's systempaths=unconfined).
SANDBOX_OPTIONS = ["--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
                   "--security-opt", "unmask=ALL"]


def podman(*args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
    # crun fails on some hosts' cgroups; runc, where installed, works on all we have seen.
    runtime = ["--runtime", "runc"] if shutil.which("runc") and args[0] in ("build", "run") else []
    done = subprocess.run(["podman", args[0], *runtime, *args[1:]], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args[:2])} failed ({done.returncode}):\n"
                             f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def podman_problem() -> str | None:
    """Why this machine cannot run podman at all, or None."""
    if not shutil.which("podman"):
        return "podman is not installed (sudo apt-get install podman runc debootstrap, or make container-packages)"
    done = subprocess.run(["podman", "info"], capture_output=True, text=True)
    if done.returncode != 0:
        return f"podman cannot run here: {(done.stderr or done.stdout).strip()[-500:]}"
    return None


def base_image() -> str:
    """The official base if podman has it or can pull it, else one made with debootstrap."""
    for image in (OFFICIAL_BASE, MADE_BASE):
        if podman("image", "exists", image, check=False).returncode == 0:
            return image
    if podman("pull", "--quiet", OFFICIAL_BASE, check=False, timeout=300).returncode == 0:
        return OFFICIAL_BASE
    done = subprocess.run([str(REPO / "autograder" / "make-base-image.sh"), MADE_BASE], capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, f"No registry, and no base could be made:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
    return MADE_BASE


def pip_settings(scratch: Path) -> list[str]:
    """Mounts that give the build this machine's pip configuration: its settings as one pip.conf
    (from ``pip config list``, files and environment together) and the local paths it names."""
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                            check=True).stdout
    settings = dict(re.findall(r"^[^.\n]*\.([\w-]+)='(.*)'$", listed, flags=re.MULTILINE))
    if not settings:
        return []
    conf = scratch / "pip.conf"
    conf.write_text("[global]\n" + "".join(f"{key} = {value}\n" for key, value in settings.items()))
    mounts = ["--volume", f"{conf}:/etc/pip.conf:ro"]
    for value in settings.values():
        for word in value.split():
            # A local index (file://.../simple) links to files beside it: its parent goes along.
            path = Path(word.removeprefix("file://")).parent if word.startswith("file://") else Path(word)
            if path.is_absolute() and path.exists():
                mounts += ["--volume", f"{path}:{path}:ro"]
    return mounts


def build_image(scratch: Path) -> str:
    """Builds the image from autograder/Dockerfile (about 3 minutes here) and returns its name.
    The last run's image goes first, so that runs do not pile up images of 1.2 GB."""
    podman("rmi", "--force", IMAGE, check=False)
    podman("build", *LIMITS, *pip_settings(scratch), "--build-arg", f"BASE_IMAGE={base_image()}",
           "--file", str(REPO / "autograder" / "Dockerfile"), "--tag", IMAGE, str(REPO), timeout=1500)
    return IMAGE


def run(image: str, course: Path, *command: str, sandbox: bool = True) -> subprocess.CompletedProcess:
    """The image's entry command on a course folder mounted at /course, with no network."""
    return podman("run", "--rm", "--network", "none", *LIMITS, *(SANDBOX_OPTIONS if sandbox else []),
                  "--volume", f"{course}:/course", image, *command, check=False)


def image_bytes(image: str) -> int:
    return int(podman("image", "inspect", "--format", "{{.Size}}", image).stdout)


# --------------------------------------------------------------------------------------
# One build per test run, started in the background as soon as the tests are collected
# --------------------------------------------------------------------------------------

BUILD_RESULT = "result.json"


def start_build(folder: Path) -> bool:
    """Starts building the image in a process of its own, once per test run (``folder`` is the
    run's: the first worker to ask makes it and starts the build; others find it made). Much of
    a build waits on the network and the disk, so the tests go on meanwhile. False where podman
    cannot run (the container test then skips)."""
    if podman_problem():
        return False
    try:
        folder.mkdir(parents=True)
    except FileExistsError:
        return True
    with open(folder / "build.log", "wb") as log:  # the build holds its own copy
        build = subprocess.Popen([sys.executable, __file__, "build", str(folder)], stdout=log,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    (folder / "pid").write_text(str(build.pid))
    return True


def running(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, ended but not yet waited for, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def built_image(folder: Path, timeout: float = 1500) -> str:
    """The image that :func:`start_build` is making in ``folder``, once it is made; an error with
    the end of the build's log if the build ended without saying how it went."""
    result, deadline = folder / BUILD_RESULT, time.monotonic() + timeout
    while not result.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"The image was not built in {timeout:.0f} s; its log: {folder / 'build.log'}")
        pid = folder / "pid"
        if pid.exists() and not running(int(pid.read_text())) and not result.exists():
            log = (folder / "build.log").read_text(errors="replace")[-3000:]
            raise AssertionError(f"The image build ended without a result; the end of its log:\n{log}")
        time.sleep(2)
    outcome = json.loads(result.read_text())
    if outcome["error"]:
        raise AssertionError(outcome["error"])
    return outcome["image"]


def _build_into(folder: Path) -> None:
    """What the background process runs: the build, then its outcome in ``folder``."""
    try:
        outcome = {"image": build_image(folder), "error": ""}
    except BaseException as error:  # noqa: BLE001 - the waiting test reports it
        outcome = {"image": "", "error": str(error)}
    draft = folder / (BUILD_RESULT + ".part")
    draft.write_text(json.dumps(outcome))
    draft.rename(folder / BUILD_RESULT)


if __name__ == "__main__" and sys.argv[1:2] == ["build"]:
    _build_into(Path(sys.argv[2]))
