"""The class's grades as a TA reads them in a terminal: narrow enough not to wrap.

A row per student with one short column per item (its number, named in a legend under the
table), then what lost points: the student, the items' numbers, the status and the mistake the
grader named (or its message), one line per reason, cut to the terminal's width.
"""

from __future__ import annotations

import shutil
import textwrap

from autograder.reading.results import SubmissionResult


def _cell(item) -> str:
    """An item's points, marked when it lost any (``0!``), or its status when it did not run."""
    points = f"{item.score:g}"
    return points if item.status == "passed" and item.score == item.max_score else points + "!"


def render(results: list[SubmissionResult], width: int | None = None) -> str:
    """The table, the legend of item numbers, and what went wrong, in ``width`` columns
    (the terminal's, by default)."""
    width = width or shutil.get_terminal_size((100, 24)).columns
    ids = list(dict.fromkeys(item.grade_id for result in results for item in result.items))
    name_width = max([7] + [len(r.student) for r in results])
    column = max(3, *(len(str(n)) + 1 for n in range(1, len(ids) + 1)))
    head = f"{'student':<{name_width}}  {'total':>7}  " + "".join(f"{n:>{column}}" for n in range(1, len(ids) + 1))
    lines = [head, "-" * min(len(head), width)]
    for result in results:
        by_id = {i.grade_id: i for i in result.items}
        cells = "".join(f"{_cell(by_id[i]) if i in by_id else '-':>{column}}" for i in ids)
        lines.append(f"{result.student:<{name_width}}  {f'{result.total:g}/{result.max_total:g}':>7}  {cells}")
    legend = "  ".join(f"{n} {grade_id}" for n, grade_id in enumerate(ids, 1))
    lines += ["", *textwrap.wrap("items: " + legend, width, subsequent_indent="       ")]
    number = {grade_id: n for n, grade_id in enumerate(ids, 1)}
    problems: dict[tuple[str, str, str], list[str]] = {}  # items that lost points for one reason, together
    for result in results:
        for item in result.items:
            if item.status != "passed" or item.score < item.max_score:
                why = " ".join((item.mistake or item.deduction or item.message).split())
                problems.setdefault((result.student, item.status, why), []).append(str(number[item.grade_id]))
    if problems:
        lines += ["", "Items that lost points (! above), by number:"]
        lines += [_fit(f"{student} {','.join(numbers)} {status}: {why}", width)
                  for (student, status, why), numbers in problems.items()]
    flags = [_fit(f"{result.student}: {flag}", width) for result in results for flag in result.flags]
    if flags:
        lines += ["", "Flags:", *flags]
    return "\n".join(lines)


def _fit(text: str, width: int) -> str:
    """``text``, indented by two, on one line of at most ``width`` characters."""
    return "  " + textwrap.shorten(text, max(20, width - 2), placeholder=" ...")
