"""A concept's mistakes beside its reference: each catalogued mistake with the function that
computes what it gives.

A concept new to the course is one module: its reference function (or module), and a
:class:`MistakeFamily` that maps each :class:`~transformer_lm.catalog.Mistake` of it to a flawed
twin taking the reference's own arguments. Making the family registers its mistakes in the
catalogue (:func:`transformer_lm.catalog.register`), so that reports, the audit and the stored
visible checks name them; the generic kinds (:class:`transformer_lm.instructor.kinds.CallCheck`,
:class:`transformer_lm.instructor.kinds.ModuleCheck`) take the family as their ``mistakes`` and name a
failing answer's mistake when its record matches a twin's.
"""

from __future__ import annotations

from typing import Callable, Mapping

import torch

from transformer_lm import catalog
from transformer_lm.sandboxed.student_objects import builtin_exception


class MistakeFamily:
    """Each mistake of one concept, with its flawed twin: ``twin(*arguments)`` gives the output
    that mistake gives where the reference is called with ``arguments`` (the inputs of a function;
    the reference module and its inputs, for a module). A twin returns ``None`` on arguments that
    cannot reveal its mistake (a mask mistake, without a mask), and that mistake is left out."""

    def __init__(self, twins: Mapping[catalog.Mistake, Callable[..., torch.Tensor | None]]):
        self.twins = dict(twins)
        catalog.register(self.twins)

    def __iter__(self):
        return iter(self.twins)

    def records(self, *arguments) -> dict[catalog.Mistake, dict[str, torch.Tensor]]:
        """Each revealable mistake's record on ``arguments``: ``{mistake: {"output": tensor}}``,
        in the family's order (the first match is the one a verdict names). A twin that raises an
        error there has no record: :meth:`raised` names its mistake."""
        return {mistake: {"output": output} for mistake, output in self._outputs(*arguments).items()
                if isinstance(output, torch.Tensor)}

    def raised(self, *arguments) -> dict[str, catalog.Mistake]:
        """The mistakes whose twins raise an error on ``arguments``, by the name of its type (the
        nearest of Python's own, as a run reports a student's error), the family's first for each:
        a call that raises an error of that type there made that mistake (a softmax written for 2-D
        scores only, given a vector)."""
        found = {}
        for mistake, output in self._outputs(*arguments).items():
            if isinstance(output, Exception):
                found.setdefault(builtin_exception(output), mistake)
        return found

    def _outputs(self, *arguments) -> dict[catalog.Mistake, torch.Tensor | Exception]:
        """What each twin gives on ``arguments``, or the error it raises; twins that cannot
        reveal their mistake there (``None``) are left out."""
        found = {}
        with torch.no_grad():
            for mistake, twin in self.twins.items():
                try:
                    output = twin(*arguments)
                except Exception as error:  # noqa: BLE001 - a twin's error is what its mistake raises
                    output = error
                if output is not None:
                    found[mistake] = output
        return found
