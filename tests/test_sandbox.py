"""The sandbox confines real student-like code: every test runs a Python snippet in a real sandbox.

Tests that need bubblewrap are skipped, with detect_isolation()'s reason, only where it is
unavailable; the plain-subprocess fallback is tested everywhere.
"""

import json
import os
import signal
import socket
import sys
import textwrap
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from autograder.running import sandbox
from autograder.running.sandbox import Isolation, Limits, detect_isolation, run_sandboxed

REPO = Path(__file__).resolve().parents[1]
ISOLATION = detect_isolation()
NONE = Isolation("none", "plain subprocess, for the fallback's tests")
needs_bwrap = pytest.mark.skipif(ISOLATION.name != "bubblewrap", reason=ISOLATION.detail)
BOTH = [pytest.param(ISOLATION, marks=needs_bwrap, id="bubblewrap"), pytest.param(NONE, id="none")]


def run(code, *, isolation=ISOLATION, limits=Limits(), readonly=None, writable=None, env=None,
        cwd="/tmp", watch=None):
    return run_sandboxed(["python", "-c", textwrap.dedent(code)], readonly=readonly or {},
                         writable=writable or {}, limits=limits, env=env or {}, cwd=cwd,
                         isolation=isolation, watch=watch)


def readable_dir(path):
    """A folder uid 65534 can read (pytest's tmp_path is private to its owner)."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o755)
    return path


def test_detect_isolation_explains_itself():
    assert ISOLATION.name in ("bubblewrap", "none")
    assert ISOLATION.detail
    if ISOLATION.name == "none":
        assert "bubblewrap" in ISOLATION.detail


@needs_bwrap
def test_torch_imports_and_computes():
    result = run("""
        import torch
        x = torch.arange(6.0).reshape(2, 3).requires_grad_()
        y = torch.softmax(x @ x.T, dim=-1).sum()
        y.backward()
        print("ok", x.grad.shape)
    """)
    assert result.returncode == 0, result.output
    assert "ok torch.Size([2, 3])" in result.output


@needs_bwrap
def test_course_folder_and_root_are_invisible():
    hidden = [str(Path(__file__).resolve()), str(REPO / "autograder" / "checks"),
              str(REPO / "source"), str(REPO / "gradebook.db"), str(REPO / ".git"),
              str(REPO.parent / "shared")]
    result = run(f"""
        import json, os
        def listing(path):
            return sorted(os.listdir(path)) if os.path.isdir(path) else []
        print(json.dumps({{"seen": [path for path in {hidden!r} if os.path.exists(path)],
                          "repo": listing({str(REPO)!r}), "root": listing("/root")}}))
    """)
    assert result.returncode == 0, result.output
    seen = json.loads(result.output)
    assert seen["seen"] == []
    # Only what leads to the interpreter: the venv where it lives in the repo, pyenv under /root.
    assert all(sys.prefix.startswith(str(REPO / name)) for name in seen["repo"])
    assert all(sys.base_prefix.startswith(f"/root/{name}/") for name in seen["root"])


@needs_bwrap
def test_only_bound_folders_are_visible(tmp_path):
    shared = readable_dir(tmp_path / "shared")
    (shared / "values.txt").write_text("42")
    (shared / "values.txt").chmod(0o644)
    (tmp_path / "gradebook.db").write_text("secret")
    result = run(f"""
        import os
        print(open("/course/values.txt").read())
        print(os.path.exists({str(tmp_path / "gradebook.db")!r}),
              os.path.exists("/course/../gradebook.db"))
    """, readonly={str(shared): "/course"})
    assert result.returncode == 0, result.output
    assert result.output.split() == ["42", "False", "False"]


@needs_bwrap
def test_writes_outside_the_writable_folders_fail(tmp_path):
    shared = readable_dir(tmp_path / "shared")
    result = run(f"""
        import os
        for folder in ["/", "/usr", "/etc", "/course", {sys.prefix!r}, {str(REPO)!r}, "/root"]:
            try:
                open(os.path.join(folder, "planted"), "w").close()
                print("WROTE", folder)
            except OSError as error:
                print("refused", folder, error.strerror)
    """, readonly={str(shared): "/course"})
    assert result.returncode == 0, result.output
    assert "WROTE" not in result.output
    assert list(shared.iterdir()) == []


@needs_bwrap
def test_writable_folder_contents_come_back_without_following_symlinks(tmp_path):
    out = tmp_path / "out"
    result = run("""
        import os
        open("/out/result.txt", "w").write("answer")
        os.mkdir("/out/sub")
        open("/out/sub/nested.bin", "wb").write(bytes(range(256)))
        os.symlink("/etc/hostname", "/out/link")
        print(os.getcwd())
    """, writable={str(out): "/out"}, cwd="/out")
    assert result.returncode == 0, result.output
    assert result.output.strip() == "/out"
    assert (out / "result.txt").read_text() == "answer"
    assert (out / "sub" / "nested.bin").read_bytes() == bytes(range(256))
    assert not (out / "link").exists() and not (out / "link").is_symlink()


@pytest.mark.parametrize("isolation", BOTH)
def test_watch_reads_writable_files_live_and_can_stop_the_run(isolation, tmp_path):
    out = tmp_path / "out"  # the same path inside and outside, so one snippet fits both
    out.mkdir()
    seen = []

    def watch(read):
        seen.append((read(f"{out}/progress"), read(f"{out}/link"), read(f"{out}/../outside")))
        return "stuck" if seen[-1][0] == b"looping" else None

    result = run(f"""
        import os
        os.symlink("/etc/hostname", "{out}/link")
        open("{out}/progress", "w").write("looping")
        while True:
            pass
    """, isolation=isolation, writable={str(out): str(out)}, limits=Limits(wall_seconds=20),
                 watch=watch)
    assert (result.signal, result.timed_out) == (signal.SIGKILL, False), result.output
    assert result.wall_seconds < 5
    assert seen[-1] == (b"looping", b"", b"")


@needs_bwrap
def test_no_network():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        result = run(f"""
            import socket
            for address in [("127.0.0.1", {port}), ("8.8.8.8", 53)]:
                try:
                    socket.create_connection(address, timeout=2).close()
                    print("CONNECTED", address)
                except OSError as error:
                    print("failed", address, error)
        """)
    assert result.returncode == 0, result.output
    assert "CONNECTED" not in result.output and result.output.count("failed") == 2


@needs_bwrap
def test_unprivileged_without_capabilities_or_new_user_namespaces():
    result = run("""
        import ctypes, os
        status = dict(line.split(":\\t") for line in open("/proc/self/status").read().splitlines())
        print(os.getuid(), os.geteuid(), os.getgid(), status["CapEff"], status["CapPrm"],
              status["NoNewPrivs"])
        libc = ctypes.CDLL(None, use_errno=True)
        print("unshare", libc.unshare(0x10000000))  # CLONE_NEWUSER
    """)
    assert result.returncode == 0, result.output
    ids, unshare = result.output.splitlines()
    uid, euid, gid, cap_eff, cap_prm, no_new_privs = ids.split()
    assert uid == euid == gid == "65534"
    assert int(cap_eff, 16) == int(cap_prm, 16) == 0
    assert no_new_privs == "1"
    assert unshare == "unshare -1"


FORK_BOMB = """
import os, time
forks = 0
for _ in range(300):
    try:
        pid = os.fork()
    except OSError as error:
        print("stopped", forks, error.errno)
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    forks += 1
else:
    print("unbounded", forks)
"""


@needs_bwrap
def test_fork_bomb_is_bounded():
    result = run(FORK_BOMB, limits=Limits(processes=32))
    assert result.returncode == 0, result.output
    word, forks, *_ = result.output.split()
    assert word == "stopped" and int(forks) < 32, result.output
    assert result.wall_seconds < 10


@needs_bwrap
def test_each_sandbox_has_its_own_process_budget():
    """Concurrent sandboxes share a uid, yet one's processes do not count against another's."""
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda _: run(FORK_BOMB, limits=Limits(processes=32)), range(3)))
    for result in results:
        word, forks, *_ = result.output.split()
        assert word == "stopped" and 24 <= int(forks) < 32, result.output


@needs_bwrap
def test_50_gb_allocation_fails_but_torch_works():
    result = run("""
        import torch
        try:
            torch.empty(50 * 2**30, dtype=torch.uint8)
            print("ALLOCATED")
        except RuntimeError:
            print("refused", torch.ones(4).sum().item())
    """)
    assert result.returncode == 0, result.output
    assert result.output.strip() == "refused 4.0"


@pytest.mark.parametrize("isolation", BOTH)
def test_memory_limit_applies(isolation):
    result = run("""
        try:
            bytearray(50 * 2**30)
        except MemoryError:
            print("refused")
    """, isolation=isolation)
    assert (result.returncode, result.output.strip()) == (0, "refused")


@pytest.mark.parametrize("isolation", BOTH)
def test_infinite_loop_times_out(isolation):
    result = run("while True: pass", isolation=isolation, limits=Limits(wall_seconds=3))
    assert result.timed_out and result.returncode is None and result.signal == signal.SIGKILL
    assert 3 <= result.wall_seconds < 6


@needs_bwrap
def test_a_loop_that_ignores_interrupts_still_dies():
    result = run("""
        import signal
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print("ignoring", flush=True)
        while True:
            try:
                pass
            except KeyboardInterrupt:
                pass
    """, limits=Limits(wall_seconds=3))
    assert result.timed_out and result.signal == signal.SIGKILL
    assert result.output == "ignoring\n"
    assert result.wall_seconds < 6


@pytest.mark.parametrize("isolation", BOTH)
def test_exit_status_is_reported(isolation):
    result = run("import os; print('bye', flush=True); os._exit(3)", isolation=isolation)
    assert (result.returncode, result.signal, result.timed_out) == (3, None, False)
    assert result.output == "bye\n"


@pytest.mark.parametrize("isolation", BOTH)
def test_segfault_is_reported_as_a_signal(isolation):
    result = run("import ctypes; ctypes.string_at(0)", isolation=isolation)
    assert (result.returncode, result.signal, result.timed_out) == (None, signal.SIGSEGV, False)


@pytest.mark.parametrize("isolation", BOTH)
def test_100_mb_of_output_is_truncated_promptly(isolation):
    result = run("""
        import sys
        chunk = b"x" * 2**20
        for _ in range(100):
            sys.stdout.buffer.write(chunk)
        print("done", file=sys.stderr)
    """, isolation=isolation, limits=Limits(output_bytes=2**20))
    assert result.returncode == 0
    assert result.output_truncated and result.output == "x" * 2**20
    assert result.wall_seconds < 10


@pytest.mark.parametrize("isolation", BOTH)
def test_environment_is_only_what_the_caller_gives(isolation, monkeypatch):
    monkeypatch.setenv("GRADER_SECRET", "do-not-leak")
    result = run("import os; print(sorted(os.environ))", isolation=isolation,
                 env={"ASSIGNMENT": "01"})
    assert result.returncode == 0, result.output
    names = set(eval(result.output))
    assert "ASSIGNMENT" in names and "GRADER_SECRET" not in names
    assert names <= {"ASSIGNMENT", "PATH", "HOME", "TMPDIR", "LANG", "PWD"}


@pytest.mark.parametrize("isolation", BOTH)
def test_python_on_the_path_is_the_graders_venv(isolation):
    result = run_sandboxed(["python", "-c", "import sys; print(sys.prefix)"], readonly={},
                           writable={}, limits=Limits(), env={}, cwd="/tmp", isolation=isolation)
    inside = sandbox.VENV if isolation.name == "bubblewrap" and sys.prefix != sys.base_prefix else sys.prefix
    assert (result.returncode, result.output.strip()) == (0, inside)


@needs_bwrap
def test_background_processes_do_not_outlive_the_run():
    marker = f"sandbox-test-{uuid.uuid4().hex}"
    result = run(f"""
        import os, subprocess, time
        subprocess.Popen(["sleep", "1000"], start_new_session=True,
                         env={{"MARKER": "{marker}"}}, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.close(1); os.close(2)
                os.execv("/bin/sh", ["sh", "-c", "sleep 1000 # {marker}"])
            os._exit(0)
        time.sleep(0.5)
        print("started")
    """)
    assert result.returncode == 0 and result.output == "started\n", result.output
    survivors = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes() + \
                    Path(f"/proc/{pid}/environ").read_bytes():
                survivors.append(pid)
        except OSError:
            pass
    assert survivors == []


@needs_bwrap
def test_file_size_limit(tmp_path):
    result = run("""
        import errno
        with open("/tmp/big", "wb") as f:
            try:
                f.write(b"x" * 2 * 2**20)
                f.flush()
                print("WROTE")
            except OSError as error:
                print("refused", errno.errorcode[error.errno])
    """, limits=Limits(file_size_bytes=2**20))
    assert result.output.strip() == "refused EFBIG", result.output


@needs_bwrap
@pytest.mark.parametrize("folder", ["/tmp", "/dev/shm", "/out"])
def test_scratch_space_is_bounded(tmp_path, folder):
    result = run(f"""
        import errno
        written = 0
        try:
            for i in range(64):
                with open(f"{folder}/fill{{i}}", "wb") as f:
                    f.write(b"x" * 2**20)
                written += 2**20
            print("FILLED", written)
        except OSError as error:
            print("refused", errno.errorcode[error.errno], written)
    """, writable={str(tmp_path / "out"): "/out"}, limits=Limits(scratch_bytes=8 * 2**20))
    word, code, written = result.output.split()
    assert (word, code) == ("refused", "ENOSPC") and int(written) <= 8 * 2**20, result.output


@pytest.mark.parametrize("isolation", BOTH)
def test_closing_the_output_does_not_escape_the_time_limit(isolation):
    result = run("import os; os.close(1); os.close(2)\nwhile True: pass", isolation=isolation,
                 limits=Limits(wall_seconds=2))
    assert result.timed_out and 2 <= result.wall_seconds < 5


def test_fallback_returns_when_a_detached_process_keeps_the_output_open():
    result = run("""
        import subprocess
        print(subprocess.Popen(["sleep", "30"], start_new_session=True).pid, flush=True)
    """, isolation=NONE, limits=Limits(wall_seconds=20))
    os.kill(int(result.output), signal.SIGKILL)  # without a sandbox it escapes; clean up
    assert result.returncode == 0 and not result.timed_out
    assert result.wall_seconds < 5
