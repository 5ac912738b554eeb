"""What the guard writes into CPython's type objects, through ctypes, before any student code runs:
a class made immutable (:func:`freeze`), and ctypes itself left unable to act (:func:`disarm_ctypes`).

These are the only writes to raw memory the grader makes, each at an offset into ``PyTypeObject``
checked against types whose layout is known before anything is written; kept here, apart from what
decides *which* classes and code to trust (:mod:`harness.guard`), so that the offsets and the
writes can be read and checked on their own. The audit hook lets ctypes act only from
:func:`freeze` (:mod:`harness.refusals`).
"""

from __future__ import annotations

import _ctypes
import ctypes

IMMUTABLE_TYPE = 1 << 8
"""``Py_TPFLAGS_IMMUTABLETYPE``: a class whose attributes cannot be set or deleted."""


def _flags_offset() -> int:
    """Where a type object keeps its flags (``tp_flags``), found against types whose flags we know."""
    return next(off for off in range(0, 512, 8)
                if all(ctypes.c_ulong.from_address(id(t) + off).value == t.__flags__ for t in (int, str, dict, type)))


def freeze(*classes: type, _offset=_flags_offset(), _flag=IMMUTABLE_TYPE, _at=ctypes.c_ulong.from_address) -> None:
    """Makes ``classes`` immutable: no attribute of theirs can be set or deleted any more (their
    subclasses and instances stay as they are). What it writes with is bound here, out of reach."""
    for cls in classes:
        if isinstance(cls, type):  # a class, and nothing else: this writes into the object itself
            _at(id(cls) + _offset).value |= _flag


TYPE_SLOTS = {"tp_call": -40, "tp_as_buffer": -8, "tp_new": 144}
"""Where a type object keeps the slots :func:`disarm_ctypes` empties, in bytes from its flags
(CPython's ``PyTypeObject`` on a 64-bit machine, the same from 3.8 to 3.13; checked against types
whose slots we know before anything is written)."""


def _slot_offsets(flags: int) -> dict[str, int]:
    offsets = {name: flags + delta for name, delta in TYPE_SLOTS.items()}

    def held(cls: type, slot: str) -> bool:
        return ctypes.c_void_p.from_address(id(cls) + offsets[slot]).value is not None

    if not (held(type(len), "tp_call") and not held(int, "tp_call") and held(bytes, "tp_as_buffer")
            and not held(int, "tp_as_buffer") and held(int, "tp_new") and not held(type(iter([])), "tp_new")):
        raise RuntimeError("This Python's type objects are not laid out as harness.guard expects: "
                           "ctypes cannot be disarmed, so no run is safe to grade here.")
    return offsets


def disarm_ctypes(_offsets=_slot_offsets(_flags_offset()), _at=ctypes.c_void_p.from_address) -> None:
    """Leaves ctypes, which every run has loaded (PyTorch and this guard import it), unable to act.

    ctypes calls C and writes any memory without one audit event (``memmove``, ``cast``, a pointer's
    index, a ``py_object`` whose bytes were written), so it would undo every other guard. Done in
    each run before its first cell: no ctypes object can be made any more (every ctypes class gets
    the constructor of ``None``, which makes nothing: it raises when given arguments and otherwise
    returns ``None``; a class made later inherits it), none can be called (``tp_call``) or seen as
    bytes (``tp_as_buffer``), and ``Py_INCREF``/``Py_DECREF`` are gone. Classes can still be made,
    as modules that PyTorch imports late do. What is left, an object made at an address
    (``from_address``, ``from_buffer``), is what the audit hook ends the run for; :func:`freeze`
    alone may."""
    classes, todo = set(), [_ctypes._SimpleCData.__base__]
    while todo:
        cls = todo.pop()
        classes.add(cls)
        todo += [sub for sub in type.__subclasses__(cls) if sub not in classes]
    nothing = _at(id(type(None)) + _offsets["tp_new"]).value
    for cls in classes:
        _at(id(cls) + _offsets["tp_new"]).value = nothing
        _at(id(cls) + _offsets["tp_call"]).value = None
        _at(id(cls) + _offsets["tp_as_buffer"]).value = None
    for name in ("Py_INCREF", "Py_DECREF"):
        vars(_ctypes).pop(name, None)
