"""What the kernel would hold for a capped call through a descriptor or a tmpfs name, outside the
memory cap (:mod:`transformer_lm.sandboxed.memory_cap`): each route of ``tests/kernel_buffer_routes.py``
tried for 24 MiB, in the visible check's capped child, in a capped run's harness, and, for the pipes
a forward parks score stripes in, through the real grader. Before the cap refused them, pipes grown
to 1 MiB, pairs of sockets, fifos, symbolic links and extended attributes each held 24 MiB beside a
capped call, and the child's inherited sockets 8 MiB."""

from __future__ import annotations

import json
import textwrap

import pytest

import notebook_tools as tools
from outside_truth_class import replace, solution
from test_absence_and_cap import run

TESTS = tools.REPO_ROOT / "tests"
HELD = {"pipes grown", "pipe2 grown", "socketpair", "_socket.socketpair", "fifos in /tmp", "symbolic links in /dev/shm",
        "extended attributes in /dev/shm"}
"""The routes that hold much (:data:`MUCH`, 24 MiB where these tests ran) where nothing refuses them."""
REFUSED = {"PermissionError", "OSError EFBIG", "OSError EBADF"}
"""How a capped call is refused: by the cap's refusals, by ``RLIMIT_FSIZE``, or with its inherited
descriptors closed."""
MUCH = 4 * 2**20
"""What a route of :data:`HELD` holds at least where nothing refuses it: 15 pairs of sockets hold
up to ``net.core.wmem_max`` each (4 MiB where these tests ran; 208 KiB is the kernel's default)."""


def holds_much(outcome: str) -> bool:
    """Whether a route held :data:`MUCH` or more; a kernel before 6.6, which keeps no extended
    attribute in a tmpfs, refuses them outright, and so holds them as if it did (nothing escapes)."""
    return outcome == "OSError EOPNOTSUPP" or (outcome.startswith("held ") and int(outcome.split()[1]) >= MUCH)


ROUTES = textwrap.dedent(f'''
    import json, os, socket, sys
    sys.path.insert(0, {str(TESTS)!r})
    import kernel_buffer_routes as routes
    from transformer_lm.sandboxed import memory_cap
''')


def test_the_visible_checks_capped_call_holds_nothing_outside_the_cap():
    """Every route, in the capped child, is refused; and the same routes in the process that forked
    it hold what they aim at (the kernel's own pipe and pair of sockets among them)."""
    out = run(ROUTES + textwrap.dedent('''
        from transformer_lm import capped_call
        pipe, pair = os.pipe(), socket.socketpair()   # the kernel's own, both ends held, as ipykernel's and asyncio's
        every = dict(routes.ROUTES, **{"an inherited pipe": lambda: routes.inherited(*pipe),
                                       "inherited sockets": lambda: routes.inherited_sockets(pair),
                                       "a call through ctypes": lambda: __import__("ctypes").CDLL(None).getpid() * 0})
        print(json.dumps(routes.outcomes(every)))
        print(json.dumps(capped_call.call_capped(lambda: routes.outcomes(every), 48 * 2**20)))
    '''))
    free, capped = map(json.loads, out.splitlines())
    assert {label for label, got in free.items() if holds_much(got)} == HELD | {"inherited sockets"}, free
    assert free["an inherited pipe"] == "held 1048576" and free["a call through ctypes"] == "held 0", free
    assert {label: got for label, got in capped.items() if got not in REFUSED} == {}


@pytest.mark.parametrize("capped", [True, False], ids=["capped", "uncapped"])
def test_a_capped_grading_run_holds_nothing_outside_the_cap(capped):
    """The run's harness (the server's ``refusals.prepare``, then the cap and the run's audit hook)
    refuses every route in a capped run, and none in a run without a cap, whose pipes count
    against its user's quota (``tests/test_shared_limits.py`` grows them)."""
    out = run(ROUTES + textwrap.dedent(f'''
        from harness import refusals
        refusals.prepare()
        if {capped}:
            memory_cap.cap(48 * 2**20)
        refusals.install(lambda *args, **fields: None, capped={capped})
        print(json.dumps(routes.outcomes(routes.ROUTES)))
    '''))
    got = json.loads(out)
    if capped:
        assert {label: outcome for label, outcome in got.items() if outcome not in REFUSED} == {}
    else:
        assert all(holds_much(got[label]) for label in HELD), got


PARKED = '''import fcntl
import os


def _park(scores, parked):
    """A stripe of scores held in a pipe grown to 1 MiB: the kernel's memory, not the run's."""
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 2**20)
    os.write(write_end, scores.numpy().tobytes())
    parked.append((read_end, write_end, scores.shape))


def _unpark(read_end, write_end, shape):
    data = bytearray()
    while len(data) < shape[0] * shape[1] * 4:
        data += os.read(read_end, 2**20)
    os.close(read_end)
    os.close(write_end)
    return torch.frombuffer(data, dtype=torch.float32).reshape(shape)


def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
    """The whole row of a query block's scores at once, 24 stripes of it parked in pipes."""
    B, H, T, d = q.shape
    out, lse = torch.empty(B, H, T, v.shape[-1]), torch.empty(B, H, T)
    for b in range(B):
        for h in range(H):
            for i in range(0, T, block_q):
                qi = q[b, h, i:i + block_q] * d ** -0.5
                n = qi.shape[0]
                width = max(1, 2**18 // n)
                stripes, parked, row_max = [], [], torch.full((n,), float("-inf"))
                end = i + n if causal else k.shape[2]
                for j in range(0, end, width):
                    s = qi @ k[b, h, j:min(j + width, end)].T
                    if causal:
                        s.masked_fill_(torch.arange(j, j + s.shape[1]) > torch.arange(i, i + n)[:, None], float("-inf"))
                    row_max = torch.maximum(row_max, s.amax(-1))
                    if len(parked) < 24 and s.numel() * 4 == 2**20:
                        _park(s, parked)
                        s = None
                    stripes.append((j, s))
                total, acc, rest = torch.zeros(n), torch.zeros(n, v.shape[-1]), iter(parked)
                for j, s in stripes:
                    p = torch.exp((s if s is not None else _unpark(*next(rest))) - row_max[:, None])
                    total += p.sum(-1)
                    acc += p @ v[b, h, j:j + p.shape[1]]
                out[b, h, i:i + n] = acc / total[:, None]
                lse[b, h, i:i + n] = row_max + total.log()
    return out, lse
'''

A = "05_efficient_attention"
ITEMS = {"online_softmax", "flash_forward", "flash_memory", "causal_skipping", "flash_backward", "backward_memory"}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The reports of the course's answer and of the same notebook whose forward parks score
    stripes in pipes, graded through the real pipeline."""
    from autograder.running import sandbox
    if sandbox.detect_isolation().name != "bubblewrap":
        pytest.skip(f"needs bubblewrap: {sandbox.detect_isolation().detail}")
    from test_attacks import reports, write_class

    root, good = tmp_path_factory.mktemp("kernel_buffers"), solution()
    write_class(root, {"honest": good, "parked_in_pipes": replace(good, "flash_forward", PARKED),
                       "kept_in_memory": replace(good, "flash_forward", PARKED.replace("len(parked) < 24", "False"))})
    tools.grade_course(root, A, workers=1)
    return {student: {item["grade_id"]: item for item in report["items"]} for student, report in reports(root).items()}


def test_a_forward_that_parks_its_scores_in_pipes_loses_flash_memory_only(graded):
    """Its values are right (it passes ``flash_forward``), its row of scores held 40 MiB in the run
    and 24 MiB in pipes, which fit under the cap before the cap refused pipes (the same forward
    with the whole row in the run, the control, never did); the course's answer, graded beside it,
    keeps every point."""
    passed = {student: {gid for gid, item in items.items() if item["status"] == "passed" and item["score"] > 0}
              for student, items in graded.items()}
    assert passed["honest"] == ITEMS, graded["honest"]
    assert passed["kept_in_memory"] == ITEMS - {"flash_memory"}, graded["kept_in_memory"]["flash_memory"]
    assert passed["parked_in_pipes"] == ITEMS - {"flash_memory"}, graded["parked_in_pipes"]["flash_memory"]
    assert "pipe" in graded["parked_in_pipes"]["flash_memory"]["message"], graded["parked_in_pipes"]["flash_memory"]
