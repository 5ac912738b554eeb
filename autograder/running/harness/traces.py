"""The traces of a run, built so that no code the run executes can change or silence them: the
sealed :class:`~transformer_lm.sandboxed.tensor_trace.TensorTrace` s the probes count memory and
work with (:func:`sealed_traces`), and the frozen modes that report each watched call as it
happens (:func:`trace_classes`).

They are the sandbox's versions of :mod:`transformer_lm.sandboxed.tensor_trace` and
:mod:`transformer_lm.sandboxed.call_trace`, which the student's kernel runs as they are.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import types
import weakref

from torch.overrides import TorchFunctionMode

from transformer_lm.sandboxed import call_trace, tensor_trace

from .guard import TAMPERED_EXIT
from .sealed_code import GUARD_MARK, SEAL_CODE, with_constants
from .type_objects import freeze

CELL_FILE = re.compile(r"<ipython-input-(\d+)-")
"""How IPython names a cell's code: by the execution count it ran under."""
COURSE_CODE_COUNT = -1
"""What a note records for a frame of the course's code
(:data:`~transformer_lm.sandboxed.call_trace.COURSE_CODE_FILE`)."""


def sealed_traces():
    """A maker of :class:`~transformer_lm.sandboxed.tensor_trace.TensorTrace` s whose totals no other
    code can reach, for :data:`~transformer_lm.sandboxed.tensor_trace.TRACE_FACTORY` in a run.

    Each trace keeps its :class:`~transformer_lm.sandboxed.tensor_trace.TraceTotals` in the constants
    of a function of its own (its seal), which the audit hook does not let a run read; the trace's
    class, made for it alone and frozen, holds the seal in its methods' defaults. The seal does
    what the totals' own methods do, and nothing else: only the trace's methods may add to them
    (the seal checks who calls it); anyone may read them, or say that a tensor was freed, which
    the totals believe only once the tensor's memory is gone. What the maker uses is bound in its
    defaults, out of reach."""
    def dispatch(self, func, types, args=(), kwargs=None, _seal="SEAL", _finalize=weakref.finalize):
        result = func(*args, **(kwargs or {}))
        for storage in _seal("operator", func, args, kwargs or {}, result):
            _finalize(storage, _seal, "freed", storage.data_ptr())
        return result

    def saved_tensor(self, shape, _seal="SEAL"):
        _seal("saved_tensor", shape)

    def record(self, prefix, _seal="SEAL"):
        return _seal("record", prefix)

    def value(self, name, _seal="SEAL"):
        return _seal("value", name)  # also each total's property: no value set on the trace takes its place

    writers = types.MappingProxyType({"operator": dispatch.__code__, "saved_tensor": saved_tensor.__code__})

    def check(kind: str, _writers=writers, _readers=frozenset({"record", "value", "freed"}), _type=type, _str=str,
              _getframe=sys._getframe, _exit=os._exit, _status=TAMPERED_EXIT) -> None:
        if _type(kind) is not _str or (kind not in _readers and _getframe(2).f_code is not _writers.get(kind)):
            _exit(_status)

    parts = tuple((name, f.__code__, f.__defaults__) for name, f in (
        ("__torch_dispatch__", dispatch), ("saved_tensor", saved_tensor), ("record", record), ("__getattr__", value)))

    def make(_code=SEAL_CODE, _check=check, _parts=parts, _totals=tensor_trace.TraceTotals,
             _names=tensor_trace.TraceTotals.NAMES, _base=tensor_trace.TensorTrace, _with=with_constants,
             _function=types.FunctionType, _mark=GUARD_MARK, _getattr=getattr, _partial=functools.partial,
             _property=property, _type=type, _tuple=tuple, _freeze=freeze):
        seal = _with(_code, "seal", {"CHECK": _check, "GETATTR": _getattr, "TOTALS": _totals()})
        methods = {name: _function(code, _mark, name, _tuple(seal if d == "SEAL" else d for d in defaults))
                   for name, code, defaults in _parts}
        totals = {name: _property(_partial(methods["__getattr__"], name=name)) for name in _names}
        cls = _type("SealedTrace", (_base,), {**methods, **totals})
        _freeze(cls)
        return cls()

    return make


def trace_classes(send, names: frozenset[str], getframe=sys._getframe):
    """A torch-function mode and a dispatch mode that report each call of a function or ATen
    operator of ``names`` as it happens, with the execution counts of the notebook cells on the
    stack (innermost first); frozen, and with nothing of their own to change. They only explain a
    failed item (which forbidden name ran, and from which cell): no point rests on them."""

    def note(name: str, _names=names, _send=send, _getframe=getframe, _cell=CELL_FILE.match,
             _course=call_trace.COURSE_CODE_FILE, _int=int, _course_count=COURSE_CODE_COUNT) -> None:
        if name not in _names:
            return
        counts, frame = [], _getframe(2)
        while frame is not None:
            filename = frame.f_code.co_filename
            match = _cell(filename)
            count = _int(match.group(1)) if match else _course_count if filename == _course else None
            if count is not None and count not in counts:
                counts.append(count)
            frame = frame.f_back
        _send("ran", name=name, counts=counts)

    class FunctionNames(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None, _note=note, _getattr=getattr):
            _note(_getattr(func, "__name__", ""))
            return func(*args, **(kwargs or {}))

    class OperatorNames(tensor_trace.DispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None, _note=note):
            _note(func.name())
            return func(*args, **(kwargs or {}))

    freeze(FunctionNames, OperatorNames)
    return FunctionNames, OperatorNames
