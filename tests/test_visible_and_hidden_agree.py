"""The visible check a student runs says what the hidden check says, so that passing the visible
check never hides a 0 and a refusal in the notebook is never vaguer than the grader's: every
answer of an assignment's audit bank that the grader fails (each catalogued mistake, each library
call) fails the visible test cell of its item, each catalogued mistake is named there as the
grader names it ("Likely mistake: <its title>."), and every correct alternative passes.
``tests/test_audit.py`` holds the grader to the same bank: it names every mutant but those of the
bank's ``KNOWN_GAPS``.

Each bank answer is put into the solution notebook, whose code cells then run here as the grader
runs them (test cells and ``skip-grading`` cells left out), followed by the item's test cell. A
bank may list ``VISIBLE_GAPS``, ``{(grade_id, name): why}``, for a mistake that only shows on
hidden shapes; none does today.

What the course's package shows in those cells, and in the blank release's, fits nbgrader's
Validate: every line it prints, and every line of a refusal as Jupyter renders it, is at most
``WIDTH`` characters. A group of checks says how many of its cases pass, and says "Correct" only
once all of them have.
"""

import functools

import pytest

import notebook_tools as tools
from assignments import BY_NAME
from autograder.commands import audit
from autograder.reading.course import Course, load_items
from transformer_lm import catalog, checks, forbidding, style
from transformer_lm.judging import CheckFailed
from transformer_lm.verdict_texts import WIDTH

COURSE = Course(tools.REPO_ROOT)
ASSIGNMENTS = sorted(path.stem for path in (tools.REPO_ROOT / "autograder" / "checks" / "audit").glob("[0-9]*.py"))


@pytest.fixture
def printed(monkeypatch) -> list[str]:
    """The lines that the course's package prints in a test cell: its modules that print look
    ``print`` up in their own namespace before the built-in one."""
    lines = []

    def record(*values, sep=" ", **_):
        lines.extend(sep.join(map(str, values)).split("\n"))

    for module in (checks, forbidding, style):
        monkeypatch.setattr(module, "print", record, raising=False)
    return lines


def too_wide(said: str | None, printed: list[str]) -> list[str]:
    """The lines wider than ``WIDTH`` of what a test cell showed from the course's package: what it
    printed, then its refusal ``said`` as Jupyter renders it (the frames of a student's own code,
    which follow when that code raised, are the student's lines, not the check's)."""
    rendered = tools.strip_ansi("\n".join(CheckFailed(said)._render_traceback_())).split("\n") if said else []
    return [line for line in printed + rendered if len(line) > WIDTH]


@functools.cache
def bank_of(assignment: str) -> tuple[dict, audit.Bank, dict[str, str]]:
    """The assignment's solution notebook, its audit bank, and each item's answer cell."""
    _, solution = audit.solution_of(COURSE, assignment)
    answers = {item.grade_id: item.answer_id for item in load_items(COURSE, assignment)}
    return solution, audit.load_bank(COURSE, assignment, solution), answers


ITEMS = [(assignment, grade_id) for assignment in ASSIGNMENTS
         for grade_id in sorted({*bank_of(assignment)[1].mutants, *bank_of(assignment)[1].alternatives,
                                 *bank_of(assignment)[1].library})]
"""Each item of a bank, a test of its own: assignment 05's items take minutes together."""


@pytest.mark.parametrize("assignment, grade_id", ITEMS)
def test_the_visible_check_refuses_and_names_what_the_hidden_check_does(assignment, grade_id, printed):
    solution, bank, answers = bank_of(assignment)
    problems = []

    def visible_failure(source: str) -> str | None:
        """What the item's test cell says with ``source`` in its answer cell; a line too wide is a problem."""
        printed.clear()
        said = tools.visible_failures(solution, [f"{grade_id}_test"], {answers[grade_id]: source})[f"{grade_id}_test"]
        problems.extend(f"a line wider than {WIDTH}: {line!r}" for line in too_wide(said, printed))
        return said

    refused = [(name, source, audit.mistake_of(name)) for name, source in bank.mutants.get(grade_id, {}).items()]
    refused += [(label, source, None) for label, source in bank.library.get(grade_id, [])]
    for label, source, mistake in refused:
        said = visible_failure(source)
        if (grade_id, label) in bank.visible_gaps:
            continue
        if said is None:
            problems.append(f"{label} passes the visible check; the grader refuses it")
        elif mistake and (grade_id, label) not in bank.known_gaps and f"Likely mistake: {mistake.title}." not in said:
            problems.append(f"the grader names {label}, the visible check does not: {said[:300]}")
    alternatives = bank.alternatives.get(grade_id, [])
    for label, source in alternatives:
        failure = visible_failure(source)
        if failure is not None:
            problems.append(f"the correct alternative {label!r} fails the visible check: {failure[:300]}")
    assert not problems, "\n".join(problems)
    print(f"{grade_id}: the visible check agrees with the hidden one on {len(refused) + len(alternatives)} "
          "bank answers")


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_blank_release_says_todo_in_lines_that_fit(assignment, printed):
    row = BY_NAME[assignment]
    said = tools.visible_failures(tools.read(row.release_path), list(row.test_ids))
    wide = [line for text in said.values() for line in too_wide(text, printed)]
    assert not wide, wide


def over_the_first_dimension(x):
    """A softmax over the first dimension: right on a vector, where the first dimension is the last."""
    exps = (x - x.amax(dim=0, keepdim=True)).exp()
    return exps / exps.sum(dim=0, keepdim=True)


def unshifted(x):
    """A softmax that never shifts its scores: right until a score's exp overflows."""
    return x.exp() / x.exp().sum(dim=-1, keepdim=True)


def softmax_stable(x):
    exps = (x - x.amax(dim=-1, keepdim=True)).exp()
    return exps / exps.sum(dim=-1, keepdim=True)


@pytest.mark.parametrize("answer, says", [
    (over_the_first_dimension, "softmax_stable: 1 of 3 cases pass; cases 2 and 3 fail; case 2:\n"),
    (unshifted, "softmax_stable: 2 of 3 cases pass; case 3 fails:\n"),
])
def test_a_case_that_fails_is_counted_and_nothing_is_called_correct(answer, says, capsys):
    with pytest.raises(CheckFailed) as failed:
        checks.check("softmax_stable", softmax_stable=answer)
    assert str(failed.value).startswith(says), str(failed.value)
    assert "Correct" not in capsys.readouterr().out


def test_a_refusal_shows_the_mistake_of_a_later_case_when_an_earlier_one_names_none():
    with pytest.raises(CheckFailed) as failed:
        checks.check("softmax_stable", softmax_stable=over_the_first_dimension)
    assert failed.value.mistake is catalog.BY_NAME["softmax_wrong_dim"]
    assert "Likely mistake: softmax over the wrong dimension." in str(failed.value)


def test_a_correct_answer_is_called_correct_once_every_case_passed(capsys):
    checks.check("softmax_stable", softmax_stable)
    assert capsys.readouterr().out == ("softmax_stable: 3 of 3 cases pass.\n"
                                       "softmax_stable: Correct: outputs and gradients match the reference.\n")


def test_a_long_refusal_is_shown_in_lines_that_fit_with_every_word_kept():
    message = "an overflow. " * 20 + "\n  expected [" + ", ".join(["0.0264348"] * 12) + "]\n" + "x" * 100
    rendered = tools.strip_ansi("\n".join(CheckFailed(message)._render_traceback_()))
    assert max(len(line) for line in rendered.split("\n")) <= WIDTH, rendered
    assert "".join(rendered.split()) == "".join(f"CheckFailed: {message}".split())
