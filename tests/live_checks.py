"""Visible checks prepared here, with the reference, on cases that no notebook stores: how the
tests try a kind of check on answers written to break it, as a student's kernel runs a stored
check (transformer_lm.checks.run)."""

import torch

from transformer_lm import checks


def check_here(kind, objects: dict, seed: int = 0) -> checks.Verdict:
    """Prepares ``kind`` from ``seed`` and runs it on ``objects`` as a notebook's test cell does."""
    prepared = kind.prepare(torch.Generator().manual_seed(seed))
    return checks.run(kind.object, prepared, objects)


def visible(group: str, name: str):
    """The stored visible check ``group`` as a function of one answer, given as ``name`` (a
    lambda or a twin class has another name of its own)."""
    return lambda answer: checks.check(group, **{name: answer})
