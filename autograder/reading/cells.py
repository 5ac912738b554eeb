"""nbgrader's marks on a notebook's cells, read the same way everywhere.

nbgrader keeps them in a cell's ``metadata["nbgrader"]``: ``grade_id`` names the cell,
``solution`` marks an answer, ``grade`` a graded cell (a test, or with ``solution`` a written answer
graded by hand), ``locked`` a cell students may not change, ``points`` what it is worth. A
submitted notebook is data a student may have written by hand, so every reader here takes a cell
or a metadata of the wrong type as a cell with no marks. Cells are nbformat's nodes or plain dicts.
"""

from __future__ import annotations


def source_text(source) -> str:
    """A cell's source as one string (nbformat keeps it as a string or a list of lines)."""
    return "".join(source) if isinstance(source, list) else str(source)


def marks(cell) -> dict:
    """The cell's nbgrader metadata; empty where there is none or it is not a dict."""
    meta = cell.get("metadata") if isinstance(cell, dict) else None
    value = meta.get("nbgrader") if isinstance(meta, dict) else None
    return value if isinstance(value, dict) else {}


def grade_id(cell) -> str | None:
    value = marks(cell).get("grade_id")
    return value if isinstance(value, str) else None


def test_cell_id(item: str) -> str:
    """The ``grade_id`` of the test cell of the item ``item`` (the course names it so): where
    formgrader shows, and a TA may set, the item's score."""
    return f"{item}_test"


def grade_ids(cells: list) -> set[str]:
    """The ``grade_id`` of every cell that has one."""
    return {gid for cell in cells if (gid := grade_id(cell)) is not None}


def role(cell) -> str:
    """What nbgrader makes of the cell: "manual" (a written answer), "answer", "test", "readonly"
    or "other"."""
    meta = marks(cell)
    if meta.get("solution") and meta.get("grade"):
        return "manual"
    if meta.get("solution"):
        return "answer"
    if meta.get("grade"):
        return "test"
    return "readonly" if meta.get("locked") else "other"


def answer_cells(cells: list) -> list[tuple[str, str]]:
    """The ``(grade_id, source)`` of every answer cell (code or written), in order."""
    return [(grade_id(cell), source_text(cell.get("source", ""))) for cell in cells
            if marks(cell).get("solution") and grade_id(cell)]


def answers(cells: list) -> dict[str, str]:
    """The source of each answer cell, by ``grade_id``."""
    return dict(answer_cells(cells))


def with_grade_id(cells: list, wanted: str) -> list:
    """The cells named ``wanted`` (one, in a notebook nbgrader accepts)."""
    return [cell for cell in cells if grade_id(cell) == wanted]
