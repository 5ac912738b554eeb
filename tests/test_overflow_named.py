"""A softmax written without shifting its scores overflows on scores in the hundreds: exp(1000) is
inf in float32, and inf / inf is NaN. Before, the check explained that NaN as "-inf rows or a wrong
dimension" and did not show the input; now it names an overflow, with the row of the input that
overflowed (its numbers on the visible check; their count on the hidden one, whose inputs are
secret) and the idea that fixes it, on the visible check and in the grader's judging alike. Correct
softmaxes, however they are written, keep full marks; an input row that is -inf throughout keeps
the NaN text, since no exp overflows there."""

from __future__ import annotations

import pytest
import torch

from autograder.reading.assignment import Assignment
from autograder.reading.course import Course
from autograder.commands.demo import make_course
from autograder.recording.feedback_texts import catalogue
from transformer_lm import checks
from transformer_lm.instructor import visible_checks
from transformer_lm.judging import CheckFailed, difference, judge, overflow


def naive(x):
    exponentials = torch.exp(x)
    return exponentials / exponentials.sum(dim=-1, keepdim=True)


def library(x):
    return torch.softmax(x, dim=-1)


def shifted(x):
    exponentials = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return exponentials / exponentials.sum(dim=-1, keepdim=True)


def through_logsumexp(x):
    return torch.exp(x - torch.logsumexp(x, dim=-1, keepdim=True))


def shifted_by_amax(x):
    shifted_scores = x - x.amax(-1, keepdim=True)
    return shifted_scores.exp() / shifted_scores.exp().sum(-1, keepdim=True)


HONEST = {"torch.softmax": library, "the maximum subtracted": shifted, "logsumexp": through_logsumexp,
          "amax": shifted_by_amax}


@pytest.fixture(scope="module")
def visible() -> list[dict]:
    """The visible checks of softmax_stable, as ``python -m transformer_lm.instructor.make_test_values``
    stores them."""
    return visible_checks.ASSIGNMENTS["01_attention_basics"]()["softmax_stable"]


@pytest.fixture(scope="module")
def hidden(tmp_path_factory) -> tuple[list, object]:
    """The hidden checks of softmax_stable, prepared as grading prepares them, and the catalogue
    of assignment 01's texts."""
    root = tmp_path_factory.mktemp("01_attention_basics")
    make_course(root, "01_attention_basics", generate=False)
    assignment = Assignment.load(Course(root), "01_attention_basics")
    found = [check for _, check in sorted(assignment.prepared.items())
             if check.call.objects == {"fn": "softmax_stable"}]
    return found, catalogue(assignment)


def visible_refusal(entries: list[dict], answer) -> str:
    with pytest.raises(CheckFailed) as failed:
        for entry in entries:
            checks.run(entry["name"], entry["check"], {"softmax_stable": answer}, entry["context"])
    return str(failed.value)


def test_the_visible_check_names_the_overflow_with_the_row_that_overflowed(visible):
    message = visible_refusal(visible, naive)
    assert "softmax_stable on x of shape (2, 3):" in message
    assert "an overflow. Row (0,) of x holds [1000, 1001, 1002] above 88.72" in message, message
    assert "shift each row so that its largest score is 0" in message
    assert "-inf" not in message, message


def test_the_grader_names_the_overflow_and_keeps_the_hidden_input_secret(hidden):
    prepared, texts = hidden
    messages = [check.judge_result(check.call.run_here({"softmax_stable": naive}), values=False).message
                for check in prepared]
    overflowed = [message for message in messages if "an overflow" in message]
    assert overflowed, messages
    for message in overflowed:
        assert texts.holds(message), message
        assert "number(s) above 88.72" in message and "[" not in message, message


@pytest.mark.parametrize("name", sorted(HONEST))
def test_a_correct_softmax_passes_both(name, visible, hidden):
    for entry in visible:
        assert checks.run(entry["name"], entry["check"], {"softmax_stable": HONEST[name]}, entry["context"]).passed
    prepared, _ = hidden
    for check in prepared:
        verdict = check.judge_result(check.call.run_here({"softmax_stable": HONEST[name]}), values=False)
        assert verdict.passed, (name, verdict.message)


def test_a_row_of_minus_infinity_keeps_the_nan_text():
    scores = torch.tensor([[0.0, 1.0], [-torch.inf, -torch.inf]])
    got = naive(scores)
    expected = torch.tensor([[0.2689, 0.7311], [0.0, 0.0]])
    assert overflow("output", got, expected, {"x": scores}) is None
    verdict = judge({"output": got}, {"output": expected}, inputs={"x": scores})
    assert verdict.message == difference("output", got, expected)
    assert verdict.message.startswith("output contains NaN") and "every score is -inf" in verdict.message


def test_an_overflow_in_float64_is_read_against_float64s_limit():
    scores = torch.tensor([[700.0, 705.0, 720.0]], dtype=torch.float64)
    message = overflow("output", naive(scores), library(scores), {"x": scores})
    assert "Row (0,) of x holds [720] above 709.8" in message, message


def test_an_online_softmax_that_overflows_is_told_so_with_its_scores():
    """Assignment 05's online softmax meets scores in the hundreds too (its spread case)."""
    entries = visible_checks.ASSIGNMENTS["05_efficient_attention"]()["online_softmax"]
    with pytest.raises(CheckFailed) as failed:
        for entry in entries:
            checks.run(entry["name"], entry["check"], {"online_softmax": lambda scores, block: naive(scores)},
                       entry["context"])
    assert "an overflow. Row (1,) of scores holds [" in str(failed.value), str(failed.value)
