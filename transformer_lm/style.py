"""The PEP 8 check of an answer cell: what the grader deducts a style point for, and the visible
check that tells a student first, with the same rules, the same line numbers and the points it
will cost.

The rules are pycodestyle's defaults, extended and never replaced: PEP 8 itself allows what
pycodestyle leaves out by default (``bs*heads``, E226; a line break before or after a binary
operator, W503 and W504). The course adds a longer line (120 characters) and leaves out the
comment-spacing rules, so that the shape comments written beside code, which the course asks for,
never cost a point; a line too long only because of its trailing comment is not counted either.

One refusal of pycodestyle's is narrowed to what PEP 8 says. Its E203, whitespace before a comma, a
semicolon or a colon, follows PEP 8's section "Whitespace in Expressions and Statements" for the
first two and for most colons (``x , y``, ``if x == 4 : pass``, ``{"a" : 1}``), but the same section
says that in a slice the colon acts like a binary operator, with equal amounts of space on either
side (both colons of an extended slice alike) and none on the side of a bound left out, and lists
``ham[lower + offset : upper + offset]`` and ``ham[: upper_fn(x) : step_fn(x)]`` as correct: the
spacing Black writes. A slice spaced so (:func:`_spaced_slice_colons`) costs nothing; the slices
that section calls wrong, ``ham[1 :9]`` and ``ham[lower : : step]``, are still refused. Nothing is
run: the text is read.
"""

from __future__ import annotations

import io
import tokenize
from dataclasses import dataclass, field

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

    def init_file(self, filename, lines, expected, line_offset):
        super().init_file(filename, lines, expected, line_offset)
        self.slice_colons = _spaced_slice_colons(lines)

    def error(self, line_number, offset, text, check):
        if text.startswith("E501") and self._code_fits(line_number):
            return None
        if text.startswith("E203") and (line_number, offset + 1) in self.slice_colons:
            return None   # E203's offset is the space before the colon
        code = super().error(line_number, offset, text, check)
        if code:  # the line itself, since the page that shows the deduction numbers no lines
            # (a tokenizer's error, E902 on a bracket left open, is told at the line after the last)
            line = self.lines[line_number - 1] if line_number <= len(self.lines) else ""
            self.problems.append(f"line {line_number}, {line.strip()[:80]!r}: {text}")
        return code

    def _code_fits(self, line_number) -> bool:
        """A long line whose code fits and whose length is a trailing comment (the shape
        comments the course asks for) is not a PEP 8 problem here."""
        line = self.lines[line_number - 1]
        for token in tokenize.generate_tokens(io.StringIO(line).readline):
            if token.type == tokenize.COMMENT:
                return len(line[:token.start[1]].rstrip()) <= self.max_line_length
        return False


@dataclass
class _Bracket:
    """A bracket open while the tokens are read, and what has been read in it so far."""

    char: str
    lambdas: int = 0
    """Lambdas begun directly inside it whose colon is still to come."""
    colons: list[tuple[tuple[int, int], bool]] = field(default_factory=list)
    """The colons of the slice being read (in square brackets): where each is, and whether it is
    spaced like an operator."""


def _spaced_slice_colons(lines: list[str]) -> set[tuple[int, int]]:
    """Where (line, column) each colon is of the slices spaced as PEP 8's "Whitespace in Expressions
    and Statements" spaces one: every colon of the slice spaced like a binary operator
    (:func:`_spaced_like_an_operator`), since an extended slice's two colons take the same spacing.

    A colon directly inside square brackets is a slice's, unless it ends a lambda begun there; a
    colon of a dict or a call nested in them is not, and keeps E203."""
    tokens = []
    try:
        for token in tokenize.generate_tokens(io.StringIO("".join(lines)).readline):
            tokens.append(token)
    except (tokenize.TokenError, SyntaxError):
        pass   # pycodestyle reports the cell that does not tokenize; what came before is read
    found: set[tuple[int, int]] = set()
    brackets: list[_Bracket] = []
    for index, token in enumerate(tokens):
        inner = brackets[-1] if brackets else None
        if token.type not in (tokenize.OP, tokenize.NAME):
            continue   # a string's text is never a bracket, a colon or a lambda
        if token.string in ("(", "[", "{"):
            brackets.append(_Bracket(token.string))
        elif inner is None:
            continue
        elif token.string == "lambda":
            inner.lambdas += 1
        elif inner.lambdas and token.string == ":":
            inner.lambdas -= 1
        elif inner.lambdas and token.string == ",":
            continue   # between a lambda's parameters
        elif token.string == ":" and inner.char == "[":
            spaced = index + 1 < len(tokens) and _spaced_like_an_operator(*tokens[index - 1:index + 2])
            inner.colons.append((token.start, spaced))
        elif token.string in (",", ")", "]", "}"):
            if all(spaced for _, spaced in inner.colons):
                found.update(start for start, _ in inner.colons)
            inner.colons = []
            if token.string != ",":
                brackets.pop()
    return found


def _spaced_like_an_operator(before, colon, after) -> bool:
    """Whether a slice's colon (the token ``colon`` between ``before`` and ``after``) has one space
    on each side where a bound is and none on a side whose bound is left out, as in
    ``ham[lower + offset :: step]``; on one line, with no comment after it. One space, since PEP 8
    calls more than one around an operator wrong."""
    row, line = colon.start[0], colon.line
    if before.end[0] != row or after.start[0] != row or after.type in (tokenize.NL, tokenize.COMMENT):
        return False
    space_before = "" if before.string in ("[", ",", ":") else " "
    space_after = "" if after.string in ("]", ",", ":") else " "
    return line[before.end[1]:colon.start[1]] == space_before and line[colon.end[1]:after.start[1]] == space_after


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
