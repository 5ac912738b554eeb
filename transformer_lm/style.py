"""The PEP 8 check of an answer cell: what the grader deducts a style point for, and the visible
check that tells a student first, with the same rules, the same line numbers and the points it
will cost.

The rules are pycodestyle's defaults, extended and never replaced: PEP 8 itself allows what
pycodestyle leaves out by default (``bs*heads``, E226; a line break before a binary operator,
W503). The course adds a longer line (120 characters) and leaves out the comment-spacing rules,
so that the shape comments written beside code, which the course asks for, never cost a point; a
line too long only because of its trailing comment is not counted either. Nothing is run: the
text is read.
"""

from __future__ import annotations

import io
import tokenize

import pycodestyle

from transformer_lm.judging import CheckFailed
from transformer_lm.source_scan import answer_text

COURSE_IGNORES = ("E261", "E262", "E265", "E266", "W291", "W293", "E303")
"""What the course leaves out beyond pycodestyle's defaults: comment spacing, trailing
whitespace, and blank lines (a notebook cell is not a file)."""
STYLE = {"max_line_length": 120, "ignore": sorted({*pycodestyle.DEFAULT_IGNORE.split(","), *COURSE_IGNORES})}
"""The options of the check: pycodestyle's default ignore list with the course's added."""


class _StyleCollector(pycodestyle.BaseReport):
    """Keeps pycodestyle's findings as short lines instead of printing them."""

    def __init__(self, options):
        super().__init__(options)
        self.problems: list[str] = []
        self.max_line_length = options.max_line_length

    def error(self, line_number, offset, text, check):
        if text.startswith("E501") and self._code_fits(line_number):
            return None
        code = super().error(line_number, offset, text, check)
        if code:  # the line itself, since the page that shows the deduction numbers no lines
            self.problems.append(f"line {line_number}, {self.lines[line_number - 1].strip()[:80]!r}: {text}")
        return code

    def _code_fits(self, line_number) -> bool:
        """A long line whose code fits and whose length is a trailing comment (the shape
        comments the course asks for) is not a PEP 8 problem here."""
        line = self.lines[line_number - 1]
        for token in tokenize.generate_tokens(io.StringIO(line).readline):
            if token.type == tokenize.COMMENT:
                return len(line[:token.start[1]].rstrip()) <= self.max_line_length
        return False


def style_problems(source: str) -> list[str]:
    """PEP 8 problems of an answer cell under the course's rules (:data:`STYLE`), each with its
    line number in the cell; IPython magics and shell escapes are read as comments."""
    lines = [line + "\n" for line in source.splitlines()]
    if any(line.lstrip().startswith(("%", "!")) for line in lines):
        lines = [("#" + line) if line.lstrip().startswith(("%", "!")) else line for line in lines]
    guide = pycodestyle.StyleGuide(quiet=True, **STYLE)
    report = guide.init_report(_StyleCollector)
    pycodestyle.Checker(lines=lines, options=guide.options, report=report).check_all()
    return report.problems


def check_style(answer, points: float) -> None:
    """The visible style check of ``answer`` (a class or function defined in a notebook cell):
    refuses, with :class:`CheckFailed`, a cell with PEP 8 problems, naming each and the
    ``points`` the grader will take for them; prints a line when there are none."""
    name = getattr(answer, "__name__", str(answer))
    problems = style_problems(answer_text(answer))
    if problems:
        listed = "\n".join(f"  {problem}" for problem in problems[:10])
        more = f"\n  ... and {len(problems) - 10} more" if len(problems) > 10 else ""
        raise CheckFailed(f"{name}'s cell breaks PEP 8 in {len(problems)} place(s); the grader takes "
                          f"{points:g} point(s) of the item for it, however right the values are:\n{listed}{more}")
    print(f"{name}: PEP 8: no problems in its cell.")
