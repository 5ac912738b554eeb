"""Preflight: read a submitted notebook as data and make it safe and complete to run.

Nothing here runs student code, and the notebook is read as untrusted data
(:mod:`autograder.reading.notebook_data`: every field nbformat types is checked, each repair flagged).
The release notebook (what the student was given) is the
skeleton: every locked cell (test cells, read-only cells) comes from it, whatever the
submission did to them; answer cells keep the student's code but get the release's nbgrader
metadata back; graded cells that are missing are restored as their release stubs; a pasted
duplicate of a graded cell is kept as an ordinary cell. Each repair is reported.

Then every answer cell's code is read for the library calls its item forbids, each name resolved to
what the notebook binds it to (:mod:`transformer_lm.library_calls`): a call of a forbidden object
is the ``forbidden`` status, with an early, named message; a use the reading cannot settle costs
nothing and is told with the item's result, since the run, from which the forbidden calls are
absent, decides. Nothing here accuses a submission of
tampering: a notebook's text is not evidence of it (honest code names torch.compile in a comment,
or a library class in a type hint). Tampering is flagged only on what a run did (the run's
guard, a frame the trusted side cannot read, a removed capability the run reached for).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path

from autograder.reading.cells import grade_ids, marks, role, source_text
from autograder.reading.messages import OUTCOME, render
from autograder.reading.notebook_data import read_notebook, shown
from transformer_lm.forbidding import forbidden_objects
from transformer_lm.library_calls import Use, forbidden_uses, notebook_bindings

SKIP_TAG = "skip-grading"


@dataclass
class Cell:
    """One cell of the notebook to run, with what the grader needs to know about it."""

    index: int
    cell_type: str
    source: str
    grade_id: str | None = None
    role: str = "other"  # "answer", "test", "readonly", "manual" (written answer) or "other"
    skip: bool = False  # a demonstration cell the grader does not run
    node: dict = field(default_factory=dict, repr=False)


@dataclass
class Preflight:
    """A notebook made ready to run, or the reason it cannot be (``fatal``)."""

    cells: list[Cell] = field(default_factory=list)
    notebook: dict | None = None
    flags: list[str] = field(default_factory=list)
    fatal: str | None = None
    item_status: dict[str, tuple[str, str]] = field(default_factory=dict)
    unsure: dict[str, Use] = field(default_factory=dict)  # a use of a forbidden call the reading could not settle

    def answer(self, grade_id: str) -> Cell | None:
        return next((c for c in self.cells if c.grade_id == grade_id and c.role == "answer"), None)

    @property
    def code_cells(self) -> list[Cell]:
        return [c for c in self.cells if c.cell_type == "code"]


def _grading_fields(cell: dict) -> dict:
    """The nbgrader fields that decide how a cell is graded (nbgrader's checksums are not among them)."""
    return {k: v for k, v in marks(cell).items() if k in ("grade", "solution", "locked", "grade_id", "points", "task")}


def _restore(student: list[dict], release: list[dict], flags: list[str]) -> tuple[list[dict], set[str]]:
    """The student's cells, with locked cells and metadata restored from the release, and the
    grade_ids of the graded cells that were missing (restored as the release has them)."""
    by_id = {marks(c)["grade_id"]: c for c in release if marks(c).get("grade_id")}
    by_cell_id = {c.get("id"): gid for gid, c in by_id.items() if c.get("id")}
    present = grade_ids(student)
    seen: set[str] = set()
    cells: list[dict] = []
    for position, cell in enumerate(student):
        cell = copy.deepcopy(cell)
        grade_id = marks(cell).get("grade_id")
        if grade_id is None and by_cell_id.get(cell.get("id")) not in (None, *present, *seen):
            grade_id = by_cell_id[cell["id"]]  # its nbgrader metadata was lost (damaged): its cell id says which
            flags.append(f"Cell {position + 1} had lost its nbgrader metadata; its cell id shows it is {grade_id!r}.")
            cell["metadata"]["nbgrader"] = {"grade_id": grade_id}
        if grade_id is None:
            cells.append(cell)
            continue
        if grade_id not in by_id or grade_id in seen:
            reason = "a copy of a graded cell (pasted?)" if grade_id in seen else "an id the assignment does not have"
            flags.append(f"Cell {shown(grade_id)} is {reason}; it runs as an ordinary cell and is not graded.")
            cell.get("metadata", {}).pop("nbgrader", None)
            cells.append(cell)
            continue
        seen.add(grade_id)
        original = by_id[grade_id]
        if role(original) in ("test", "readonly"):
            if source_text(cell.get("source", "")) != source_text(original["source"]) or cell.get("cell_type") != original["cell_type"]:
                flags.append(f"The locked cell {grade_id!r} was changed; it was restored from the release.")
            cells.append(copy.deepcopy(original))
            continue
        if _grading_fields(cell) != _grading_fields(original) or cell.get("cell_type") != original["cell_type"]:
            flags.append(f"The nbgrader metadata of {grade_id!r} was changed; it was restored from the release.")
        cell["metadata"] = {**(cell.get("metadata") or {}), "nbgrader": copy.deepcopy(marks(original))}
        cell["cell_type"] = original["cell_type"]
        cells.append(cell)
    # Graded cells the submission lost come back as the release has them, after their predecessor.
    lost = set()
    for position, original in enumerate(release):
        grade_id = marks(original).get("grade_id")
        if not grade_id or grade_id in seen:
            continue
        earlier = {marks(c).get("grade_id") for c in release[:position]} - {None}
        at = max((i + 1 for i, c in enumerate(cells) if marks(c).get("grade_id") in earlier), default=0)
        cells.insert(at, copy.deepcopy(original))
        seen.add(grade_id)
        flags.append(f"The graded cell {grade_id!r} was missing; it was restored from the release.")
        lost.add(grade_id)
    return cells, lost


def preflight(path: Path | None, release_cells: list[dict], items) -> Preflight:
    """Reads and repairs one submitted notebook against its release, for the given items."""
    if path is None:
        return Preflight(fatal=OUTCOME["no_notebook"])
    result = Preflight()
    data, fatal = read_notebook(path, result.flags)
    if fatal:
        return Preflight(fatal=fatal)
    restored, lost = _restore(data["cells"], release_cells, result.flags)
    release_skip = {marks(c).get("grade_id") for c in release_cells
                    if SKIP_TAG in (c.get("metadata", {}).get("tags") or [])}
    for index, node in enumerate(restored):
        meta = marks(node)
        tags = node.get("metadata", {}).get("tags") or []
        grade_id = meta.get("grade_id")
        result.cells.append(Cell(index, node["cell_type"], source_text(node.get("source", "")), grade_id, role(node),
                                 SKIP_TAG in tags or (grade_id is not None and grade_id in release_skip), node))
    result.notebook = {**data, "cells": restored}
    notebook = notebook_bindings([cell.source for cell in result.code_cells])
    for item in items:
        answer = result.answer(item.answer_id)
        if answer is None:
            continue
        if item.answer_id in lost:
            result.item_status[item.grade_id] = ("missing", OUTCOME["no_cell"])
            continue
        uses = forbidden_uses(answer.source, forbidden_objects(item.forbids), notebook) if item.forbids else []
        certain = sorted({use.name for use in uses if use.certain})
        if certain:
            result.item_status[item.grade_id] = (
                "forbidden", render(OUTCOME["forbidden_text"], calls=", ".join(certain)))
        elif uses:
            result.unsure[item.grade_id] = uses[0]
    return result
