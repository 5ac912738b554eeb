"""Who a forbidden call that ran belongs to (autograder.forbidden.found_in_trace), from the cells on
its stack as the sandbox's trace reports them: one mistake costs points once, and no answer gains
by calling the library from somewhere else."""

from autograder.forbidden import found_in_trace
from transformer_lm.forbidding import LIBRARY_ATTENTION

SDPA = "scaled_dot_product_attention"
FORWARD = "aten::_scaled_dot_product_flash_attention_for_cpu"
BACKWARD = "aten::_scaled_dot_product_flash_attention_for_cpu_backward"
HELPER, OWN, LATER = 28, 51, 67
"""Three answer cells: a my_attention that calls the library, the attention class checked, a later answer."""
ANSWERS = {HELPER, OWN, LATER}


def found(ran, excused=frozenset()):
    return found_in_trace(LIBRARY_ATTENTION, ran, OWN, ANSWERS, set(excused))


def test_a_call_inside_an_answer_already_charged_is_excused_with_its_backward():
    """The check's own backward() runs the library's backward with no cell on the stack: it goes
    with the forward call, which my_attention (charged already) made."""
    ran = {SDPA: [(HELPER, OWN)], FORWARD: [(HELPER, OWN)], BACKWARD: [()]}
    assert found(ran, {HELPER}) == []
    assert found(ran) == [SDPA]   # my_attention was not charged: the class pays for what it calls


def test_a_call_of_the_answer_itself_is_never_excused():
    assert found({SDPA: [(OWN,)], BACKWARD: [()]}, {HELPER}) == [SDPA]
    assert found({SDPA: [(HELPER, OWN), (OWN,)]}, {HELPER}) == [SDPA]   # once through the helper, once itself


def test_a_backward_whose_forward_was_not_seen_is_the_answers():
    assert found({BACKWARD: [()]}, {HELPER}) == [SDPA]


def test_a_call_through_another_answer_that_was_not_charged_is_the_answers():
    assert found({FORWARD: [(LATER, OWN)], BACKWARD: [()]}, {HELPER}) == [SDPA]
    assert found({FORWARD: [(5,)]}, {HELPER}) == [SDPA]   # an ordinary cell: nobody else to charge
