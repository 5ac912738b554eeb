"""The TA's image built with podman and run, as docs/containers.md, "With podman, as root", says: the
page's own bash blocks, read from the page and run as written (:func:`page_blocks`), build it
(``autograder/make-base-image.sh``, debootstrap then ``podman import``, since no image registry is
reachable here; then ``autograder/build-image.sh``, which gives the build this machine's pip
settings) and grade with it. A test run builds the image once, in a process of its own started when
the tests are collected (:func:`start_build`), and the container tests wait for it (:func:`built_image`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "containers.md"
PODMAN_SECTION = "### With podman, as root"
IMAGE = "localhost/self-attention-grader:latest"
"""What the page's build block tags (``self-attention-grader``), as podman names it."""
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
    if os.geteuid() != 0:
        return "the container test runs podman as root, as docs/containers.md's podman commands do"
    done = subprocess.run(["podman", "info"], capture_output=True, text=True)
    if done.returncode != 0:
        return f"podman cannot run here: {(done.stderr or done.stdout).strip()[-500:]}"
    return None


def page_blocks() -> list[str]:
    """The bash blocks of the page's podman section, in order: the build's (run from the repository
    root), then the grading's (run in a course folder)."""
    text = PAGE.read_text()
    section = re.split(r"^#{2,3} ", text.split(PODMAN_SECTION, 1)[1], flags=re.MULTILINE)[0]
    blocks = re.findall(r"^```bash\n(.*?)^```$", section, flags=re.MULTILINE | re.DOTALL)
    assert len(blocks) == 2, f"{PAGE.name}'s section {PODMAN_SECTION!r} has {len(blocks)} bash blocks, not 2"
    return blocks


def run_block(block: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """A block of the page, run by bash as a TA would paste it, stopping at the first command that fails."""
    return subprocess.run(["bash", "-e", "-c", block], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def build_image() -> str:
    """Builds the image with the page's build block (about 3 minutes here, seconds where podman's
    layers hold it already) and returns its name."""
    done = run_block(page_blocks()[0], REPO, timeout=1500)
    if done.returncode != 0:
        raise AssertionError(f"The page's build block failed ({done.returncode}):\n"
                             f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return IMAGE


def run(image: str, course: Path | None, *command: str, sandbox: bool = True,
        user: str | None = None) -> subprocess.CompletedProcess:
    """The image's entry command, with no network, on a course folder mounted at /course and named
    as the host names it (``None``: nothing mounted), as ``user`` (default: the image's, uid 1000)."""
    mount = ["--volume", f"{course}:/course", "--env", f"AUTOGRADER_COURSE_ON_HOST={course}"] if course else []
    return podman("run", "--rm", "--network", "none", *LIMITS, *(SANDBOX_OPTIONS if sandbox else []),
                  *(["--user", user] if user else []), *mount, image, *command, check=False)


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
        outcome = {"image": build_image(), "error": ""}
    except BaseException as error:  # noqa: BLE001 - the waiting test reports it
        outcome = {"image": "", "error": str(error)}
    draft = folder / (BUILD_RESULT + ".part")
    draft.write_text(json.dumps(outcome))
    draft.rename(folder / BUILD_RESULT)


if __name__ == "__main__" and sys.argv[1:2] == ["build"]:
    _build_into(Path(sys.argv[2]))
