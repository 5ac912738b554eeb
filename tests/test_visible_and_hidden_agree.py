"""The visible check a student runs refuses what the hidden check refuses, so that passing the
visible check never hides a 0: every answer of an assignment's audit bank that the grader fails
(each catalogued mistake, each library call) fails the visible test cell of its item, and every
correct alternative passes it. ``tests/test_audit.py`` holds the grader to the same bank.

Each bank answer is put into the solution notebook, whose code cells then run here as the grader
runs them (test cells and ``skip-grading`` cells left out), followed by the item's test cell. A
bank may list ``VISIBLE_GAPS``, ``{(grade_id, name): why}``, for a mistake that only shows on
hidden shapes; none does today.
"""

import pytest

import notebook_tools as tools
from autograder.commands import audit
from autograder.reading.course import Course, load_items

COURSE = Course(tools.REPO_ROOT)
ASSIGNMENTS = sorted(path.stem for path in (tools.REPO_ROOT / "autograder" / "checks" / "audit").glob("[0-9]*.py"))


def visible_failure(solution: dict, answer_id: str, source: str, grade_id: str) -> str | None:
    """What item ``grade_id``'s test cell says with ``source`` in answer cell ``answer_id``."""
    return tools.visible_failures(solution, [f"{grade_id}_test"], {answer_id: source})[f"{grade_id}_test"]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_visible_check_refuses_what_the_hidden_check_refuses(assignment):
    _, solution = audit.solution_of(COURSE, assignment)
    bank = audit.load_bank(COURSE, assignment, solution)
    answers = {item.grade_id: item.answer_id for item in load_items(COURSE, assignment)}
    refused = {grade_id: [(name, source) for name, source in by_name.items()]
               for grade_id, by_name in bank.mutants.items()}
    for grade_id, labelled in bank.library.items():
        refused.setdefault(grade_id, []).extend(labelled)
    problems, agreed = [], 0
    for grade_id, labelled in refused.items():
        for label, source in labelled:
            if visible_failure(solution, answers[grade_id], source, grade_id) is None \
                    and (grade_id, label) not in bank.visible_gaps:
                problems.append(f"{grade_id}: {label} passes the visible check; the grader refuses it")
            else:
                agreed += 1
    for grade_id, labelled in bank.alternatives.items():
        for label, source in labelled:
            failure = visible_failure(solution, answers[grade_id], source, grade_id)
            if failure is not None:
                problems.append(f"{grade_id}: the correct alternative {label!r} fails the visible check: "
                                f"{failure[:300]}")
            else:
                agreed += 1
    assert not problems, "\n".join(problems)
    print(f"{assignment}: the visible checks agree with the hidden ones on {agreed} bank answers")
