"""A run's guard: what keeps the code a run executes from changing how the run is checked.

Student code and the probes share one process, so the probes' trace and records cannot be out of
the student's reach the way the server is. The guard makes every way we know of to change them
either impossible or visible; a run that tries one exits at once with :data:`TAMPERED_EXIT`, which
the trusted side reads as tampering, whatever the run reported before.

* **An audit hook** (PEP 578: once added, no Python code can remove it). It ends the run on what
  only an attack does (every ``ctypes`` event, such as an object made at an address;
  ``gc.get_objects`` and its kin, which find any object; ``sys.settrace``/``setprofile``, which
  rewrite a running frame's variables; ``sys._current_frames``; assigning a function's ``__code__``
  or defaults; loading a module again) and refuses what a grading run has no use for (new processes and threads).
* **ctypes disarmed** (:func:`disarm_ctypes`): the one module that writes memory without an audit
  event can make, call and show nothing in a run.
* **Frozen classes**: the trace's classes, PyTorch's mode classes, ``torch.Tensor`` and its
  storage, the profiler's events, the JSON encoder and this package's classes get
  ``Py_TPFLAGS_IMMUTABLETYPE``, so none of their methods can be replaced.
* **Bound names**: the code that runs while a student's code is on the stack (the trace's
  accounting, its notes, the witness) finds Python's builtins and its helpers in its own defaults,
  so a name rebound for a moment (``builtins.max``) changes nothing it counts.
* **A snapshot** of every function the trusted code calls (the harness, the probes, json,
  safetensors, the parts of PyTorch that run a probe or switch a trace), compared before and after
  every probe.
* **PyTorch's switches of the trace** (popping a mode, disabling Python dispatch or torch
  functions, excluding dispatch keys, calling a kernel for a given key, redispatching): while a
  probe runs, only PyTorch itself and the grader may use them; the originals are out of reach.

What the trace sees is reported as it happens (:func:`trace`), so nothing a student's code does
later can take it back.
"""

from __future__ import annotations

import _ctypes
import contextlib
import ctypes
import functools
import json
import os
import re
import sys
import types
import warnings
import weakref

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from transformer_lm.sandboxed import outside, probes

TAMPERED_EXIT = 87
"""The exit status of a run that its own code tried to tamper with."""
IMMUTABLE_TYPE = 1 << 8
"""``Py_TPFLAGS_IMMUTABLETYPE``: a class whose attributes cannot be set or deleted."""
CELL_FILE = re.compile(r"<ipython-input-(\d+)-")
"""How IPython names a cell's code: by the execution count it ran under."""
COURSE_CODE_COUNT = -1
"""What a note records for a frame of the course's code (:data:`~transformer_lm.sandboxed.probes.COURSE_CODE_FILE`)."""
ATTACKS = frozenset({"gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys.settrace", "sys.setprofile",
                     "sys._current_frames"})
"""Audit events only an attack raises (besides every ``ctypes.*`` event)."""
REFUSED = outside.PROCESS_EVENTS | {"_thread.start_new_thread", "mmap.__new__"}
"""Audit events a grading run refuses: a run makes no processes and no threads, and maps no memory
(which no measure of what a call holds would count)."""
FUNCTION_PARTS = frozenset({"__code__", "__defaults__", "__kwdefaults__"})
SWITCHES = ("_op_dk", "redispatch_boxed")
"""How an operator can be called past the dispatcher's own entry, for a dispatch key or key set
the caller chooses: an operator's kernel caller (``OpOverload._op_dk``) and its handle's
``redispatch_boxed``. Nothing then sees the call, neither a Python mode nor PyTorch's profiler; so
while a probe runs, only the grader's own code may use them."""
PROFILER_SWITCHES = ("_prepare_profiler", "_enable_profiler", "_disable_profiler", "_enable_profiler_legacy",
                     "_disable_profiler_legacy", "_enable_record_function", "_clear_callbacks",
                     "_set_empty_test_observer")
"""PyTorch's profiler, which the harness runs as a second witness of every operator a probe calls
(:mod:`harness.run`): while a probe runs, only the grader's own code may start or stop it."""
WATCHED_MODULES = ("json", "json.encoder", "json.decoder", "safetensors", "safetensors.torch", "torch._C",
                   "torch._C._autograd", "torch.overrides", "torch.utils._python_dispatch", "torch.autograd.graph")
"""Modules whose functions the trusted code calls: how a probe's trace is switched on and off, and
how its record is written (with the grader's own modules, :func:`snapshot`)."""


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


def _codes(objects) -> set[types.CodeType]:
    """The code objects of ``objects`` (functions, classes' methods), nested ones included."""
    todo = []
    for obj in objects:
        obj = getattr(obj, "__wrapped__", obj)  # a context manager's generator function, say
        if isinstance(obj, types.FunctionType):
            todo.append(obj.__code__)
        elif isinstance(obj, type):
            todo += [m.__code__ for m in vars(obj).values() if isinstance(m, types.FunctionType)]
            todo += [m.__func__.__code__ for m in vars(obj).values()
                     if isinstance(m, (staticmethod, classmethod)) and isinstance(m.__func__, types.FunctionType)]
    codes = set()
    while todo:
        code = todo.pop()
        codes.add(code)
        todo += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return codes


def _own(name: str) -> bool:
    """Whether a module is the grader's: this package, or the probes (with what they measure outside torch)."""
    return name == __package__ or name.startswith(f"{__package__}.") or name in (probes.__name__, outside.__name__)


def snapshot() -> tuple[tuple[dict, str, object], ...]:
    """What the trusted code calls, by module and name: every name of the grader's own modules,
    and every function, class and module of the watched modules."""
    entries = []
    for name in [m for m in sys.modules if m in WATCHED_MODULES or _own(m)]:
        space = vars(sys.modules[name])
        entries += [(space, key, value) for key, value in space.items()
                    if _own(name) or callable(value) or isinstance(value, types.ModuleType)]
    return tuple(entries)


def checker(send, entries: tuple[tuple[dict, str, object], ...]):
    """``checked()``: ends the run when a name of ``entries`` no longer holds what it held."""

    def checked(_entries=entries, _send=send, _exit=os._exit) -> None:
        for space, name, value in _entries:
            if space.get(name) is not value:
                try:
                    _send("tampered", what=f"{name} was replaced")
                finally:
                    _exit(TAMPERED_EXIT)

    return checked


def own_classes() -> list[type]:
    """The classes this package and the probes define."""
    return [value for name, module in list(sys.modules.items()) if _own(name)
            for value in vars(module).values() if isinstance(value, type) and value.__module__ == name]


def trusted_code() -> frozenset[types.CodeType]:
    """The grader's own code objects in this process: this package's and the probes'."""
    objects = [value for name, module in list(sys.modules.items()) if _own(name)
               for value in vars(module).values()]
    return frozenset(_codes(objects))


def prepare(probe_code: types.CodeType) -> None:
    """Done once in the server, before any run: freezes the classes a probe goes through and puts
    every switch of the trace behind a guard (:func:`_guards`). ``probe_code`` is the code of the
    harness's probe call: a probe runs while a frame of it is on the stack."""
    _guards(trusted_code(), probe_code)
    freeze(*FROZEN_CLASSES(), *own_classes())


def FROZEN_CLASSES() -> tuple[type, ...]:  # noqa: N802 - a constant made once torch and json are loaded
    """PyTorch's and json's classes that a probe's trace, its witness and its record go through."""
    return (torch.Tensor, TorchDispatchMode, TorchFunctionMode, torch._ops.OpOverload, torch._ops.OpOverloadPacket,
            torch._C._DispatchOperatorHandle, torch.UntypedStorage, torch._C._autograd.ProfilerEvent,
            json.JSONEncoder, json.JSONDecoder)


GUARD_MARK: dict = {}
"""The globals of every guard: how the audit hook knows one (a function's globals cannot be changed)."""


def _placeholders(source: str) -> types.CodeType:
    """The code of the one function ``source`` defines, whose string constants are placeholders."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)  # calling a str: it is a placeholder
        module = compile(source, "<the grader's guard>", "exec")
    return next(c for c in module.co_consts if isinstance(c, types.CodeType))


GUARD_CODE = _placeholders('''
def guard(*args, **kwargs):
    "CHECK"("NAME")
    return "ORIGINAL"(*args, **kwargs)
''')
SEAL_CODE = _placeholders('''
def seal(kind, *args):
    "CHECK"(kind)
    return "GETATTR"("TOTALS", kind)(*args)
''')
MADE_CODE = _placeholders('''
def made(*args, **kwargs):
    return "GUARD_RESULT"("ORIGINAL"(*args, **kwargs))
''')
"""The guards' code, compiled once: a guard of each operator's kernel caller is made from it."""


def _with_constants(code: types.CodeType, name: str, constants: dict, _function=types.FunctionType, _mark=GUARD_MARK,
                    _type=type, _str=str, _tuple=tuple) -> types.FunctionType:
    """The function of ``code`` (:func:`_placeholders`) with each string constant of ``constants``
    replaced by its object (``"ORIGINAL"(...)`` then calls the original): those objects are then
    reachable only through the function's ``__code__``, which the audit hook does not let a run
    read. What it uses is bound in its defaults: a trace's seal is made while a probe runs."""
    consts = _tuple(constants.get(c, c) if _type(c) is _str else c for c in code.co_consts)
    return _function(code.replace(co_consts=consts), _mark, name)


def _replace_everywhere(found: dict[int, tuple[object, object]]) -> None:
    """Each loaded module's names for an ``original`` of ``found`` (by id: original, replacement)
    point at its replacement from now on."""
    for module in list(sys.modules.values()):
        space = getattr(module, "__dict__", None)
        if isinstance(space, dict):
            for name, value in list(space.items()):
                if id(value) in found and value is found[id(value)][0]:
                    space[name] = found[id(value)][1]


def _guards(trusted: frozenset[types.CodeType], probe_code: types.CodeType) -> None:
    """Puts every switch behind a guard (:data:`SWITCHES`, :data:`PROFILER_SWITCHES`), wherever a
    loaded module holds it, and the kernel caller of every operator made later too (through
    ``_get_operation_overload``). A guard calls its switch outside a probe; during one, only when
    the grader's own code calls it, and otherwise ends the run as tampered."""

    def check(name: str, _getframe=sys._getframe, _exit=os._exit, _trusted=trusted, _probe=probe_code,
              _stderr=sys.__stderr__, _status=TAMPERED_EXIT) -> None:
        frame, caller, probes = _getframe(2), _getframe(2).f_code, 0
        while frame is not None:
            probes += frame.f_code is _probe
            frame = frame.f_back
        if probes > 1 or (probes and caller not in _trusted):
            _stderr.write(f"The grader stopped this run: {name} takes PyTorch's calls past the grader's trace.\n")
            _exit(_status)

    def guarded(original, name: str):
        return _with_constants(GUARD_CODE, name, {"CHECK": check, "NAME": name, "ORIGINAL": original})

    def guard_result(overload):
        """``_get_operation_overload``'s result with the kernel caller guarded."""
        op, op_dk, *rest = overload
        return (op, guarded(op_dk, "an operator's kernel caller"), *rest)

    profiler = vars(torch._C._autograd)
    found = {id(profiler[n]): (profiler[n], guarded(profiler[n], n)) for n in PROFILER_SWITCHES}
    overload = torch._C._get_operation_overload
    found[id(overload)] = (overload, _with_constants(MADE_CODE, "_get_operation_overload",
                                                     {"GUARD_RESULT": guard_result, "ORIGINAL": overload}))
    _replace_everywhere(found)
    handle = torch._C._DispatchOperatorHandle
    handle.redispatch_boxed = guarded(handle.redispatch_boxed, "redispatch_boxed")
    for namespace in vars(torch.ops).values():
        for packet in list(getattr(namespace, "__dict__", {}).values()):
            for op in list(getattr(packet, "__dict__", {}).values()):
                if isinstance(op, torch._ops.OpOverload):
                    op._op_dk = guarded(op._op_dk, "an operator's kernel caller")


def sealed_traces():
    """A maker of :class:`~transformer_lm.sandboxed.probes.TensorTrace` s whose totals no other code
    can reach, for :data:`~transformer_lm.sandboxed.probes.TRACE_FACTORY` in a run.

    Each trace keeps its :class:`~transformer_lm.sandboxed.probes.TraceTotals` in the constants of
    a function of its own (its seal), which the audit hook does not let a run read; the trace's
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

    def make(_code=SEAL_CODE, _check=check, _parts=parts, _totals=probes.TraceTotals,
             _names=probes.TraceTotals.NAMES, _base=probes.TensorTrace, _with=_with_constants,
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


def install(send) -> None:
    """Adds the run's audit hook (see the module docstring). Everything it uses is its own, out of
    reach; it reports with ``send(event, **fields)`` before it ends a run."""
    exit_, modules, attacks, refused, parts, mark = os._exit, sys.modules, ATTACKS, REFUSED, FUNCTION_PARTS, GUARD_MARK
    loaded = frozenset(modules)  # taken out of sys.modules and loaded again is loaded again
    trusted, getframe, freezing = trusted_code(), sys._getframe, freeze.__code__

    def tamper(what: str):
        with contextlib.suppress(BaseException):
            send("tampered", what=what)
        exit_(TAMPERED_EXIT)

    def hook(event: str, args: tuple) -> None:
        if event.startswith("ctypes.") and getframe(1).f_code is freezing:
            return  # the grader freezing a trace's class of its own
        if event.startswith("ctypes.") or event in attacks:
            tamper(event)
        elif event in refused:
            with contextlib.suppress(BaseException):
                send("refused", what=event)
            raise PermissionError(f"a grading run starts no processes or threads and maps no memory ({event})")
        elif event in ("object.__setattr__", "object.__delattr__") and args[1] in parts and (
                args[1] == "__code__" or getattr(args[0], "__code__", None) in trusted):
            tamper(f"{event} {args[1]}")  # namedtuple sets its own functions' defaults: only the grader's are kept
        elif event == "object.__getattr__" and args[1] == "__code__" and getattr(args[0], "__globals__", None) is mark:
            tamper("reading a guard's code")
        elif event == "import" and (args[0] in modules or args[0] in loaded):
            tamper(f"loading {args[0]} again")

    _refuse(REFUSED_FUNCTIONS)
    sys.addaudithook(hook)


REFUSED_FUNCTIONS = {"_thread": ("start_new_thread", "start_new"), "_posixsubprocess": ("fork_exec",),
                     "_signal": ("signal", "setitimer", "alarm", "set_wakeup_fd"),
                     "signal": ("signal", "setitimer", "alarm", "set_wakeup_fd"),
                     "_tracemalloc": ("start", "stop", "clear_traces", "reset_peak")}
"""What a grading run has no use for, and that no audit event covers: starting a thread (its code
would run beside the probes, outside their view), starting a program past ``subprocess``'s audit
event, handling signals (a handler runs in the middle of the grader's own code), and switching
``tracemalloc``, which measures what a call holds outside torch
(:mod:`transformer_lm.sandboxed.outside` keeps its own references)."""


def _refuse(functions: dict[str, tuple[str, ...]]) -> None:
    """Replaces each of ``functions`` (module name -> names), wherever a loaded module holds it, by
    a function that refuses; the originals are dropped (loading their module again is refused)."""
    found = {}
    for module, names in functions.items():
        for name in names:
            original = getattr(sys.modules.get(module), name, None)
            if original is not None:
                found[id(original)] = (original, _refusal(f"{module}.{name}"))
    _replace_everywhere(found)


def _refusal(name: str):
    def refused(*args, **kwargs):
        raise PermissionError(f"a grading run starts no threads or programs, handles no signals and leaves "
                              f"tracemalloc to the grader ({name})")

    return refused


def trace_classes(send, names: frozenset[str], getframe=sys._getframe):
    """A torch-function mode and a dispatch mode that report each call of a function or ATen
    operator of ``names`` as it happens, with the execution counts of the notebook cells on the
    stack (innermost first), and each torch function that made a tensor while no operator passed
    the dispatch mode, as :data:`~transformer_lm.sandboxed.probes.UNTRACED`; frozen, and with
    nothing of their own to change."""

    def note(name: str, _names=names | {probes.UNTRACED}, _send=send, _getframe=getframe, _cell=CELL_FILE.match,
             _course=probes.COURSE_CODE_FILE, _int=int, _course_count=COURSE_CODE_COUNT) -> None:
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

    operators = [0]  # how many the dispatch mode has seen: a function that made a tensor without one bypassed it

    class FunctionNames(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None, _note=note, _getattr=getattr,
                               _operators=operators, _untraced=probes.made_untraced, _name=probes.UNTRACED):
            name = _getattr(func, "__name__", "")
            _note(name)
            before = _operators[0]
            result = func(*args, **(kwargs or {}))
            if _operators[0] == before and _untraced(name, result, args, kwargs or {}):
                _note(_name)
            return result

    class OperatorNames(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None, _note=note, _operators=operators):
            _operators[0] += 1
            _note(func.name())
            return func(*args, **(kwargs or {}))

    freeze(FunctionNames, OperatorNames)
    return FunctionNames, OperatorNames
