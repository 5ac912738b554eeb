"""Grading one submission and a whole class: preflight, run, judge.

The trusted process that runs this never executes student code: it reads notebooks as
data (:mod:`autograder.reading.preflight`), hands code and hidden inputs to the sandbox
(:mod:`autograder.running.runner`), and judges the tensors that come back against the reference
(:mod:`autograder.judging.judge`). The course folder, the assignment and the results have modules of their
own (:mod:`autograder.reading.course`, :mod:`autograder.reading.assignment`, :mod:`autograder.reading.results`).
"""

from __future__ import annotations

import contextlib
import queue
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from autograder.running import clocked, runner, sandbox
from autograder.reading.assignment import WITH_COURSE_CODE, Assignment
from autograder.reading.cells import answer_cells, answers
from autograder.reading.config import Autograder
from autograder.reading.course import Course
from autograder.reading.faults import log_fault
from autograder.reading.forbidden import absent_from_run
from autograder.judging.judge import judge_item
from autograder.reading.notebook_data import read_notebook
from autograder.reading.preflight import Preflight, preflight
from autograder.reading.results import ItemResult, SubmissionResult
from transformer_lm.forbidding import runtime_names


def holds_answers(cells: list[dict], release: list[dict]) -> bool:
    """Whether any answer cell of ``cells`` differs from the release's: the student wrote something."""
    blank = answers(release)
    return any(gid in blank and source.strip() != blank[gid].strip() for gid, source in answer_cells(cells))


def extra_notebooks(folder: Path, graded: set[str], assignment: Assignment, pres: dict[str, Preflight]) -> list[str]:
    """A flag for each notebook of the submission that was not graded (a copy, a renamed draft),
    saying when it holds answers while a graded notebook is blank, so that a TA looks at it."""
    flags = []
    blank = [nb for nb, pre in pres.items()
             if pre.notebook and not holds_answers(pre.notebook["cells"], assignment.release[nb])]
    for path in sorted(folder.glob("*.ipynb")) if folder.is_dir() else []:
        if path.name in graded:
            continue
        flag = f"Extra notebook {path.name!r} in the submission: it was not graded."
        data, problem = read_notebook(path)
        if not problem and any(holds_answers(data["cells"], cells) for cells in assignment.release.values()):
            flag += (f" It holds answers, while the graded {blank[0]}.ipynb is blank: the student may have worked "
                     f"in the copy; grade it by hand, or ask for the right file." if blank else " It holds answers.")
        flags.append(flag)
    return flags


def find_notebook(folder: Path, name: str, expected: set[str], flags: list[str]) -> Path | None:
    """The submitted notebook for ``name``; a single notebook under another name stands in
    for a single missing one (students rename files), with a flag."""
    path = folder / f"{name}.ipynb"
    if path.exists():
        return path
    others = sorted(p for p in folder.glob("*.ipynb") if p.stem not in expected) if folder.is_dir() else []
    if len(expected) == 1 and len(others) == 1:
        flags.append(f"The notebook is named {others[0].name!r}, not {name + '.ipynb'!r}; it was graded all the same.")
        return others[0]
    return None


def grade_notebook(assignment: Assignment, notebook: str, path: Path | None,
                   worker: runner.Worker) -> tuple[list[ItemResult], Preflight]:
    """Grades one submitted notebook (``path`` None when it is missing): preflight, run, compare.

    The first run checks the student's own answers by the checks that can cost points. When an
    item fails, a second run makes its checks that only explain (:class:`Explains`: a trace of what
    ran, which names the mistake); and when an item it builds on failed too, it checks the item
    again with the course's code in place of the answers below them (:func:`_late_items`), so that
    one mistake costs points once. A timed check that failed on its CPU time alone is timed again in
    that run, and the second figure decides (:func:`_timed_again`). A notebook whose items all pass
    needs no second run."""
    items = assignment.items[notebook]
    pre = preflight(path, assignment.release[notebook], items)
    run = None
    if not pre.fatal:
        explaining = {pid for item in items for pid in item.probes(explaining=True)}
        run = _run(assignment, pre, first_run_probes(assignment, items, pre), worker)
        failing, late_items = _late_items(assignment, notebook, pre, run)
        again = {pid for pid, gid in assignment.probe_item.items() if pid in assignment.stand_ins and gid in late_items
                 or pid in explaining and gid in failing - late_items} | _timed_again(assignment, run, failing)
        if again:
            run.merge(_run(assignment, pre, again, worker))
        pre.flags.extend(f"Tampering: {why}." for why in dict.fromkeys(run.tampering))
        pre.flags.extend(f"Refused: while it was graded, the notebook's code tried {what}, which a grading run does not "
                         "allow (a process, a thread or a memory map); the call raised PermissionError."
                         for what in dict.fromkeys(run.refused))
    results: dict[str, ItemResult] = {}
    for item in items:
        results[item.grade_id] = judge_item(item, notebook, assignment, pre, run, results)
    return list(results.values()), pre


def first_run_probes(assignment: Assignment, items: list, pre: Preflight) -> set[str]:
    """The probes of a notebook's first run: the checks that can cost points, of the items that
    preflight left to the run, on the student's own code (no stand-ins)."""
    ids = {i.grade_id for i in items} - set(pre.item_status)
    explaining = {pid for item in items for pid in item.probes(explaining=True)}
    return {pid for pid, gid in assignment.probe_item.items()
            if gid in ids and pid not in assignment.stand_ins and pid not in explaining}


def _run(assignment: Assignment, pre: Preflight, pids: set[str], worker: runner.Worker) -> runner.RunResult:
    """The runs of the probes ``pids`` of one notebook (those with stand-ins, with the course's code):
    one run for each set of forbidden calls, so that what an item forbids is absent from the run
    that checks it (a later item may use it); a run that holds a capped check runs under its cap
    from its first cell on; the records of its timed checks get the course's figures on the same
    inputs, in the same sandbox and under the same limits (:mod:`autograder.running.clocked`)."""
    forbids = {item.grade_id: item.forbids for items in assignment.items.values() for item in items}
    groups: dict[tuple[str, ...], set[str]] = {}
    for pid in pids:
        groups.setdefault(forbids[assignment.probe_item[pid]], set()).add(pid)
    result = runner.RunResult()
    for forbidden, group in sorted(groups.items()):
        cap = max(assignment.prepared[pid].memory_cap for pid in group)
        prepared = {pid: assignment.prepared[pid] for pid in assignment.probe_item if pid in group}
        answers = {pid: assignment.answers[assignment.probe_item[pid]] for pid in prepared}
        watch = {pid: sorted(runtime_names(forbidden)) for pid in prepared} if forbidden else {}
        stand_ins = {pid: assignment.stand_ins[pid] for pid in prepared if pid in assignment.stand_ins}
        code = {pid: assignment.course_code[assignment.probe_item[pid]] for pid in stand_ins}
        limits = runner.RunLimits(absent=absent_from_run(forbidden), memory_cap=cap)
        found = runner.run_submission(pre, prepared, answers, worker, watch, stand_ins, code, limits)
        _with_reference(assignment, found, worker, limits)
        result.merge(found)
    return result


def _with_reference(assignment: Assignment, found: runner.RunResult, worker: runner.Worker,
                    limits: runner.RunLimits) -> None:
    """Puts beside each timed record the course's figures on the same inputs, made in a sandbox of the class."""
    base = {pid: pid.removesuffix(WITH_COURSE_CODE) for pid, outcome in found.outcomes.items()
            if outcome.record and assignment.prepared[pid].clocked is not None}
    if not base:
        return
    figures = worker.course_figures.of(worker, {pid: assignment.prepared[pid] for pid in set(base.values())},
                                       assignment.reference_code, limits, runner.MOUNTS["out"])
    for pid, original in base.items():
        found.outcomes[pid].record = clocked.with_reference(found.outcomes[pid].record, figures[original])


def _timed_again(assignment: Assignment, run: runner.RunResult, failing: set[str]) -> set[str]:
    """The timed probes of the written items in ``failing`` whose verdict failed on its figure alone
    (:attr:`~transformer_lm.judging.Verdict.measured`). A moment of load can move one timing past
    its limit; timed once more, an honest answer loses the point only when both timings fail (the
    square of one's chance), while an answer that does the work it should skip fails both."""
    again = set()
    for pid, outcome in run.outcomes.items():
        prepared = assignment.prepared[pid]
        if assignment.probe_item[pid] in failing and prepared.clocked is not None and outcome.status == "ok" \
                and prepared.judge(outcome.record or {}, outcome.value, False).measured:
            again.add(pid)
    return again


def _late_items(assignment: Assignment, notebook: str, pre: Preflight,
                run: runner.RunResult) -> tuple[set[str], set[str]]:
    """The items written and failing on their own answers (judged by the checks that can cost
    points, as they will be, but noting nothing yet), and of those the items to check again with the
    course's code below them: those that build on an item failing too."""
    blank = answers(assignment.release[notebook])
    failing, written, earlier = set(), set(), {}
    for item in assignment.items[notebook]:
        gid, answer = item.grade_id, pre.answer(item.answer_id)
        if gid in pre.item_status or answer and all(pid in run.outcomes for pid in item.probes()):
            earlier[gid] = judge_item(item, notebook, assignment, pre, run, earlier, [])
        if gid not in earlier or earlier[gid].status != "passed":
            failing.add(gid)
        if gid not in pre.item_status and answer and answer.source.strip() != blank.get(item.answer_id, "").strip():
            written.add(gid)  # preflight's own status (missing, forbidden by name) is the item's own mistake
    return failing & written, {gid for gid in failing & written if set(assignment.below.get(gid, ())) & failing}


def grade_submission(course: Course, assignment: Assignment, student: str,
                     worker: runner.Worker) -> tuple[SubmissionResult, dict[str, Preflight]]:
    """Grades one student's submission; never raises for anything the submission contains."""
    folder = course.submission_folder(assignment.name, student)
    result = SubmissionResult(student, assignment.name, 0.0, 0.0, isolation=worker.isolation.name,
                              checks_version=assignment.checks_version)
    pres, graded = {}, set()
    for notebook in assignment.release:
        path = find_notebook(folder, notebook, set(assignment.release), result.flags)
        graded |= {path.name} if path else set()
        try:
            items, pres[notebook] = grade_notebook(assignment, notebook, path, worker)
        except Exception as error:  # noqa: BLE001 - the grader's own fault costs this notebook, not the class
            flag = log_fault(course.reports(assignment.name), student, f"grading {notebook}.ipynb", error)
            pres[notebook] = Preflight(fatal=flag)
            items = [judge_item(item, notebook, assignment, pres[notebook], None) for item in assignment.items[notebook]]
        result.items.extend(items)
        result.flags.extend(f"{notebook}: {flag}" for flag in pres[notebook].flags)
        if pres[notebook].fatal:
            result.unreadable.append(notebook)
            result.flags.append(f"{notebook}: not graded: {pres[notebook].fatal}")
    result.flags.extend(extra_notebooks(folder, graded, assignment, pres))
    result.total = sum(i.score for i in result.items)
    result.max_total = sum(i.max_score for i in result.items)
    return result, pres


def run_settings(settings: Autograder) -> runner.RunSettings:
    """The limits of one submission's run, from the course's settings."""
    return runner.RunSettings(cell_seconds=settings.cell_timeout, total_seconds=settings.total_timeout,
                              memory_bytes=settings.memory_bytes)


def grade_class(course: Course, assignment: Assignment, students: list[str], isolation: sandbox.Isolation,
                progress=None) -> list[tuple[SubmissionResult, dict[str, Preflight]]]:
    """Grades many submissions side by side (``course.settings.workers``), each worker with a warm
    sandbox of its own; results come back in student order."""
    count = max(1, min(course.settings.workers, len(students)))
    limits, figures = run_settings(course.settings), clocked.CourseFigures()
    with contextlib.ExitStack() as stack:
        idle = queue.SimpleQueue()
        for _ in range(count):
            idle.put(stack.enter_context(runner.Worker(limits, isolation, figures)))

        def one(student):
            worker = idle.get()
            try:
                outcome = grade_submission(course, assignment, student, worker)
            finally:
                idle.put(worker)
            if progress:
                progress(student)
            return outcome

        with ThreadPoolExecutor(max_workers=count) as pool:
            return list(pool.map(one, students))
