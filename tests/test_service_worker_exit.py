"""A service worker stopped by the service (SIGTERM) removes its sandbox's folders from ``/tmp``:
they hold the hidden inputs of its last run. Killed by default, it left them there."""

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

WORKER = textwrap.dedent("""
    import sys, time
    from autograder.running import runner, sandbox
    from autograder.service import worker
    if sys.argv[1] == "as the service's worker":
        worker.exit_on_terminate()
    with runner.Worker(runner.RunSettings(), sandbox.detect_isolation()) as kept:
        print(kept.root, flush=True)
        time.sleep(60)
""")


def stopped_worker_folder(tmp_path: Path, how: str) -> tuple[Path, int]:
    """The folder a worker made in ``tmp_path`` (its TMPDIR), and its exit status, once SIGTERM stopped it."""
    process = subprocess.Popen([sys.executable, "-c", WORKER, how], stdout=subprocess.PIPE, text=True,
                               env={"TMPDIR": str(tmp_path), "PATH": "/usr/bin:/bin"}, cwd=Path(__file__).parent.parent)
    folder = Path(process.stdout.readline().strip())
    assert folder.parent == tmp_path and folder.is_dir()
    process.send_signal(signal.SIGTERM)
    return folder, process.wait(timeout=30)


def test_a_worker_stopped_by_the_service_removes_its_folders(tmp_path):
    folder, status = stopped_worker_folder(tmp_path, "as the service's worker")
    assert status == 0 and not folder.exists()


def test_without_it_a_terminated_process_leaves_them(tmp_path):
    """What the test above rests on: SIGTERM's default leaves the folder."""
    folder, status = stopped_worker_folder(tmp_path, "plain")
    assert status == -signal.SIGTERM and folder.exists()
