"""Whether bubblewrap can sandbox code on this machine: :func:`detect_isolation`."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess

from autograder.reading.course_folder import in_container
from autograder.running.sandbox.confine import SANDBOX_UID, Isolation, Limits, sandbox_python
from autograder.running.sandbox.run import run_sandboxed


@functools.cache
def detect_isolation() -> Isolation:
    """Find out, once per process, whether bubblewrap can sandbox code here.

    It runs a real sandbox (the same namespaces, mounts and privilege drop as every run), because a
    ``bwrap`` on the PATH says nothing about whether the kernel lets it create namespaces.
    """
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return Isolation("none", "bubblewrap is not installed, so student code runs unconfined; "
                                 "install it with `apt-get install bubblewrap`")
    probe = run_sandboxed([sandbox_python(), "-I", "-S", "-c", "pass"], readonly={}, writable={},
                          limits=Limits(wall_seconds=30), env={}, cwd="/",
                          isolation=Isolation("bubblewrap", "probe"))
    if probe.returncode != 0:
        lines = probe.output.strip().splitlines() or [f"exit status {probe.returncode}"]
        return Isolation("none", refusal(lines[-1]))
    version = subprocess.run([bwrap, "--version"], capture_output=True, text=True).stdout.strip()
    return Isolation("bubblewrap", f"{version}: uid {SANDBOX_UID} without capabilities, "
                                   "no network, own pid namespace, only the interpreter and bound "
                                   "folders visible, size-limited tmpfs for writing")


def refusal(said: str) -> str:
    """Why bubblewrap cannot sandbox here (``said`` is its last line) and what to do: in a container,
    run it as a user without privileges and with the security options of docs/containers.md."""
    if in_container() and os.geteuid() == 0:
        return (f"bubblewrap cannot create a sandbox as root in a container ({said}); run the container as the "
                "course folder's owner, a user other than root, with --user \"$(stat -c %u:%g /path/to/course)\" "
                "as docs/containers.md shows")
    if in_container():
        return (f"bubblewrap cannot create a sandbox in this container ({said}); run the container with the "
                "security options of docs/containers.md: --security-opt seccomp=unconfined, --security-opt "
                "apparmor=unconfined and --security-opt unmask=ALL (podman) or systempaths=unconfined (docker)")
    return (f"bubblewrap cannot create a sandbox here ({said}); it needs version 0.8 or newer and user "
            "namespaces (check sysctl user.max_user_namespaces, kernel.unprivileged_userns_clone and "
            "kernel.apparmor_restrict_unprivileged_userns, or the container's seccomp profile)")
