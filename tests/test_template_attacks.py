"""Attacks on what a run inherits from the process it is forked from, graded for real with one and
with two workers, each followed by a correct classmate in the same sandbox.

- ``frames``: ``MultiHeadSelfAttention`` is left as released, so ``Block``, which builds on it, is
  checked in a late run, on the course's attention, beside ``GPT``'s checks, which run on the
  course's ``Block`` in the next stage. When the grader builds a ``Block``, the answer walks the stack
  up through the grader's frames, looking for the gate of the course's code (what holds every stage,
  released or not) and the class that runs a stage, and builds the course's ``Block`` from the next
  stage. Runs forked from the server found both there, and the answer, never written, got its point.
  Runs forked from the template (``autograder/running/harness/template.py``) find neither: the item
  is lost, and ``GPT``, which builds on it, is graded on the course's ``Block``, as for any failed item.
- ``signal``: ``MultiHeadSelfAttention`` kills its run with a signal chosen by a hidden size. The item is lost,
  and the words told before the deadline are one of the fixed deaths, never the number.
"""

import pytest

import assignments
import notebook_tools as tools
from autograder.reading import messages
from autograder.running import sandbox

ROW = assignments.BY_NAME["04_mingpt"]
pytestmark = pytest.mark.timeout(900)

FRAMES = '''
import sys

from torch import nn


def course_class():
    """The course's Block, from the gate of the course's code on the stack."""
    frame, gate, course_code = sys._getframe(), None, None
    while frame is not None:
        course_code = course_code or frame.f_globals.get("CourseCode")
        for value in list(frame.f_locals.values()):
            try:
                if isinstance(getattr(value, "stages", None), list) and hasattr(value, "waiting"):
                    gate = value
            except Exception:   # an object whose attributes raise: not the gate
                pass
        frame = frame.f_back
    for stage in (gate.stages if gate is not None and course_code is not None else []):
        course = course_code(stage["code"])
        if "Block" in course.names:
            scope = dict(globals())
            with course.standing_in(scope, ["Block"]):
                return scope["Block"]
    return None


class Block(nn.Module):
    def __new__(cls, *args, **kwargs):   # when the grader builds one, the grader's frames are on the stack
        taken = course_class()
        return taken(*args, **kwargs) if taken is not None else super().__new__(cls)
'''

SIGNAL = '''
import os

from torch import nn


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        os.kill(os.getpid(), 34 + config.block_size % 30)   # the number would show a hidden size
'''


@pytest.fixture(scope="module", params=[1, 2], ids=["one worker", "two workers"])
def graded(request, tmp_path_factory):
    if sandbox.detect_isolation().name != "bubblewrap":
        pytest.skip(f"needs bubblewrap: {sandbox.detect_isolation().detail}")
    solution = {gid: tools.answer_cell(tools.read(ROW.source_path), gid) for gid in ROW.answers}
    unwritten = {gid: source for gid, source in solution.items() if gid != "mingpt_attention"}   # as released
    submissions = {"a_frames": {**unwritten, "block": FRAMES},
                   "b_victim": solution, "c_signal": {**solution, "mingpt_attention": SIGNAL}, "d_victim": solution}
    reports = tools.grade_class(ROW.name, tmp_path_factory.mktemp("course"),
                                {name: tools.replace_solutions(ROW.release_path, cells)
                                 for name, cells in submissions.items()}, workers=request.param)
    return {student: {item["grade_id"]: item for item in report["items"]} | {"": report}
            for student, report in reports.items()}


def test_the_course_code_is_not_in_a_runs_frames(graded):
    items = graded["a_frames"]
    assert items["mingpt_attention"]["score"] == 0, items["mingpt_attention"]
    assert items["block"]["score"] == 0, items["block"]
    assert items["gpt"]["score"] == ROW.points["gpt"], items["gpt"]["message"]


def test_a_signal_chosen_by_the_run_is_told_as_a_fixed_death(graded):
    item = graded["c_signal"]["mingpt_attention"]
    assert item["score"] == 0 and item["status"] == "killed", item
    public = messages.public(item["status"], item["message"], ())
    assert public.removeprefix(messages.IN_ANSWER_CELL) in messages.DEATHS, public
    assert not any(ch.isdigit() for ch in item["message"]), item["message"]


@pytest.mark.parametrize("victim", ["b_victim", "d_victim"])
def test_a_correct_classmate_graded_after_an_attack_keeps_full_marks(graded, victim):
    report = graded[victim][""]
    assert report["total"] == report["max_total"] and report["flags"] == [], report["items"]
