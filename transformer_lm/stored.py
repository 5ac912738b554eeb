"""Prepared checks kept as stored values, so that a visible check can judge without the reference.

The instructor's side prepares each visible check with the reference (:mod:`transformer_lm.kinds`)
and stores it with :func:`save`: the probe call, its input tensors, the expected record and each
catalogued mistake's record on the same inputs. A student's kernel loads it with :func:`load` and
judges the student's answer against those values alone, naming a mistake by its record, as the
original homework's ``test_values`` did for outputs.

One safetensors file holds many checks: tensors under ``<check>::call::<name>``,
``<check>::<record>::<name>`` (``expected``, say) and ``<check>::mistake::<mistake name>::<name>``, and in its
metadata, as JSON, each check's call (the probe's name, the student objects, plain arguments) and
its judge: a dataclass of :data:`JUDGES`, by name, with its plain fields (its records of tensors are
stored as tensors, its mistakes by name).
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from transformer_lm import catalog
from transformer_lm.judging import ParametersJudge, RaisesJudge, RecordJudge
from transformer_lm.prepared import Prepared, ProbeCall
from transformer_lm.sandboxed import probes

SEPARATOR = "::"


JUDGES = {judge.__name__: judge for judge in (RecordJudge, ParametersJudge, RaisesJudge)}
"""The judges a stored check may have: dataclasses of values, with no code of the reference."""


def save(checks: dict[str, Prepared], path: Path) -> None:
    """Writes ``checks`` (name -> prepared check) to ``path``."""
    tensors, described = {}, {}

    def put(check: str, part: str, record: dict[str, torch.Tensor]) -> None:
        tensors.update({SEPARATOR.join((check, part, key)): value.detach().clone().contiguous()
                        for key, value in record.items()})

    for name, prepared in checks.items():
        judge = prepared.judge
        if type(judge).__name__ not in JUDGES:
            raise TypeError(f"{name}: a check judged by {judge!r} cannot be stored (judges that can: {', '.join(JUDGES)})")
        put(name, "call", prepared.call.tensors)
        plain, records, mistakes = {}, [], []
        for field in fields(judge):
            value = getattr(judge, field.name)
            if field.name == "candidates":
                for mistake, record in (value or {}).items():
                    put(name, f"mistake{SEPARATOR}{mistake.name}", record)
                    mistakes.append(mistake.name)
            elif isinstance(value, dict) and value and all(isinstance(v, torch.Tensor) for v in value.values()):
                put(name, field.name, value)
                records.append(field.name)
            else:
                plain[field.name] = value
        described[name] = {"call": prepared.call.plan(), "judge": type(judge).__name__, "plain": plain,
                           "records": records, "mistakes": mistakes}
    save_file(tensors, str(path), metadata={"checks": json.dumps(described)})


def load(path: Path) -> dict[str, Prepared]:
    """The checks stored in ``path`` by :func:`save`, each judged against its stored values."""
    with safe_open(str(path), "pt") as f:
        described = json.loads(f.metadata()["checks"])
    parts: dict[tuple[str, str], dict[str, torch.Tensor]] = {}
    for key, value in load_file(str(path)).items():
        check, rest = key.split(SEPARATOR, 1)
        part_name, tensor_name = rest.rsplit(SEPARATOR, 1)
        parts.setdefault((check, part_name), {})[tensor_name] = value

    def part(check: str, name: str) -> dict[str, torch.Tensor]:
        return parts.get((check, name), {})

    checks = {}
    for name, check in described.items():
        plan, given = check["call"], part(name, "call")
        call = ProbeCall(probes.PROBES[plan["probe"]], plan["objects"], plan["arguments"],
                         {key: given[key] for key in plan["tensor_keys"]})  # in the call's order: arguments by position
        values = {**check["plain"], **{field: part(name, field) for field in check["records"]}}
        if check["mistakes"]:
            values["candidates"] = {catalog.BY_NAME[m]: part(name, f"mistake{SEPARATOR}{m}") for m in check["mistakes"]}
        checks[name] = Prepared(call, JUDGES[check["judge"]](**values))
    return checks
