"""The visible test cells of ``tests/outside_truth_class.py``'s notebooks, run as a student runs them:
passing visibly never hides a 0, and honest code passes.

Apart from ``tests/test_outside_truth.py``, which grades the class, because these tests share no
fixture: each is a unit of its own for ``make test``'s workers (``tests/scheduling.py``)."""

import pytest

import notebook_tools as tools
import outside_truth_class as truth

GOOD = truth.solution()
VISIBLE = truth.honest(GOOD)[::5] + [s for s in truth.attacks(GOOD) if not s.student.startswith(("a20_", "a21_"))]
"""Seven honest notebooks of different styles, and every attack but those on memory in one mode (``a20_``,
``a21_``: not run here)."""


@pytest.mark.parametrize("student", [s.student for s in VISIBLE])
def test_the_visible_checks_refuse_what_the_grader_refuses_and_keep_honest_code(student):
    """An attack fails the test cell of every item the grader takes from it (the memory items under the
    grader's cap, in a forked process); only those cells are run for it, since what the others say is not
    what this test holds it to. Honest code passes every test cell."""
    case = next(s for s in VISIBLE if s.student == student)
    tests = [f"{item}_test" for item in truth.ITEMS if not case.lost or item in case.lost]
    said = tools.visible_failures(case.notebook, tests)
    refused = {test.removesuffix("_test") for test, failure in said.items() if failure}
    if case.lost:
        assert case.lost <= refused, {test: said[test] for test in said if test.removesuffix("_test") in case.lost}
    else:
        assert not refused, said
