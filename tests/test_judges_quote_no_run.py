"""No hidden check's judge quotes a word the run chose: whatever a probe sends back (records with
keys of its own, tensors of any shape and type, plain values that are strings, lists or dicts), the
verdict's message and hint hold none of it. A run's process is the student's, and a word it chose
could carry a hidden input out into the feedback pages. Before, the KV-cache size judge quoted a
returned string, the parameters judge the names of the module's own parameters, and the tiled
Function's judge the names of the attributes it left on ctx. And every
message is made of the closed catalogue's templates (:mod:`autograder.recording.feedback_texts`)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import notebook_tools as tools
from autograder.reading.assignment import Assignment
from autograder.reading.course import Course
from autograder.commands.demo import make_course
from autograder.recording.feedback_texts import Catalogue, catalogue

MARK = "LEAK"
ASSIGNMENTS = sorted(path.name for path in (tools.REPO_ROOT / "source").glob("0[1-6]_*"))


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> list[tuple[str, object, Catalogue]]:
    """Every hidden check of every assignment, prepared as grading prepares it, with the catalogue
    of its assignment's texts."""
    found = []
    for name in ASSIGNMENTS:
        root = tmp_path_factory.mktemp(name)
        make_course(root, name, generate=False)
        assignment = Assignment.load(Course(root), name)
        texts = catalogue(assignment)
        found += [(pid, check, texts) for pid, check in sorted(assignment.prepared.items())]
    return found


words = st.one_of(st.just(MARK), st.text(max_size=8).map(lambda text: MARK + text))
plain = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-2, 2**40), st.floats(), words),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(words, inner, max_size=3), max_leaves=8)
shapes = st.lists(st.integers(0, 4), max_size=3)
dtypes = st.sampled_from([torch.float32, torch.float64, torch.int64, torch.bool, torch.float16])


@st.composite
def records(draw, expected: dict) -> dict:
    """A record as a forging run could send it: some expected keys, with tensors of any shape and
    type, and keys of its own."""
    keys = [key for key in expected if draw(st.booleans())] + draw(st.lists(words, max_size=2))
    return {key: torch.zeros(draw(shapes), dtype=draw(dtypes)) for key in keys}


def told(check, record: dict, value, texts: Catalogue) -> str:
    """What the grader says of a probe's ``record`` or plain ``value``, and its hint, once its
    message is found made of the catalogue (``texts``). A judge that raised says nothing of it
    (autograder.judging.judge names only the type of what it raised)."""
    try:
        verdict = check.judge(record, None, False) if record else check.judge_result(value, False)
    except Exception:  # noqa: BLE001 - autograder.judging.judge says ERRORS["uncompared"], no word of it
        return ""
    assert texts.holds(verdict.message), verdict.message
    return f"{verdict.message} {verdict.hint or ''}"


FORGED_VALUES = [MARK, [MARK, 1], {MARK: [2, 3]}, {"q.weight": [MARK]}, 2**40, [[MARK]], {MARK: {MARK: MARK}}]


def test_no_judge_quotes_a_forged_value_or_record(prepared):
    """Every hidden check, each forged answer."""
    for pid, check, texts in prepared:
        expected = getattr(check.judge, "expected", None)
        keys = list(expected) if isinstance(expected, dict) else []
        forged = [{MARK: torch.zeros(2)}, {**{key: torch.zeros(1, 2) for key in keys}, MARK: torch.ones(3)},
                  {key: torch.zeros(3, dtype=torch.int64) for key in keys}]
        shape = getattr(check.judge, "expected_shape", None)
        if shape is not None:  # a tiled Function that kept a tensor on ctx, under an attribute named by the run
            forged.append({"output": torch.zeros(shape), "forward.live": torch.tensor(2**40),
                           f"ctx.{MARK}": torch.tensor([2, 3])})
        for record, value in [*(({}, v) for v in FORGED_VALUES), *((r, None) for r in forged)]:
            assert MARK not in told(check, record, value, texts), (pid, record, value)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(st.data())
def test_no_judge_quotes_what_a_run_sent(prepared, data):
    pid, check, texts = data.draw(st.sampled_from(prepared))
    expected = getattr(check.judge, "expected", None)
    record = data.draw(records(expected if isinstance(expected, dict) else {}))
    assert MARK not in told(check, record, data.draw(plain), texts), pid
