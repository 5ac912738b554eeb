"""An item's result from what its run gave back: the prepared checks' verdicts, what ran (forbidden
calls, tampering), one mistake charged once, and PEP 8's deduction. Nothing here runs student code:
it reads the run's outcomes as data."""

from __future__ import annotations

from dataclasses import replace

from autograder.running import runner
from autograder.reading.assignment import WITH_COURSE_CODE, Assignment
from autograder.reading.forbidden import found_in_trace
from autograder.reading.messages import ERRORS, ON_COURSE_CODE, OUTCOME, render
from autograder.reading.preflight import Preflight
from autograder.reading.results import ItemResult
from autograder.reading.spec import Explains, Item
from autograder.reading.syntax import syntax_text
from transformer_lm.forbidding import forbidden_name
from transformer_lm.sandboxed.call_trace import COURSE_CODE_CELL
from transformer_lm.style import style_problems


def judge_item(item: Item, notebook: str, assignment: Assignment, pre: Preflight,
               run: runner.RunResult | None, earlier: dict[str, ItemResult] | None = None,
               flags: list[str] | None = None) -> ItemResult:
    """One item's result from its preflight status or its probe outcomes; ``earlier`` holds the
    results of the items before it in its notebook (one mistake costs points once). What it notes
    for the instructor goes to ``flags`` (default: the notebook's, ``pre.flags``)."""
    flags = pre.flags if flags is None else flags
    base = dict(grade_id=item.grade_id, notebook=notebook, max_score=item.points, score=0.0, answer=item.answer_id)
    if pre.fatal:
        status = "missing" if pre.fatal == OUTCOME["no_notebook"] else "error"
        return ItemResult(status=status, message=pre.fatal, **base)
    if item.grade_id in pre.item_status:
        status, message = pre.item_status[item.grade_id]
        return ItemResult(status=status, message=message, **base)
    answer = pre.answer(item.answer_id)
    charged = {pre.answer(other.answer).index for other in (earlier or {}).values()
               if other.status == "forbidden" and pre.answer(other.answer)}
    result = _judge_probes(item, [f"{item.grade_id}.{i}" for i in range(len(item.checks))], assignment, pre, run,
                           ItemResult(status="passed", message=OUTCOME["passed"], **base), charged, flags)
    if result.status != "passed":
        result = _charged_once(item, result, assignment, pre, run, earlier or {}, flags)
    if result.status != "passed":
        return result
    result.score = item.points
    unsure = pre.unsure.get(item.grade_id)
    if unsure is not None and result.message == OUTCOME["passed"]:
        result.message = render(OUTCOME["passed_unsure"], line=unsure.line, calls=unsure.name)
    problems = style_problems(answer.source) if item.style_deduction else []
    if problems:
        result.score = max(0.0, item.points - item.style_deduction)
        result.deduction = f"pep8: -{item.style_deduction:g} point ({'; '.join(problems[:5])})"
    return result


def _judge_probes(item: Item, pids: list[str], assignment: Assignment, pre: Preflight, run: runner.RunResult,
                  passed: ItemResult, charged: set[int], flags: list[str]) -> ItemResult:
    """``passed`` when every probe of ``pids`` (one per check of the item, in order) passes;
    otherwise the first problem, as a result, with every graded check that failed, numbered as
    :attr:`Item.check_numbers` numbers them (each is judged, so that the audit can tell which checks
    a mistake needs). A check that only explains (:class:`Explains`) never fails the item: its
    failure names the mistake of a failure found otherwise. ``charged``: the answer cells of
    earlier items charged with a forbidden call; what the instructor should know (a forbidden
    call) is added to ``flags``."""
    answer = pre.answer(item.answer_id)
    answer_cells = {cell.index for cell in pre.cells if cell.role == "answer"} | {COURSE_CODE_CELL}
    failed = replace(passed, status="failed")
    explanation = None
    first = None
    failing = []
    for check, number, pid in zip(item.checks, item.check_numbers, pids):
        if isinstance(check, Explains) and pid not in run.outcomes:
            continue   # made only for an item that failed (grading.grade_notebook)
        outcome = run.outcomes[pid]
        forbidden = _forbidden_call(item, outcome, answer.index if answer else None, answer_cells, charged, failed,
                                    flags)
        if forbidden is not None and forbidden.status == "forbidden":
            return forbidden
        problem = forbidden or _probe_problem(item, pid, outcome, assignment, pre, run, failed)
        if problem is None:
            continue
        if isinstance(check, Explains) and forbidden is None:
            explanation = explanation or (problem if problem.status == "failed" else None)
            continue
        first = first or problem
        if number not in failing:
            failing.append(number)
    if first is None:
        return passed
    if explanation is not None and first.status in ("failed", "error", "killed"):
        first = replace(first, status="failed", message=f"{first.message} {explanation.message}",
                        hint=explanation.hint or first.hint, mistake=explanation.mistake or first.mistake)
    return replace(first, failed_checks=failing)


def _forbidden_call(item: Item, outcome: runner.ProbeOutcome, own: int | None, answer_cells: set[int],
                    charged: set[int], failed: ItemResult, flags: list[str]) -> ItemResult | None:
    """A probe's forbidden call, as a result: ``forbidden`` (with a flag for the instructor) when this
    item's answer made it, seen in what ran or met by its absence; a failure when the absent call was
    made inside an earlier answer already charged with it (the course's stand-in for that answer may
    clear it: one mistake costs points once); None when there was none."""
    used = found_in_trace(item.forbids, outcome.ran, own, answer_cells, charged | {COURSE_CODE_CELL})
    if used:
        flag = (f"Forbidden call: while answer {item.answer_id!r} was checked, it ran {', '.join(used)} "
                f"(seen in what ran, not in its text).")
        if flag not in flags:
            flags.append(flag)
        return replace(failed, status="forbidden", message=render(OUTCOME["forbidden_ran"], calls=", ".join(used)))
    if outcome.status != "forbidden":
        return None
    owner = next((cell for cell in outcome.absent_from if cell in answer_cells), None)
    if owner in charged and owner != own:
        return replace(failed, message=render(OUTCOME["forbidden_earlier"]))
    flag = (f"Forbidden call: while answer {item.answer_id!r} was checked, it called a library function that "
            "the item forbids, which is absent from the run that checks it.")
    if flag not in flags:
        flags.append(flag)
    names = sorted({forbidden_name(path) for path in item.forbids})
    return replace(failed, status="forbidden", message=render(OUTCOME["forbidden_absent"], calls=" or ".join(names)))


def _probe_problem(item: Item, pid: str, outcome: runner.ProbeOutcome, assignment: Assignment, pre: Preflight,
                   run: runner.RunResult, failed: ItemResult) -> ItemResult | None:
    """What is wrong with one probe's outcome, as a result; None when it passed."""
    answer = pre.answer(item.answer_id)
    prepared = assignment.prepared[pid]
    if outcome.status == "todo":
        return replace(failed, message=OUTCOME["not_written"])
    if outcome.status != "ok":
        problem = run.cell_problems.get(answer.index) if answer else None
        message = outcome.message
        if prepared.on_error and outcome.status in ("error", "killed"):
            return replace(failed, message=f"{prepared.on_error} ({outcome.status}: {message})")
        if problem and outcome.status == "error" and "Your answer cell" not in message:
            message = ERRORS["cell_failed"] + (syntax_text(problem, answer.source) or problem)
        mistake = prepared.raised.get(outcome.exception) if outcome.exception else None   # its twin raises the same
        named = {"mistake": mistake.title, "hint": mistake.hint_in()} if mistake else {}
        return replace(failed, status=outcome.status, message=message, **named)
    try:
        verdict = prepared.judge(outcome.record or {}, outcome.value, False)
    except Exception:  # noqa: BLE001 - malformed results are the submission's error
        return replace(failed, status="error", message=ERRORS["uncompared"])
    if not verdict.passed:
        return replace(failed, message=verdict.message, hint=verdict.hint,
                       mistake=verdict.mistake.title if verdict.mistake else None)
    return None


def _charged_once(item: Item, result: ItemResult, assignment: Assignment, pre: Preflight, run: runner.RunResult,
                  earlier: dict[str, ItemResult], flags: list[str]) -> ItemResult:
    """A failed item's result once a mistake already charged elsewhere is taken out of it.

    When an item it builds on did not pass, the item is judged by the probes that ran with the
    course's code in their place. When an earlier item of the same answer failed by a catalogued
    mistake and this one fails by exactly that mistake (its record is the reference's with that
    one mistake), this step is right and keeps its points."""
    if result.status == "forbidden":
        return result
    below = [gid for gid in assignment.below.get(item.grade_id, []) if gid in earlier
             and earlier[gid].status != "passed"]
    if below:
        pids = [f"{item.grade_id}.{i}{WITH_COURSE_CODE}" for i in range(len(item.checks))]
        if not all(pid in run.outcomes for pid in pids):  # not checked again: the answer is the release's
            return result
        *others, last = assignment.stand_ins_shown(pids[0])
        names = f"{', '.join(others)} and {last}" if others else last
        where = " and ".join(below)
        course = _judge_probes(item, pids, assignment, pre, run, replace(
            result, status="passed", hint="", mistake=None,
            message=render(OUTCOME["passed_on_course_code"], stand_ins=names, below=where)), set(), flags)
        if course.status == "failed":
            course.message = render(ON_COURSE_CODE, stand_ins=names) + course.message
        return course if course.status in ("passed", "failed") else result
    charged = next((other for other in earlier.values() if other.answer == item.answer_id
                    and other.status == "failed" and result.mistake and other.mistake == result.mistake), None)
    if charged and result.status == "failed":
        return replace(result, status="passed", hint="", mistake=None,
                       message=render(OUTCOME["charged_once"], item=charged.grade_id, mistake=result.mistake))
    return result
