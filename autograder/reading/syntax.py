"""Python's own words for a cell that does not compile, found by the grader itself.

A run that says an answer cell raised a SyntaxError tells the grader that one word and no line:
the error comes before any line of the cell runs. The run is the student's, so no message it sent
is shown (any text could carry a hidden input out: docs/threat-model.md). The grader compiles the
submitted cell itself, as the run's IPython shell does (IPython's input transforms, which make
magics and shell escapes calls, then Python's compiler), and tells the student the compiler's
message and line: words made from the student's own code alone, which no run chose.
"""

from __future__ import annotations

import ast
import functools

from IPython.core.inputtransformer2 import TransformerManager

from autograder.reading.messages import ERRORS, own_line, render

NAMES = ("SyntaxError", "IndentationError", "TabError")
"""What a run calls the errors that compiling a cell raises."""


@functools.lru_cache(maxsize=1024)
def syntax_error(source: str) -> SyntaxError | None:
    """The error that compiling ``source`` as a notebook cell raises; None when it compiles, or
    when IPython or Python fail on it in another way (a cell nested too deep for the compiler).
    Kept for the cells seen last: the catalogue's reading of a class's texts asks of the same
    cells again and again (:mod:`autograder.recording.feedback_texts`)."""
    try:
        python = TransformerManager().transform_cell(source)
        compile(python, "<cell>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    except SyntaxError as error:
        return error.with_traceback(None)
    except Exception:  # noqa: BLE001 - not an error Python names as syntax: the run's word stands
        return None
    return None


def syntax_text(told: str, source: str) -> str | None:
    """What a student reads of an answer cell (its code ``source``) whose run said no more than
    ``told``, an exception's name: for a syntax error, the compiler's message and the line it
    points at; None when ``told`` is another error, or when the cell compiles here after all."""
    error = syntax_error(source) if told in NAMES else None
    if error is None:
        return None
    text = render(ERRORS["syntax_error"], exception=type(error).__name__, message=error.msg)
    lines = source.splitlines()
    if isinstance(error.lineno, int) and 0 < error.lineno <= len(lines):
        text += render(ERRORS["error_line"], line=error.lineno, code=own_line(lines[error.lineno - 1]))
    return text
