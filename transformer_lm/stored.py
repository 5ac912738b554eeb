"""Prepared checks kept as stored values, so that a visible check can judge without the reference.

The instructor's side prepares each visible check with the reference and stores it with
:func:`save` (:mod:`transformer_lm.instructor.make_test_values` does, for the notebooks): the probe call, its
input tensors, the expected record and each catalogued mistake's record on the same inputs. A
student's kernel loads them with :func:`load` and judges the student's answer against those values
alone, naming a mistake by its record, as the original homework's ``test_values`` did for outputs.

One safetensors file holds it all: every tensor under the path of where it sits in the stored data
(``<check>/judge/expected/output``, say), and, in the file's metadata, the rest as JSON in which a
tensor is ``{"__tensor__": path}``, a mistake of the catalogue ``{"__mistake__": name}`` (with its
``"title"`` and ``"hint"`` where students' catalogue lacks it: a concept's own mistake), a probe
``{"__probe__": name}``, a tuple ``{"__tuple__": [...]}``, a dict with keys that are not strings
``{"__pairs__": [[key, value], ...]}`` and a dataclass ``{"__dataclass__": name, "fields": {...}}``.
Only the dataclasses of :data:`DATACLASSES` are stored, and loading builds nothing else: a stored
file holds values, never code, and a judge that is code is refused when it is saved.
"""

from __future__ import annotations

import json
from dataclasses import fields, is_dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from transformer_lm import catalog, decoder_judges, gpt_judges, judging, tiled_judges
from transformer_lm.prepared import Prepared, ProbeCall
from transformer_lm.sandboxed import probes

DATACLASSES = {cls.__name__: cls for cls in (
    Prepared, ProbeCall, judging.RecordJudge, judging.ParametersJudge, judging.RaisesJudge,
    *gpt_judges.JUDGES, *tiled_judges.JUDGES, tiled_judges.TileCase, *decoder_judges.JUDGES)}
"""What a stored file may build: the prepared check, its call, the judges (data with no code of the
reference) and the sizes they hold."""

STUDENTS_CATALOGUE = frozenset(mistake.name for mistake in catalog.CATALOG)
"""The mistakes students' copy of :mod:`transformer_lm.catalog` names; a stored check names any other
(one a concept's :class:`~transformer_lm.instructor.mistake_family.MistakeFamily` registered) with its title and
hint."""

TENSOR, MISTAKE, PROBE, TUPLE, PAIRS, DATACLASS = ("__tensor__", "__mistake__", "__probe__", "__tuple__",
                                                   "__pairs__", "__dataclass__")


class _Tensors(dict):
    """The tensors of a file by path, and the path each tensor object went under first: a tensor
    that several places hold (a capped check's expected values, once for each grad mode) is stored
    once."""

    def __init__(self):
        super().__init__()
        self.path_of: dict[int, str] = {}


def _encode(value, path: str, tensors: _Tensors):
    """``value`` as JSON, its tensors moved into ``tensors`` under ``path`` (or the path they
    already have there)."""
    if isinstance(value, torch.Tensor):
        first = tensors.path_of.setdefault(id(value), path)
        if first == path:
            tensors[path] = value.detach().clone().contiguous()
        return {TENSOR: first}
    if isinstance(value, catalog.Mistake):
        known = value.name in STUDENTS_CATALOGUE
        return {MISTAKE: value.name} if known else {MISTAKE: value.name, "title": value.title, "hint": value.hint}
    if callable(value) and probes.PROBES.get(getattr(value, "__name__", None)) is value:
        return {PROBE: value.__name__}
    if is_dataclass(value) and not isinstance(value, type):
        name = type(value).__name__
        if DATACLASSES.get(name) is not type(value):
            raise TypeError(f"{path}: a {name} cannot be stored (what can: {', '.join(DATACLASSES)})")
        return {DATACLASS: name, "fields": {f.name: _encode(getattr(value, f.name), f"{path}/{f.name}", tensors)
                                            for f in fields(value)}}
    if isinstance(value, dict) and all(isinstance(key, str) and not key.startswith("__") for key in value):
        return {key: _encode(item, f"{path}/{key}", tensors) for key, item in value.items()}
    if isinstance(value, dict):
        return {PAIRS: [[_encode(key, f"{path}/{i}/key", tensors), _encode(item, f"{path}/{i}", tensors)]
                        for i, (key, item) in enumerate(value.items())]}
    if isinstance(value, (tuple, list)):
        items = [_encode(item, f"{path}/{i}", tensors) for i, item in enumerate(value)]
        return {TUPLE: items} if isinstance(value, tuple) else items
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"{path}: a value of type {type(value).__name__} ({value!r:.60}) cannot be stored")


def _decode(value, tensors: dict[str, torch.Tensor]):
    """What :func:`_encode` turned into ``value``."""
    if isinstance(value, list):
        return [_decode(item, tensors) for item in value]
    if not isinstance(value, dict):
        return value
    if TENSOR in value:
        return tensors[value[TENSOR]]
    if MISTAKE in value:
        known = catalog.BY_NAME.get(value[MISTAKE])
        return known or catalog.Mistake(value[MISTAKE], value["title"], value["hint"])
    if PROBE in value:
        return probes.PROBES[value[PROBE]]
    if TUPLE in value:
        return tuple(_decode(item, tensors) for item in value[TUPLE])
    if PAIRS in value:
        return {_decode(key, tensors): _decode(item, tensors) for key, item in value[PAIRS]}
    if DATACLASS in value:
        return DATACLASSES[value[DATACLASS]](**{k: _decode(v, tensors) for k, v in value["fields"].items()})
    return {key: _decode(item, tensors) for key, item in value.items()}


def save(data: dict, path: Path, **metadata: str) -> None:
    """Writes ``data`` (a dict of prepared checks, lists of them, and plain values) to ``path``;
    ``metadata`` adds plain strings to the file's header (who made it, say)."""
    tensors = _Tensors()
    encoded = _encode(data, "", tensors)
    save_file(tensors, str(path), metadata={**metadata, "stored": json.dumps(encoded)})


def load(path: Path) -> dict:
    """What :func:`save` wrote to ``path``."""
    with safe_open(str(path), "pt") as f:
        encoded = json.loads(f.metadata()["stored"])
    return _decode(encoded, load_file(str(path)))
