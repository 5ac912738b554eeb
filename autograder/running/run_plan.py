"""The plan of a submission's run, which the harness follows in the sandbox: the code cells to run,
each answer cell followed by the probes that check it, the probes that run later with the course's
code (in stages), and the probes' hidden inputs, which travel apart from the plan."""

from __future__ import annotations

import torch

from autograder.reading.preflight import Preflight
from transformer_lm.prepared import Prepared
from transformer_lm.sandboxed import wire


def stages_of(late: list[str], course_code: dict[str, dict]) -> list[list[str]]:
    """The late probes in stages: each stage the probes (in order) that run with the same course's
    code, as consecutive probes of one item do."""
    stages: list[list[str]] = []
    for pid in late:
        if stages and course_code[stages[-1][0]] is course_code[pid]:
            stages[-1].append(pid)
        else:
            stages.append([pid])
    return stages


def plan_of(pre: Preflight, prepared: dict[str, Prepared], probe_cells: dict[str, str],
            stand_ins: dict[str, list[str]] | None = None,
            course_code: dict[str, dict] | None = None) -> tuple[dict, dict[str, torch.Tensor]]:
    """The harness's plan for the code cells of a preflighted notebook (sent to the sandbox as JSON)
    and the probes' hidden inputs.

    Each answer cell is followed by the probes that check it. A cell that does not run (a test
    cell, a demonstration) keeps its place, with no source, when probes follow it. Probes with
    ``stand_ins`` come after the last cell, in ``late``, and in ``stages`` by their course's code.
    A timed probe's inputs are not among the hidden inputs: the server hands them over window by
    window (:mod:`autograder.running.clocked`).
    """
    cells = pre.code_cells
    stand_ins, course_code = stand_ins or {}, course_code or {}
    answer_index = {c.grade_id: c.index for c in cells if c.role == "answer"}
    late = [pid for pid in prepared if pid in stand_ins]
    plan = {"cells": [], "calls": {}, "skip_cells": [], "skip_probes": [], "late": late,
            "stages": stages_of(late, course_code)}
    for cell in cells:
        runs = cell.role in ("answer", "readonly", "other") and not cell.skip
        probes_here = [pid for pid, gid in probe_cells.items()
                       if answer_index.get(gid) == cell.index and pid not in stand_ins]
        if runs or probes_here:
            plan["cells"].append({"index": cell.index, "source": cell.source if runs else "", "probes": probes_here})
            if not runs:
                plan["skip_cells"].append(cell.index)
    if not late:  # no probe follows the last cell with probes: the cells after it change nothing
        while plan["cells"] and not plan["cells"][-1]["probes"]:
            plan["cells"].pop()
    tensors, first_of = {}, {}
    for pid, prep in prepared.items():
        plan["calls"][pid] = prep.call.plan()
        if prep.memory_cap:  # only the kernel's cap and the values judge it: no trace slows it down
            plan["calls"][pid]["untraced"] = True
        if pid in stand_ins:
            plan["calls"][pid]["stand_ins"] = stand_ins[pid]
        if prep.clocked is not None:  # timed by the server: its inputs reach the run only in its windows
            plan["calls"][pid].update(untraced=True, windows=prep.clocked.windows)
            continue
        first = first_of.setdefault(id(prep), pid)
        if first != pid:  # the same check made again (with stand-ins): its tensors travel once
            plan["calls"][pid]["tensors_of"] = first
            continue
        tensors.update({wire.tensor_key(pid, name): t.contiguous() for name, t in prep.call.tensors.items()})
    return plan, tensors
