"""The format of hidden checks.

An assignment's hidden checks live in ``autograder/checks/<assignment>.py`` of the course folder,
a module that defines ``ITEMS``: one :class:`Item` per graded answer. An item names

* ``grade_id``, the nbgrader id of the answer cell (its visible test cell is ``<grade_id>_test``,
  which holds the same ``points`` in the source notebook; a test holds the two equal);
* ``points``;
* ``checks``: check kinds of :mod:`transformer_lm.instructor.kinds` (what to call, what the reference
  gives, how to judge), which the grader prepares from the course's secret seed;
* ``forbids``: library calls the answer may not make (the thing it has to write itself);
* ``defines`` and ``builds_on``: the names of the objects the answer defines, and the earlier
  items whose answers it uses (one mistake costs points once: see below).

All checks of an item must pass for its points; the first one that fails explains why. A check
wrapped in :class:`Also` is one more case of the check before it (the same purpose on other
inputs): the two count as one check, which the audit asks a mistake to need. A check
wrapped in :class:`Explains` never costs a point: it reads what the run reports about itself (a
trace of its operators), which the run's own code could forge, so it only names why an item failed
on a fact from outside the run (its outputs, a memory cap the kernel enforces).
Tolerances are the course's policy (:data:`transformer_lm.judging.RTOL`, ``ATOL``) unless a
check says otherwise.

One mistake costs points once. An item that ``builds_on`` earlier items is also probed with the
course's own code in place of their answers: ``<checks_dir>/stand_ins/<assignment>.py``, built
on the reference, defines every name that an item ``defines``. When one of those earlier answers
(or one they build on) did not pass, the item is judged by that second record, and its feedback
says so. Where several items grade one answer cell, each judges its own step; a later item that
fails only by the catalogued mistake an earlier one was charged for keeps its points.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass

from autograder.reading.cells import test_cell_id
from transformer_lm.instructor.kinds import CheckKind


@dataclass(frozen=True)
class Also:
    """One more case of the check before it in the item: the same purpose (the attention's values,
    an error for bad sizes) on other inputs. Its failure costs the item's points as any check's
    does; it counts as part of that check, so that the audit asks some mistake to need the check
    as a whole, not each of its cases (:attr:`Item.check_numbers`)."""

    check: CheckKind

    @property
    def object(self) -> str:
        return self.check.object

    def prepare(self, generator):
        return self.check.prepare(generator)


@dataclass(frozen=True)
class Explains:
    """A check that only explains: when an item fails on another check, this one's failure (the
    line that held the whole matrix, the tile too many) names the mistake; alone, it costs nothing."""

    check: CheckKind

    def prepare(self, generator):
        return self.check.prepare(generator)


@dataclass(frozen=True)
class Item:
    """One graded item and its hidden checks.

    ``grade_id`` names the item and its visible test cell (``<grade_id>_test``); ``answer`` is
    the answer cell it grades, the item's own id unless several items grade one answer (the
    scores, the mask and the output of one class). ``style_deduction`` points come off a
    passing item whose answer cell breaks PEP 8 (:func:`transformer_lm.style.style_problems`),
    never below zero.
    ``defines`` names what the course's stand-ins replace when this answer is wrong;
    ``builds_on`` the grade_ids of earlier items, in the same notebook, whose answers this one uses.
    """

    grade_id: str
    _: KW_ONLY
    points: float
    checks: tuple[CheckKind, ...]
    forbids: tuple[str, ...] = ()
    answer: str | None = None
    style_deduction: float = 0.0
    defines: tuple[str, ...] = ()
    builds_on: tuple[str, ...] = ()

    @property
    def test_id(self) -> str:
        return test_cell_id(self.grade_id)

    @property
    def answer_id(self) -> str:
        return self.answer or self.grade_id

    def probes(self, explaining: bool = False) -> list[str]:
        """The ids of the item's probes, ``<grade_id>.<n>`` for the n-th entry of ``checks``: of the
        checks that only explain (:class:`Explains`) with ``explaining``, else of the others."""
        return [f"{self.grade_id}.{number}" for number, check in enumerate(self.checks)
                if isinstance(check, Explains) == explaining]

    @property
    def check_numbers(self) -> list[int]:
        """The number (from 0) of the check that each entry of ``checks`` is part of: an entry
        wrapped in :class:`Also` is a case of the check before it."""
        numbers = []
        for check in self.checks:
            numbers.append(numbers[-1] + (not isinstance(check, Also)) if numbers else 0)
        return numbers
