"""Concepts added to the course after its first six assignments, one module each.

A concept's module holds its reference (the one correct implementation) and, beside it, its
mistakes: a :class:`transformer_lm.instructor.mistake_family.MistakeFamily` of each mistake's words and the
twin that computes it. Its hidden checks configure the generic kinds
(:class:`transformer_lm.instructor.kinds.CallCheck`,
:class:`transformer_lm.instructor.kinds.ModuleCheck`) with both, and its ``VISIBLE`` names the groups of
visible checks that :mod:`transformer_lm.instructor.make_test_values` stores from it. Like the reference,
these modules stay on the instructor's side: students receive only what is stored from them.
docs/adding-an-assignment.md gives the steps; ``autograder new-assignment NN_name --concept NAME``
writes a new module's skeleton.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from types import ModuleType


@functools.cache
def modules() -> tuple[ModuleType, ...]:
    """Every concept module of this folder, imported, by name: importing one makes its families,
    which registers its mistakes in the catalogue (:func:`transformer_lm.catalog.register`). The
    audit and the visible checks call this, so that a new module is found by being here, with no
    import of it anywhere else."""
    return tuple(importlib.import_module(found.name)
                 for found in sorted(pkgutil.iter_modules(__path__, f"{__name__}."), key=lambda m: m.name))
