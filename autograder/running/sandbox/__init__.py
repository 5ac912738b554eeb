"""Run untrusted student code in a confined process.

The grader's trust boundary is a process boundary: student code runs here, in a fresh process that
cannot see the course folder, cannot reach the network, cannot outlive its run and cannot exhaust
the machine; trusted code elsewhere reads back only the files it left in its writable folders.

With bubblewrap (``bwrap``, Debian package ``bubblewrap``, 0.8 or newer) the process gets:

* a root filesystem of its own: the system directories, the grader's Python interpreter and
  virtual environment (read-only, copied so that they name nothing of the host, at fixed paths),
  the caller's ``readonly`` binds, and size-limited tmpfs folders: ``/tmp`` (also ``HOME``),
  ``/dev/shm`` and every ``writable`` destination. Nothing else of the host is visible.
* its own pid, network, IPC and UTS namespaces: no network at all, and when the run ends the pid
  namespace dies, so no background process or daemon survives it.
* uid 65534 (``nobody``) with no capabilities, and no way to create further user namespaces.
* resource limits (address space, processes, file size, no core dumps), a wall-clock limit and a
  bound on the output that the caller keeps.

Where bubblewrap is missing or the kernel forbids what it needs, :func:`detect_isolation` says so
and why; :func:`run_sandboxed` then runs the command as a plain subprocess with the same limits,
environment and wall-clock kill but without filesystem, network or user isolation. Whether that is
acceptable is the caller's decision.

The package, one concern a module:

* :mod:`~autograder.running.sandbox.confine`: what confines the process (bwrap's options, the trusted
  wrapper that drops root and sets the limits) and the :class:`Limits` and :class:`Isolation`
  that describe it;
* :mod:`~autograder.running.sandbox.environment`: the grader's environment and interpreter as the
  sandbox shows them;
* :mod:`~autograder.running.sandbox.detect`: :func:`detect_isolation`, whether bubblewrap works here;
* :mod:`~autograder.running.sandbox.process`: starting a confined process and making sure it is gone;
* :mod:`~autograder.running.sandbox.folders`: reading what the process left in its writable folders
  without following its symlinks;
* :mod:`~autograder.running.sandbox.run`: :func:`run_sandboxed`, one command from start to end;
* :mod:`~autograder.running.sandbox.session`: :class:`Session`, a sandbox kept warm for many requests.
"""

from autograder.running.sandbox.confine import SANDBOX_UID, Isolation, Limits
from autograder.running.sandbox.detect import detect_isolation
from autograder.running.sandbox.environment import VENV
from autograder.running.sandbox.run import SandboxResult, run_sandboxed
from autograder.running.sandbox.session import Reply, Session

__all__ = ["SANDBOX_UID", "VENV", "Isolation", "Limits", "Reply", "SandboxResult", "Session", "detect_isolation",
           "run_sandboxed"]
