"""Prepared checks kept as stored values, so that a visible check can judge without the reference.

The instructor's side prepares each visible check with the reference (:mod:`transformer_lm.kinds`)
and stores it with :func:`save`: the probe call, its input tensors, the expected record and each
catalogued mistake's record on the same inputs. A student's kernel loads it with :func:`load` and
judges the student's answer against those values alone, naming a mistake by its record, as the
original homework's ``test_values`` did for outputs.

One safetensors file holds many checks: tensors under ``<check>::call::<name>``,
``<check>::expected::<name>`` and ``<check>::mistake::<mistake name>::<name>``, and in its
metadata, as JSON, each check's call (the probe's name, the student objects, plain arguments) and
the notebook's names for shapes. Only checks judged by a
:class:`~transformer_lm.judging.RecordJudge` can be stored.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from transformer_lm import catalog
from transformer_lm.judging import RecordJudge
from transformer_lm.prepared import Prepared, ProbeCall
from transformer_lm.sandboxed import probes

SEPARATOR = "::"


def save(checks: dict[str, Prepared], path: Path) -> None:
    """Writes ``checks`` (name -> prepared check) to ``path``."""
    tensors, described = {}, {}
    for name, prepared in checks.items():
        judge = prepared.judge
        if not isinstance(judge, RecordJudge):
            raise TypeError(f"{name}: only a check judged by a RecordJudge can be stored, not {judge!r}")
        parts = {"call": prepared.call.tensors, "expected": judge.expected,
                 **{f"mistake{SEPARATOR}{mistake.name}": record for mistake, record in (judge.candidates or {}).items()}}
        for part, record in parts.items():
            tensors.update({SEPARATOR.join((name, part, key)): value.detach().clone().contiguous()
                            for key, value in record.items()})
        described[name] = {"call": prepared.call.plan(), "mistakes": [m.name for m in judge.candidates or {}],
                           "names": judge.names}
    save_file(tensors, str(path), metadata={"checks": json.dumps(described)})


def load(path: Path) -> dict[str, Prepared]:
    """The checks stored in ``path`` by :func:`save`, each judged against its stored values."""
    tensors = load_file(str(path))
    with safe_open(str(path), "pt") as f:
        described = json.loads(f.metadata()["checks"])

    def part(check: str, name: str) -> dict[str, torch.Tensor]:
        prefix = f"{check}{SEPARATOR}{name}{SEPARATOR}"
        return {key[len(prefix):]: value for key, value in tensors.items()
                if key.startswith(prefix) and SEPARATOR not in key[len(prefix):]}

    checks = {}
    for name, check in described.items():
        plan = check["call"]
        given = part(name, "call")
        call = ProbeCall(probes.PROBES[plan["probe"]], plan["objects"], plan["arguments"],
                         {key: given[key] for key in plan["tensor_keys"]})  # in the call's order: arguments by position
        candidates = {catalog.BY_NAME[m]: part(name, f"mistake{SEPARATOR}{m}") for m in check["mistakes"]}
        checks[name] = Prepared(call, RecordJudge(part(name, "expected"), candidates, check["names"]))
    return checks
