"""An item's result from what its run gave back: the prepared checks' verdicts, what ran (forbidden
calls, tampering), one mistake charged once, and PEP 8's deduction. Nothing here runs student code:
it reads the run's outcomes as data."""

from __future__ import annotations

from dataclasses import replace

from autograder import runner
from autograder.assignment import WITH_COURSE_CODE, Assignment
from autograder.forbidden import found_by_witness, found_in_trace
from autograder.preflight import Preflight
from autograder.results import NOT_WRITTEN, ItemResult
from autograder.spec import Item
from transformer_lm.sandboxed.call_trace import COURSE_CODE_CELL, UNTRACED
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
        status = "missing" if pre.fatal.startswith("No notebook") else "error"
        return ItemResult(status=status, message=pre.fatal, **base)
    if item.grade_id in pre.item_status:
        status, message = pre.item_status[item.grade_id]
        return ItemResult(status=status, message=message, **base)
    answer = pre.answer(item.answer_id)
    charged = {pre.answer(other.answer).index for other in (earlier or {}).values()
               if other.status == "forbidden" and pre.answer(other.answer)}
    result = _judge_probes(item, [f"{item.grade_id}.{i}" for i in range(len(item.checks))], assignment, pre, run,
                           ItemResult(status="passed", message="All hidden checks passed.", **base), charged, flags)
    if result.status != "passed":
        result = _charged_once(item, result, assignment, pre, run, earlier or {}, flags)
    if result.status != "passed":
        return result
    result.score = item.points
    problems = style_problems(answer.source) if item.style_deduction else []
    if problems:
        result.score = max(0.0, item.points - item.style_deduction)
        result.deduction = f"pep8: -{item.style_deduction:g} point ({'; '.join(problems[:5])})"
    return result


def _judge_probes(item: Item, pids: list[str], assignment: Assignment, pre: Preflight, run: runner.RunResult,
                  passed: ItemResult, charged: set[int], flags: list[str]) -> ItemResult:
    """``passed`` when every probe of ``pids`` passes; otherwise the first problem, as a result.
    ``charged``: the answer cells of earlier items charged with a forbidden call; what the
    instructor should know (tampering, a forbidden call) is added to ``flags``."""
    answer = pre.answer(item.answer_id)
    answer_cells = {cell.index for cell in pre.cells if cell.role == "answer"} | {COURSE_CODE_CELL}
    failed = replace(passed, status="failed")
    for pid in pids:
        outcome = run.outcomes[pid]
        if UNTRACED in outcome.ran:
            note = (f"Tampering: while answer {item.answer_id!r} was checked, a torch function made a tensor while no "
                    "operator passed the grader's trace: the dispatcher's tracing was turned off around it.")
            if note not in flags:
                flags.append(note)
            return replace(failed, status="tampered", message="While it was checked, the answer computed with "
                           "PyTorch's dispatcher hidden from the grader, which then cannot see what it ran or held.")
        used = found_in_trace(item.forbids, outcome.ran, answer.index if answer else None, answer_cells,
                              charged | {COURSE_CODE_CELL})
        unseen = [] if outcome.ran else found_by_witness(item.forbids, outcome.witnessed)
        note = (f"Tampering: while answer {item.answer_id!r} was checked, PyTorch's profiler saw {', '.join(unseen)} "
                f"run, and the grader's trace saw nothing: the trace was turned off.")
        if unseen and note not in flags:
            flags.append(note)
        if used or unseen:
            used = used or unseen
            flag = (f"Forbidden call: while answer {item.answer_id!r} was checked, it ran {', '.join(used)} "
                    f"(seen in what ran, not in its text).")
            if flag not in flags:
                flags.append(flag)
            return replace(failed, status="forbidden", message=f"While it was checked, the answer ran "
                           f"{', '.join(used)}, the library version of what this exercise asks you to write yourself "
                           "(the grader sees the operations that run, whatever name reached them).")
        if outcome.status == "todo":
            return replace(failed, message=f"{NOT_WRITTEN}: the answer still raises NotImplementedError.")
        if outcome.status != "ok":
            problem = run.cell_problems.get(answer.index) if answer else None
            message = outcome.message
            if problem and outcome.status == "error" and "Your answer cell" not in message:
                message = f"Your answer cell failed: {problem}"
            return replace(failed, status=outcome.status, message=message)
        try:
            verdict = assignment.prepared[pid].judge(outcome.record or {}, outcome.value, False)
        except Exception as error:  # noqa: BLE001 - malformed results are the submission's error
            return replace(failed, status="error", message=f"The result could not be compared: {error}")
        if not verdict.passed:
            return replace(failed, message=verdict.message, hint=verdict.hint,
                           mistake=verdict.mistake.title if verdict.mistake else None)
    return passed


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
        *others, last = assignment.stand_ins[pids[0]]
        names = f"{', '.join(others)} and {last}" if others else last
        where = " and ".join(below)
        course = _judge_probes(item, pids, assignment, pre, run, replace(
            result, status="passed", hint="", mistake=None,
            message=f"All hidden checks passed, run on the course's {names} in place of yours, because {where} did "
                    f"not pass and lost its points there (one mistake costs points once)."), set(), flags)
        if course.status == "failed":
            course.message = f"With the course's {names} in place of yours: {course.message}"
        return course if course.status in ("passed", "failed") else result
    charged = next((other for other in earlier.values() if other.answer == item.answer_id
                    and other.status == "failed" and result.mistake and other.mistake == result.mistake), None)
    if charged and result.status == "failed":
        return replace(result, status="passed", hint="", mistake=None,
                       message=f"All else is right: this item fails only by the mistake charged in "
                               f"{charged.grade_id} ({result.mistake}), and one mistake costs points once.")
    return result
