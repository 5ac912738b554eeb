"""The entries of the visible checks' table (:mod:`transformer_lm.instructor.visible_checks`): one check
of a group, prepared from a fixed seed, so that every notebook's group is made the same way."""

from __future__ import annotations

import torch

from transformer_lm.prepared import Prepared

Entry = dict
"""One check of a group: ``{"name": what a message calls the answer, "check": Prepared}``, and
``"context"``, a line put before a failure's message, where the check's own message needs one."""


def entry(name: str, prepared: Prepared, context: str = "", explains: bool = False) -> Entry:
    """One check of a group; one that ``explains`` only names the mistake of another's failure."""
    return {"name": name, "check": prepared, "context": context, **({"explains": True} if explains else {})}


def seeded(kind, seed: int = 0) -> Prepared:
    return kind.prepare(torch.Generator().manual_seed(seed))


def each(name: str, *kinds) -> list[Entry]:
    """A check of each kind, from seed 0, of the answer ``name``."""
    return [entry(name, seeded(kind)) for kind in kinds]
