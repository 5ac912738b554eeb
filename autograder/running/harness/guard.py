"""A run's guard: what keeps the code a run executes from changing how the run is checked.

Student code and the probes share one process, so the probes' trace and records cannot be out of
the student's reach the way the server is. The guard makes every way we know of to change them
either impossible or visible; a run that tries one exits at once with :data:`TAMPERED_EXIT`, which
the trusted side reads as tampering, whatever the run reported before.

* **An audit hook** (PEP 578: once added, no Python code can remove it; :mod:`harness.refusals`). It
  ends the run on what only an attack does (every ``ctypes`` event, such as an object made at an address;
  ``gc.get_objects`` and its kin, which find any object; ``sys.settrace``/``setprofile``, which
  rewrite a running frame's variables; ``sys._current_frames``; assigning a function's ``__code__``
  or defaults; loading a module again) and refuses what a grading run has no use for (new processes and threads).
* **ctypes disarmed** (:func:`harness.type_objects.disarm_ctypes`): the one module that writes memory without an audit
  event can make, call and show nothing in a run.
* **Frozen classes**: the trace's classes, PyTorch's mode classes, ``torch.Tensor`` and its
  storage, the profiler's events, the JSON encoder and this package's classes get
  ``Py_TPFLAGS_IMMUTABLETYPE`` (:func:`harness.type_objects.freeze`), so none of their methods can be
  replaced.
* **Bound names**: the code that runs while a student's code is on the stack (the trace's
  accounting, its notes) finds Python's builtins and its helpers in its own defaults,
  so a name rebound for a moment (``builtins.max``) changes nothing it counts.
* **A snapshot** of every function the trusted code calls (the harness, the probes, json,
  safetensors, the parts of PyTorch that run a probe or switch a trace), compared before and after
  every probe.
* **PyTorch's switches of the trace** (popping a mode, disabling Python dispatch or torch
  functions, excluding dispatch keys, calling a kernel for a given key, redispatching): while a
  probe runs, only PyTorch itself and the grader may use them; the originals are out of reach
  (:mod:`harness.sealed_code`).

What the trace sees is reported as it happens (:mod:`harness.traces`), so nothing a student's code
does later can take it back.

This module decides what is the grader's own (its modules, their code and classes), keeps the
snapshot, puts the switches behind guards and prepares the server; the other parts live in the
modules named above.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import sys
import types

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from transformer_lm import sandboxed

from .sealed_code import GUARD_CODE, MADE_CODE, replace_everywhere, with_constants
from .type_objects import freeze

TAMPERED_EXIT = 87
"""The exit status of a run that its own code tried to tamper with."""
SWITCHES = ("_op_dk", "redispatch_boxed")
"""How an operator can be called past the dispatcher's own entry, for a dispatch key or key set
the caller chooses: an operator's kernel caller (``OpOverload._op_dk``) and its handle's
``redispatch_boxed``. Nothing then sees the call, neither a Python mode nor PyTorch's profiler; so
while a probe runs, only the grader's own code may use them."""
PROFILER_SWITCHES = ("_prepare_profiler", "_enable_profiler", "_disable_profiler", "_enable_profiler_legacy",
                     "_disable_profiler_legacy", "_enable_record_function", "_clear_callbacks",
                     "_set_empty_test_observer")
"""PyTorch's profiler: while a probe runs, only the grader's own code may start or stop it."""
WATCHED_MODULES = ("json", "json.encoder", "json.decoder", "safetensors", "safetensors.torch", "torch._C",
                   "torch._C._autograd", "torch.overrides", "torch.utils._python_dispatch", "torch.autograd.graph")
"""Modules whose functions the trusted code calls: how a probe's trace is switched on and off, and
how its record is written (with the grader's own modules, :func:`snapshot`)."""


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


SANDBOXED_OWN = frozenset(importlib.import_module(f"{sandboxed.__name__}.{name}").__name__
                          for name in sandboxed.PROBE_MODULES)
"""The grader's own modules of ``transformer_lm/sandboxed``: the probes' modules. Imported here, so
that each is loaded before :func:`snapshot` walks them."""


def _own(name: str) -> bool:
    """Whether a module is the grader's: this package, or the probes and their parts (:data:`SANDBOXED_OWN`)."""
    return name == __package__ or name.startswith(f"{__package__}.") or name in SANDBOXED_OWN


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


@functools.cache
def trusted_code() -> frozenset[types.CodeType]:
    """The grader's own code objects in this process: this package's and the probes'. Found once,
    in the server (:func:`prepare`), whose forks, the runs, all load the same modules before any
    student code runs."""
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
    """PyTorch's and json's classes that a probe's trace and its record go through (and the profiler's
    events, which the trace's guards keep to the grader)."""
    return (torch.Tensor, TorchDispatchMode, TorchFunctionMode, torch._ops.OpOverload, torch._ops.OpOverloadPacket,
            torch._C._DispatchOperatorHandle, torch.UntypedStorage, torch._C._autograd.ProfilerEvent,
            json.JSONEncoder, json.JSONDecoder)


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
        return with_constants(GUARD_CODE, name, {"CHECK": check, "NAME": name, "ORIGINAL": original})

    def guard_result(overload):
        """``_get_operation_overload``'s result with the kernel caller guarded."""
        op, op_dk, *rest = overload
        return (op, guarded(op_dk, "an operator's kernel caller"), *rest)

    profiler = vars(torch._C._autograd)
    found = {id(profiler[n]): (profiler[n], guarded(profiler[n], n)) for n in PROFILER_SWITCHES}
    overload = torch._C._get_operation_overload
    found[id(overload)] = (overload, with_constants(MADE_CODE, "_get_operation_overload",
                                                    {"GUARD_RESULT": guard_result, "ORIGINAL": overload}))
    replace_everywhere(found)
    handle = torch._C._DispatchOperatorHandle
    handle.redispatch_boxed = guarded(handle.redispatch_boxed, "redispatch_boxed")
    for namespace in vars(torch.ops).values():
        for packet in list(getattr(namespace, "__dict__", {}).values()):
            for op in list(getattr(packet, "__dict__", {}).values()):
                if isinstance(op, torch._ops.OpOverload):
                    op._op_dk = guarded(op._op_dk, "an operator's kernel caller")
