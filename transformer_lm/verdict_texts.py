"""How a check's texts are made: a template of its module's ``TEXTS``, its slots filled by
:func:`render`.

Every word a check says of an answer is one of these templates (a text may be several of them,
one after the other), so that the grader can hold an item's text to the closed catalogue
(:mod:`autograder.reading.messages`) before a student reads it: a text that is not made of templates, or
whose slots hold what their kind does not allow, could carry words a run chose. A slot is written
``{name:kind}``; the kinds:

* ``number``: a number, as the check writes it (``12``, ``0.5``, ``1e-05``, ``inf``, ``45%``);
* ``numbers``: numbers in brackets, as a check lists them (``[1, 0, 1]``, ``[..., 0.25, 1, ...]``);
* ``shape``: a shape or an index, ``(2, 3)``;
* ``call``: what a check called, as its specification writes it (``sliding_window_mask(...)``);
* ``label``: a name a check gives what it compares (``output``, ``the gradient of q``),
  or several of them (``q and k``);
* ``mistake``: a title of the catalogue of mistakes (:mod:`transformer_lm.catalog`);
* ``exception``: the name of one of Python's own exceptions;
* ``text``: another template of the catalogue, rendered (``nothing``, ``shape (2, 3)``).

The grader reads a text against the catalogue in :mod:`autograder.recording.feedback_texts`: a slot that
holds words (``call``, ``label``, ``text``) may hold only the course's own, those its checks hold.

A visible check shows its texts through :func:`fit`, so that no line is wider than :data:`WIDTH`.
"""

from __future__ import annotations

import re
import textwrap

SLOT = re.compile(r"\{(\w+):(\w+)\}")

WIDTH = 80
"""The widest line a visible check prints or raises. ``nbgrader validate`` shows a failing cell's
error with each line behind an indent of 4 and cuts it after 87 characters (its ``Validator.width``
of 90, less 3), and the Validate button's dialog shows the same lines in a box that does not wrap
them: 80 fits both, as it fits a terminal."""


def render(template: str, **values) -> str:
    """``template`` with each slot filled with the value of its name."""
    return SLOT.sub(lambda slot: str(values[slot.group(1)]), template)


def numbers(values, start: int = 0, more: bool = False) -> str:
    """``values`` as a ``numbers`` slot holds them: ``...`` before when they start after the first,
    and after when ``more`` follow."""
    return "[" + ("..., " if start else "") + ", ".join(map(str, values)) + (", ..." if more else "") + "]"


def fit(text: str, width: int = WIDTH) -> str:
    """``text`` as shown: each line wider than ``width`` broken at its spaces, the pieces after the
    first indented four spaces more than the line they continue (a message indents its own lines
    by two), so that they read as part of it. Only what is shown goes through it; a message itself,
    which tests and the grader's catalogue match, keeps its lines whole."""
    lines = []
    for line in text.split("\n"):
        if len(line) <= width:
            lines.append(line)
            continue
        indent = line[:len(line) - len(line.lstrip())]
        lines += textwrap.wrap(line, width, subsequent_indent=indent + "    ", break_on_hyphens=False)
    return "\n".join(lines)
