"""The timed windows of assignment 05's work checks, piece by piece and without a sandbox: the
server's clock keeps each window in order and counts nothing it cannot vouch for
(``harness/clock.py``), a window's inputs cross the pipe into memory the run already holds, and the
judge reads the figures (``transformer_lm/timed_judges.py``). ``tests/test_outside_truth.py``
grades whole submissions."""

from __future__ import annotations

import math
import os

import pytest
import torch
from safetensors.torch import load, save

from autograder.running.harness import clock, report
from transformer_lm import catalog
from transformer_lm.judging import Computed, RecordJudge
from transformer_lm.timed_judges import OWN_FACTOR, SkipTimeJudge, paired_ratio


class Server:
    """A :class:`clock.Clock` over two windows of probe ``p``, its sends kept, its run this process."""

    def __init__(self, tmp_path):
        folder = tmp_path / "clocked"
        folder.mkdir()
        self.inputs = [save({"inputs/q": torch.full((2, 3), float(window))}) for window in range(2)]
        for window, data in enumerate(self.inputs):
            (folder / f"p.{window}.safetensors").write_bytes(data)
        self.sent: list[bytes] = []
        self.clock = clock.Clock(str(folder), {"p": ["p.0.safetensors", "p.1.safetensors"]}, self.sent.append, os.getpid)

    def seen(self, name: str, written=(), probe="p", open_probe="p"):
        self.clock.seen({"event": name, "probe": probe}, open_probe, set(written))


def busy(seconds: float) -> None:
    end = time_now() + seconds
    while time_now() < end:
        pass


def time_now() -> float:
    return clock.cpu_nanoseconds(os.getpid()) / 1e9


def test_each_window_is_timed_from_its_inputs_to_its_record(tmp_path):
    server = Server(tmp_path)
    for window in range(2):
        server.seen("clock")
        assert server.sent[-1] == report.raw_frame(server.inputs[window])   # the inputs come only now
        busy(0.02)
        server.seen("clocked", written={f"p.{window}.safetensors"})
        assert server.sent[-1] == report.frame({})
    figures = server.clock.figures["p"]
    assert len(figures) == 2 and all(f is not None and f >= 0.02e9 for f in figures), figures


def test_a_window_out_of_order_counts_for_nothing_and_neither_do_the_later_ones(tmp_path):
    server = Server(tmp_path)
    server.seen("clock")
    server.seen("clocked")                                  # before its record came
    assert server.sent[-1] == report.frame({"void": True})
    server.seen("clock")                                    # the next window is refused too
    assert server.sent[-1] == report.frame({"void": True}) and server.clock.figures["p"][0] is None
    (tmp_path / "other").mkdir()
    other = Server(tmp_path / "other")
    other.seen("clock", open_probe="q")                     # not the probe the journal has open
    other.seen("clock")
    other.seen("clock")                                     # a window asked for while one is open
    assert other.sent[-1] == report.frame({"void": True}) and None in other.clock.figures["p"]


def test_a_call_that_raised_in_its_window_leaves_no_answer_waiting(tmp_path):
    server = Server(tmp_path)
    server.seen("clock")
    count = len(server.sent)
    server.seen("probe_end")
    assert len(server.sent) == count and server.clock.figures["p"] == [None]


def test_a_window_s_inputs_land_in_the_run_s_buffer_and_read_as_safetensors_does():
    data = save({"inputs/q": torch.randn(4, 5), "inputs/lse": torch.randn(4).double()})
    read, write = os.pipe()
    os.write(write, report.raw_frame(data) + report.frame({"ok": 1}))
    buffer = bytearray(len(data) + 16)
    view = report.receive(read, buffer)
    assert view.obj is buffer and bytes(view) == data and report.receive(read, None) == {"ok": 1}
    tensors, expected = clock.window_tensors(view), load(data)
    assert set(tensors) == set(expected) and all(torch.equal(tensors[n], expected[n]) for n in expected)
    os.close(read)
    os.close(write)


def judge() -> SkipTimeJudge:
    expected = {"output": torch.tensor([1.0, 2.0, 3.0])}
    return SkipTimeJudge("flash_forward(q, k, v)", [0, 2, 4], [1, 3, 5],
                         Computed(lambda: {w: RecordJudge(expected) for w in (0, 2, 4)}), 0.5625)


def record(causal: float, full: float, course: float, got=(1.0, 2.0, 3.0)) -> dict[str, torch.Tensor]:
    """Three pairs of windows: the second made while the machine ran a third slower, the third's call
    without the mask slowed twice over by a moment of load."""
    seconds = {0: causal, 1: full, 2: causal * 1.3, 3: full * 1.3, 4: causal, 5: full * 2}
    found = {f"clock.w{w}": torch.tensor(s, dtype=torch.float64) for w, s in seconds.items()}
    found |= {f"w{w}.output": torch.tensor(got) for w in (0, 2, 4)}
    return found | {"reference.own": torch.tensor(course, dtype=torch.float64)}


def test_the_judge_holds_the_median_pair_to_the_course_s_ratio():
    assert judge().figures(record(0.6, 1.0, 0.7)) == (pytest.approx(0.6), 0.7)
    assert paired_ratio([3.0, 4.0, 1.0, 2.0], [True, False, True, False]) == pytest.approx(0.625)
    assert judge()(record(0.7 * OWN_FACTOR * 0.99, 1.0, 0.7), None, False).passed
    failed = judge()(record(0.7 * OWN_FACTOR * 1.01, 1.0, 0.7), None, False)
    assert not failed.passed and failed.mistake is catalog.BY_NAME["future_blocks_computed"], failed
    wrong = judge()(record(0.6, 1.0, 0.7, got=(1.0, 2.0, 4.0)), None, False)
    assert not wrong.passed and "of the CPU time" not in wrong.message               # values first
    untimed = record(0.6, 1.0, 0.7) | {"clock.w1": torch.tensor(math.nan, dtype=torch.float64)}
    assert "could not time" in judge()(untimed, None, False).message
