"""The pieces every group of visible checks is made of (:mod:`transformer_lm.instructor.visible_checks`):
an entry, a check prepared from a fixed seed, and an attention class checked case by case. A module of
their own, so that an assignment's visible checks may live in a module of their own too
(:mod:`transformer_lm.instructor.visible_mingpt`, :mod:`~transformer_lm.instructor.visible_tiled`) without
importing the table back."""

from __future__ import annotations

import torch

from transformer_lm.instructor.adapters import AttentionAPI
from transformer_lm.instructor.kinds import AttentionCheck
from transformer_lm.prepared import Prepared

Entry = dict
"""One check of a group: ``{"name": what a message calls the answer, "check": Prepared}``, and
``"context"``, a line put before a failure's message, where the check's own message needs one."""


def entry(name: str, prepared: Prepared, context: str = "", explains: bool = False) -> Entry:
    """One check of a group; one that ``explains`` only names the mistake of another's failure."""
    return {"name": name, "check": prepared, "context": context, **({"explains": True} if explains else {})}


def seeded(kind, seed: int = 0) -> Prepared:
    return kind.prepare(torch.Generator().manual_seed(seed))


def attention_entries(cls: str, api: AttentionAPI, cases, kind=AttentionCheck) -> list[Entry]:
    """A check of attention class ``cls`` on each case, a failure saying which case it was."""
    entries = []
    for case in cases:
        prepared = seeded(kind(cls, api, case))
        shape = (case.seq, case.d_in) if case.batch is None else (case.batch, case.seq, case.d_in)
        built = ", ".join(f"{k}={v!r}" for k, v in api.init(case).items())
        mask = f" and a {case.mask} mask" if case.mask else ""
        entries.append(entry(cls, prepared, f"{cls}({built}) on x of shape {shape}{mask}"))
    return entries


def each(name: str, *kinds) -> list[Entry]:
    """A check of each kind, from seed 0, of the answer ``name``."""
    return [entry(name, seeded(kind)) for kind in kinds]
