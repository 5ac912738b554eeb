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
"""

from __future__ import annotations

import re

SLOT = re.compile(r"\{(\w+):(\w+)\}")


def render(template: str, **values) -> str:
    """``template`` with each slot filled with the value of its name."""
    return SLOT.sub(lambda slot: str(values[slot.group(1)]), template)


def numbers(values, start: int = 0, more: bool = False) -> str:
    """``values`` as a ``numbers`` slot holds them: ``...`` before when they start after the first,
    and after when ``more`` follow."""
    return "[" + ("..., " if start else "") + ", ".join(map(str, values)) + (", ..." if more else "") + "]"
