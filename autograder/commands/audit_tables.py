"""The audit's tables in the documentation, written by the audit (``autograder audit ASSIGNMENT
--tables``), never typed by hand: the README's table holds each assignment's whole row, and
``docs/grading.md`` each assignment's table, item by item. Each sits between marker lines, which
the writer keeps; a test holds both files to what the audit gives (``tests/test_audit.py``)."""

from __future__ import annotations

from pathlib import Path

from autograder.reading.errors import GradingError

README = "README.md"
GRADING = "docs/grading.md"
README_MARKERS = ("<!-- audit table: written by `autograder audit ASSIGNMENT --tables`, not by hand -->",
                  "<!-- end of the audit table -->")


def grading_markers(assignment: str) -> tuple[str, str]:
    """The lines around the table of ``assignment`` in ``docs/grading.md``."""
    return (f"<!-- audit table of {assignment}: written by `autograder audit {assignment} --tables`, not by hand -->",
            f"<!-- end of the audit table of {assignment} -->")


def _between(text: str, markers: tuple[str, str], path: str) -> tuple[str, list[str], str]:
    """``text`` cut at its marker lines: what comes before the first (included), the lines between,
    and what comes from the second on."""
    start, end = markers
    lines = text.split("\n")
    if lines.count(start) != 1 or lines.count(end) != 1 or lines.index(start) > lines.index(end):
        raise GradingError(f"{path} needs the line {start!r} and, after it, the line {end!r}, once each, where the "
                           f"audit's table goes; add them and write the table again.")
    first, last = lines.index(start), lines.index(end)
    return "\n".join(lines[:first + 1]), lines[first + 1:last], "\n".join(lines[last:])


def with_assignment_row(text: str, assignment: str, table: str) -> str:
    """The README's text with the whole-assignment row of ``table`` (the audit's table of
    ``assignment``) in its audit table, in the order of the assignments' names."""
    before, lines, after = _between(text, README_MARKERS, README)
    header, rule, *_ = table.split("\n")
    row = table.split("\n")[-1].replace("| **all** |", f"| `{assignment}` |", 1)
    rows = {line.split("|")[1].strip(): line for line in lines[2:] if line.startswith("| `")}
    rows[f"`{assignment}`"] = row
    header = header.replace("| item |", "| assignment |", 1)
    return "\n".join([before, header, rule, *(rows[name] for name in sorted(rows)), after])


def with_item_table(text: str, assignment: str, table: str) -> str:
    """``docs/grading.md``'s text with ``table`` as the audit table of ``assignment``."""
    before, _, after = _between(text, grading_markers(assignment), GRADING)
    return "\n".join([before, table, after])


WRITERS = ((README, with_assignment_row), (GRADING, with_item_table))


def _written(root: Path, assignment: str, table: str) -> dict[Path, str]:
    """Each file under ``root`` that shows the audit, with ``table`` written into it."""
    return {root / name: writer((root / name).read_text(), assignment, table) for name, writer in WRITERS}


def stale(root: Path, assignment: str, table: str) -> list[Path]:
    """The files under ``root`` whose audit table of ``assignment`` is not ``table``."""
    return [path for path, text in _written(root, assignment, table).items() if text != path.read_text()]


def require(root: Path, assignment: str) -> None:
    """Refuses, before the audit runs for minutes, a folder without the two files or their markers."""
    for name, markers in ((README, README_MARKERS), (GRADING, grading_markers(assignment))):
        if not (root / name).is_file():
            raise GradingError(f"No {name} in {root}: run the audit with --tables from the course repository, "
                               f"whose README and docs show the tables.")
        _between((root / name).read_text(), markers, name)


def write(root: Path, assignment: str, table: str) -> list[Path]:
    """Writes ``table`` (the audit's table of ``assignment``) into the README and ``docs/grading.md``
    of ``root``; returns the files it changed."""
    require(root, assignment)
    changed = []
    for path, text in _written(root, assignment, table).items():
        if text != path.read_text():
            path.write_text(text)
            changed.append(path)
    return changed
