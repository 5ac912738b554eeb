"""A submitted notebook read as untrusted data: every field that nbformat's schema types is
checked for its type before anything uses it.

A student's notebook is a JSON file that anyone can write by hand, so it may be nested a
million levels deep, hold lone surrogates that no file can store, or have a list where nbformat
puts an object. :func:`read_notebook` reads it into a notebook that nbformat 4.5 validates,
whatever it held: a field of the wrong type is dropped (or, where the schema needs it, made
empty), a value that is not a cell is left out, and each repair is described in words that say
what was wrong and where, so that the submission is graded as far as it can be and the
instructor sees why the rest could not be.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from nbformat.validator import ValidationError, get_validator

MAX_DEPTH = 64
"""The deepest nesting of JSON values taken; a notebook needs about ten levels."""
MAX_NOTES = 12
"""Repairs described one by one; the rest are counted."""
SHOWN_CHARS = 40
"""How much of a student's text (a cell id, a type name) a repair's description quotes."""
NBFORMAT_MINOR = 5
CELL_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
CELL_TYPES = ("code", "markdown", "raw")
NBGRADER_FIELDS = {"grade": bool, "solution": bool, "locked": bool, "task": bool, "grade_id": str,
                   "points": float, "schema_version": int, "checksum": str, "cell_type": str}
"""nbgrader's cell metadata and the type of each field (``points``: a finite number, 0 or more)."""
AGAIN = "Open it in JupyterLab, check that it shows your work, save it and submit it again."


def shown(text: object) -> str:
    """A student's value quoted in a message, cut short: it may be a megabyte long."""
    text = str(text)
    return repr(text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "…")


def _kind(value: object) -> str:
    """A JSON value's type in the schema's words."""
    if isinstance(value, bool):
        return "a boolean"
    return {dict: "an object", list: "a list", str: "a string", int: "a number", float: "a number",
            type(None): "null"}.get(type(value), "a value")


def _text(value: str) -> str:
    """``value`` with lone surrogates (which JSON's ``\\ud800`` escapes make, and no UTF-8 file can
    hold) replaced."""
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return value.encode("utf-8", "replace").decode("utf-8")


def loads(raw: bytes | str) -> object:
    """JSON text as Python values, nested at most :data:`MAX_DEPTH` deep, every string storable
    as UTF-8. Raises ValueError with a message for anything else."""
    try:
        value = json.loads(raw)
    except RecursionError:
        raise ValueError(f"it is nested more than {MAX_DEPTH} levels deep") from None
    except UnicodeDecodeError:
        raise ValueError("it is not UTF-8 text") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"line {error.lineno}, column {error.colno}: {error.msg}; it may have been cut off "
                         f"while saving") from None
    # a number too long to read is a plain ValueError, with its own message
    if isinstance(value, str):
        return _text(value)
    stack = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ValueError(f"it is nested more than {MAX_DEPTH} levels deep")
        if isinstance(node, dict):
            for key in list(node):
                item = node[key]
                if not key.isascii() and _text(key) != key:
                    del node[key]
                    key = _text(key)
                    node[key] = item
                if isinstance(item, str):
                    node[key] = _text(item)
                elif isinstance(item, (dict, list)):
                    stack.append((item, depth + 1))
        else:
            for index, item in enumerate(node):
                if isinstance(item, str):
                    node[index] = _text(item)
                elif isinstance(item, (dict, list)):
                    stack.append((item, depth + 1))
    return value


def parse_notebook(raw: bytes, notes: list[str] | None = None) -> tuple[dict | None, str | None]:
    """The notebook in ``raw`` made schema-valid (its repairs described in ``notes``), or None and a
    message that says why it cannot be read and what to do."""
    if not raw.strip():
        return None, f"The notebook file is empty. {AGAIN}"
    try:
        data = loads(raw.decode("utf-8", "replace"))
    except ValueError as error:
        return None, f"The notebook is not valid JSON that a grader can read ({error}). {AGAIN}"
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        return None, f"The file is JSON but not a notebook (no list of cells). {AGAIN}"
    repairs = Repairs()
    if "nbformat" not in data:
        repairs.add("the notebook", "its nbformat version was missing; read as nbformat 4")
    elif data["nbformat"] != 4:
        return None, (f"The notebook is in nbformat {shown(data['nbformat'])}; this course reads nbformat 4, "
                      f"which JupyterLab writes. {AGAIN}")
    notebook = clean_notebook(data, repairs)
    if notes is not None:
        notes.extend(repairs.summary())
    return notebook, None


def read_notebook(path: Path, notes: list[str] | None = None) -> tuple[dict | None, str | None]:
    """The notebook at ``path`` as :func:`parse_notebook` reads it."""
    try:
        raw = path.read_bytes()
    except OSError as error:
        return None, f"The notebook could not be read ({error.strerror}). {AGAIN}"
    return parse_notebook(raw, notes)


class Repairs:
    """What cleaning changed, in words: where, and what was wrong there."""

    def __init__(self):
        self.notes: list[str] = []

    def add(self, where: str, what: str) -> None:
        self.notes.append(f"{where}: {what}")

    def summary(self) -> list[str]:
        kept = self.notes[:MAX_NOTES]
        if len(self.notes) > MAX_NOTES:
            kept.append(f"...and {len(self.notes) - MAX_NOTES} more repairs of the notebook's structure.")
        return [f"The notebook breaks nbformat's schema; repaired: {note}" for note in kept]


def clean_notebook(data: dict, repairs: Repairs) -> dict:
    """A notebook that nbformat 4.5 validates, with what ``data`` holds of the right types."""
    metadata = data.get("metadata")
    if not isinstance(metadata, dict):
        repairs.add("the notebook's metadata", f"{_kind(metadata)}, not an object; left out")
        metadata = {}
    cells, ids = [], set()
    for index, cell in enumerate(data["cells"]):
        if not isinstance(cell, dict):
            repairs.add(f"cell {index + 1}", f"{_kind(cell)}, not a cell; left out")
            continue
        cleaned = clean_cell(cell, index, repairs)
        if cleaned["id"] in ids:
            cleaned["id"] = _fresh_id(ids, index)
        ids.add(cleaned["id"])
        cells.append(cleaned)
    notebook = {"cells": cells, "metadata": metadata, "nbformat": 4, "nbformat_minor": NBFORMAT_MINOR}
    if not _valid({**notebook, "cells": []}):
        repairs.add("the notebook's metadata", "a field of the wrong type (kernelspec, language_info...); left out")
        notebook["metadata"] = {}
    return notebook


def _fresh_id(taken: set[str], index: int) -> str:
    candidate, n = f"repaired-{index + 1}", 0
    while candidate in taken:
        n += 1
        candidate = f"repaired-{index + 1}-{n}"
    return candidate


def clean_cell(cell: dict, index: int, repairs: Repairs) -> dict:
    """The notebook's ``index``-th cell with the fields its type allows, each of the right type."""
    where = f"cell {index + 1}"
    kind = cell.get("cell_type")
    if kind not in CELL_TYPES:
        repairs.add(where, f"cell_type {shown(kind)} is not code, markdown or raw; read as a raw cell (not run)")
        kind = "raw"
    source = cell.get("source", "")
    if isinstance(source, list) and all(isinstance(line, str) for line in source):
        source = "".join(source)
    if not isinstance(source, str):
        repairs.add(where, f"its source is {_kind(source)} that is not all text; read as empty")
        source = ""
    metadata = clean_metadata(cell.get("metadata", {}), where, repairs)
    cell_id = cell.get("id")
    cleaned = {"id": cell_id if isinstance(cell_id, str) and CELL_ID.match(cell_id) else f"repaired-{index + 1}",
               "cell_type": kind, "metadata": metadata, "source": source}
    if kind == "code":
        count = cell.get("execution_count")
        cleaned["execution_count"] = count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 \
            else None
        outputs = cell.get("outputs", [])
        cleaned["outputs"] = outputs if isinstance(outputs, list) else []
    elif isinstance(cell.get("attachments"), dict):
        cleaned["attachments"] = cell["attachments"]
    if not _valid(_alone(cleaned)):
        cleaned.pop("attachments", None)
        if kind == "code":
            kept = [output for output in cleaned["outputs"] if _valid(_alone({**cleaned, "outputs": [output]}))]
            if len(kept) < len(cleaned["outputs"]):
                repairs.add(where, f"{len(cleaned['outputs']) - len(kept)} malformed output(s) left out")
            cleaned["outputs"] = kept
    if not _valid(_alone(cleaned)):
        repairs.add(where, "a metadata field of the wrong type left out")
        cleaned["metadata"] = {key: metadata[key] for key in ("nbgrader", "tags") if key in metadata}
    return cleaned


def clean_metadata(metadata: object, where: str, repairs: Repairs) -> dict:
    """A cell's metadata: an object, whose ``tags`` are unique strings without commas and whose
    ``nbgrader`` fields have nbgrader's types."""
    if not isinstance(metadata, dict):
        repairs.add(where, f"its metadata is {_kind(metadata)}, not an object; left out")
        return {}
    metadata = dict(metadata)
    tags = metadata.get("tags")
    if "tags" in metadata and not (isinstance(tags, list) and all(isinstance(t, str) and t and "," not in t
                                                                   for t in tags) and len(set(tags)) == len(tags)):
        repairs.add(where, "its tags are not a list of distinct words; left out")
        del metadata["tags"]
    if "nbgrader" in metadata:
        nbgrader = metadata["nbgrader"]
        if not isinstance(nbgrader, dict):
            repairs.add(where, f"its nbgrader metadata is {_kind(nbgrader)}, not an object; left out")
            del metadata["nbgrader"]
        else:
            metadata["nbgrader"] = clean_nbgrader(nbgrader, where, repairs)
    return metadata


def clean_nbgrader(nbgrader: dict, where: str, repairs: Repairs) -> dict:
    """nbgrader's fields of one cell that have the types nbgrader gives them; other keys are kept
    as they are (nbgrader reads none of them)."""
    cleaned = {}
    for key, value in nbgrader.items():
        wanted = NBGRADER_FIELDS.get(key)
        if wanted is None or _is(value, wanted):
            cleaned[key] = value
        else:
            repairs.add(where, f"nbgrader's {key!r} is {_kind(value)} {shown(value)}; left out")
    return cleaned


def _is(value: object, wanted: type) -> bool:
    if wanted is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    if wanted is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, wanted)


def _alone(cell: dict) -> dict:
    return {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": NBFORMAT_MINOR}


def _valid(notebook: dict) -> bool:
    try:
        _VALIDATOR.validate(notebook)
    except ValidationError:
        return False
    return True


_VALIDATOR = get_validator(version=4, version_minor=NBFORMAT_MINOR)
