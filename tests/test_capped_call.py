"""A visible check's call under the grader's memory cap, in a forked process
(:mod:`transformer_lm.capped_call`): what fits comes back, what does not fails with the answer's
line, and the kernel that asked is never capped, killed or left waiting."""

import mmap
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy
import pytest
import torch

from transformer_lm import capped_call
from transformer_lm.instructor.capped_kinds import CAPPED_CAUSAL as CASE, MEMORY_CAP


def tiled_row_maxima():
    """The row maxima of one query block's scores, a tile at a time, at the capped checks' size."""
    q, k = torch.randn(CASE.block_q, CASE.dim), torch.randn(CASE.seq_k, CASE.dim)
    return torch.stack([(q @ k[s:s + CASE.block_k].T).amax(-1) for s in range(0, CASE.seq_k, CASE.block_k)]).amax(0)


def whole_matrix():
    q, k = torch.randn(CASE.seq_q, CASE.dim), torch.randn(CASE.seq_k, CASE.dim)
    return (q @ k.T).amax(-1)


def query_block_row():
    """A whole row of scores for a block of queries, more than the cap, in private memory."""
    return torch.ones(CASE.block_q, CASE.seq_k).sum()


def test_a_tiled_call_fits_and_its_value_comes_back_after_the_kernel_used_its_threads():
    a = torch.randn(1024, 1024)
    (a @ a).sum()   # the kernel's OpenMP workers in use, as after a notebook's benchmark
    got = capped_call.call_capped(tiled_row_maxima, MEMORY_CAP, seconds=60)
    assert got.shape == (CASE.block_q,)


def test_the_whole_score_matrix_fails_under_the_cap_with_the_line_that_made_it():
    with pytest.raises(capped_call.CappedCallRaised) as raised:
        capped_call.call_capped(whole_matrix, MEMORY_CAP, seconds=60)
    assert isinstance(raised.value.error, RuntimeError) and "allocate" in str(raised.value.error)
    assert "in whole_matrix" in raised.value.trace and "torch" not in raised.value.trace


def test_the_asking_process_keeps_its_limits_and_its_memory():
    before = {kind: resource.getrlimit(kind) for kind in (resource.RLIMIT_DATA, resource.RLIMIT_AS,
                                                          resource.RLIMIT_FSIZE, resource.RLIMIT_NOFILE)}
    with pytest.raises(capped_call.CappedCallRaised):
        capped_call.call_capped(whole_matrix, MEMORY_CAP, seconds=60)
    assert {kind: resource.getrlimit(kind) for kind in before} == before
    assert whole_matrix().shape == (CASE.seq_q,)   # the kernel itself was never capped


def test_raising_the_cap_from_inside_is_refused():
    def raise_the_cap():
        resource.setrlimit(resource.RLIMIT_DATA, (2**40, 2**40))
    with pytest.raises(capped_call.CappedCallRaised) as raised:
        capped_call.call_capped(raise_the_cap, MEMORY_CAP, seconds=30)
    assert isinstance(raised.value.error, ValueError)


def test_what_the_call_prints_is_shown_after_it(capsys):
    def chatty():
        print("tile 0 done")
        return 7
    assert capped_call.call_capped(chatty, MEMORY_CAP, seconds=30) == 7
    assert capsys.readouterr().out == "tile 0 done\n"


def test_a_process_that_dies_says_how():
    with pytest.raises(capped_call.CappedCallFailed, match="SIGKILL"):
        capped_call.call_capped(lambda: os.kill(os.getpid(), signal.SIGKILL), MEMORY_CAP, seconds=30)
    with pytest.raises(capped_call.CappedCallFailed, match="signal 40"):
        capped_call.call_capped(lambda: os.kill(os.getpid(), 40), MEMORY_CAP, seconds=30)
    with pytest.raises(capped_call.CappedCallFailed, match="status 3"):
        capped_call.call_capped(lambda: os._exit(3), MEMORY_CAP, seconds=30)


def test_a_call_that_never_ends_is_stopped_in_time():
    start = time.monotonic()
    with pytest.raises(capped_call.CappedCallFailed, match="longer than 2 s"):
        capped_call.call_capped(lambda: time.sleep(3600), MEMORY_CAP, seconds=2)
    assert time.monotonic() - start < 10


def test_a_value_that_cannot_be_sent_back_says_so():
    with pytest.raises(capped_call.CappedCallRaised, match="could not be sent back"):
        capped_call.call_capped(lambda: (lambda: None), MEMORY_CAP, seconds=30)


def test_a_capped_call_starts_no_process():
    """Each process would get a cap of its own; the grader's runs refuse them too."""
    with pytest.raises(capped_call.CappedCallRaised, match="starts no process") as raised:
        capped_call.call_capped(lambda: subprocess.run([sys.executable, "-c", "pass"]), MEMORY_CAP, seconds=30)
    assert isinstance(raised.value.error, PermissionError)
    with pytest.raises(capped_call.CappedCallRaised, match="starts no process"):
        capped_call.call_capped(os.fork, MEMORY_CAP, seconds=30)


def test_a_capped_call_maps_no_memory():
    """A shared mapping counts against the address space only, whose margin would hold a row of a
    query block's scores; the grader's runs map no memory either. A row in private memory, the
    control, is refused by the cap itself."""
    def row_in_a_shared_map():
        kept = mmap.mmap(-1, CASE.block_q * CASE.seq_k * 4)
        return numpy.frombuffer(kept, numpy.float32).size

    with pytest.raises(capped_call.CappedCallRaised, match="maps no memory") as raised:
        capped_call.call_capped(row_in_a_shared_map, MEMORY_CAP, seconds=30)
    assert isinstance(raised.value.error, PermissionError)
    with pytest.raises(capped_call.CappedCallRaised, match="allocate"):
        capped_call.call_capped(query_block_row, MEMORY_CAP, seconds=60)


def test_space_the_kernel_freed_before_the_call_does_not_raise_the_cap():
    """A kernel that ran a benchmark holds freed space in malloc's heap, which an allocation after
    the cap could take without mapping anything the cap counts: 240 MiB of it here (6 MiB blocks,
    served from the heap once an 8 MiB block was freed, and one kept above them), and a row of a
    query block (more than the cap) must still fail."""
    freed = torch.empty(8 * 2**20 // 4)
    del freed                      # glibc now serves blocks under 8 MiB from its heap
    blocks = [torch.empty(6 * 2**20 // 4) for _ in range(40)]
    above = torch.empty(7 * 2**20 // 4)   # the heap cannot give the space back past it
    del blocks
    with pytest.raises(capped_call.CappedCallRaised, match="allocate"):
        capped_call.call_capped(query_block_row, MEMORY_CAP, seconds=60)
    assert capped_call.call_capped(tiled_row_maxima, MEMORY_CAP, seconds=60).shape == (CASE.block_q,)
    del above


def test_space_the_kernels_threads_freed_does_not_raise_the_cap():
    """A kernel's threads (Jupyter's, PyTorch's OpenMP workers) allocate in heaps of their own, which
    glibc keeps mapped once freed; the capped child, when its own heap cannot grow, is served from
    them without mapping anything the cap counts. Threads that freed 20 MiB blocks let a row of a
    query block through (56 MiB), until the child measured its peak resident memory too. Run in a
    fresh interpreter, so that this process's own heaps do not decide it."""
    script = f"""
import sys, threading, torch
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_capped_call import tiled_row_maxima
from transformer_lm import capped_call
kept = []
def work():
    for _ in range(6):
        block = torch.empty(5 * 2**20)
        block.fill_(1.0)
        kept.append(torch.empty(16))
        del block
threads = [threading.Thread(target=work) for _ in range(4)]
[thread.start() for thread in threads]
[thread.join() for thread in threads]
def row():
    return torch.ones({CASE.block_q}, 7168).sum()
try:
    capped_call.call_capped(row, {MEMORY_CAP}, seconds=60)
    print("served")
except capped_call.CappedCallRaised as raised:
    print("refused", type(raised.error).__name__)
print(capped_call.call_capped(tiled_row_maxima, {MEMORY_CAP}, seconds=60).shape)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["refused MemoryError", f"torch.Size([{CASE.block_q}])"], done.stdout
