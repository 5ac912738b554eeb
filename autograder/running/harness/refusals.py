"""What a run may not do, and how it is stopped: the audit hook (:func:`install`), which ends the
run on what only an attack does and refuses what a grading run has no use for, and the functions
that no audit event covers, replaced by refusals (:data:`REFUSED_FUNCTIONS`).

See :mod:`harness.guard` for the whole of the guard and why each part is there.
"""

from __future__ import annotations

import contextlib
import os
import sys

from transformer_lm.sandboxed import memory_cap

from .guard import TAMPERED_EXIT, trusted_code
from .sealed_code import GUARD_MARK, replace_everywhere
from .type_objects import freeze

ATTACKS = frozenset({"gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys.settrace", "sys.setprofile",
                     "sys._current_frames"})
"""Audit events only an attack raises (besides every ``ctypes.*`` event)."""
REFUSED = memory_cap.PROCESS_EVENTS | memory_cap.MAPPING_EVENTS | {"_thread.start_new_thread"}
"""Audit events a grading run refuses: a run makes no processes and no threads, and maps no memory
(which no measure of what a call holds would count)."""
FUNCTION_PARTS = frozenset({"__code__", "__defaults__", "__kwdefaults__"})
REFUSED_WHY = "a grading run starts no threads or programs and handles no signals ({})"
"""What a refused function of :data:`REFUSED_FUNCTIONS` says."""
CAPPED = (memory_cap.KERNEL_HELD_EVENTS, memory_cap.GROW_PIPE)
"""What else a capped run refuses: what the kernel would hold bytes in outside its cap."""
UNCAPPED = (frozenset(), ("", None))
"""What else a run without a cap refuses: nothing (a pipe it grows counts against its user's quota)."""
KERNEL_HELD_HOLDERS: list[str] = []
"""The modules that hold a function of ``memory_cap.KERNEL_HELD_FUNCTIONS`` (:func:`prepare`)."""


def prepare() -> None:
    """Done once in the server, before any run forks: replaces :data:`REFUSED_FUNCTIONS` by
    refusals wherever a loaded module holds them (the server itself starts no thread or program and
    handles no signal). Every run is a fork of the server's template, made after this, so it starts
    with them replaced, without walking every loaded module again (which took a run 40 ms); a module
    a run loads later takes the refusal from the module it imports it from. It also lists the
    modules that hold what makes a kernel buffer (:data:`KERNEL_HELD_HOLDERS`), which only a capped
    run refuses (the server makes pipes for each run)."""
    _refuse(REFUSED_FUNCTIONS)
    held = memory_cap.kernel_held_stand_ins()
    KERNEL_HELD_HOLDERS[:] = [name for name, module in sys.modules.items()
                              if any(id(value) in held for value in getattr(module, "__dict__", {}).values())]


def install(send, capped: bool = False) -> None:
    """Adds the run's audit hook (what it ends and refuses: :mod:`harness.guard`'s docstring).
    Everything it uses is its own, out of reach; it reports with ``send(event, **fields)`` before it ends a run.
    The functions no audit event covers were replaced in the server (:func:`prepare`). A ``capped``
    run also makes nothing whose bytes the kernel would hold outside its cap (the cap's
    ``KERNEL_HELD_EVENTS``, ``GROW_PIPE`` and, replaced here in :data:`KERNEL_HELD_HOLDERS`,
    ``KERNEL_HELD_FUNCTIONS``)."""
    exit_, modules, attacks, refused, parts, mark = os._exit, sys.modules, ATTACKS, REFUSED, FUNCTION_PARTS, GUARD_MARK
    (held, (grow, size_command)), why = CAPPED if capped else UNCAPPED, memory_cap.KERNEL_HELD
    if capped:
        memory_cap.replace_in([modules[name] for name in KERNEL_HELD_HOLDERS], memory_cap.kernel_held_stand_ins())
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
        elif event in held or (event == grow and args[1] == size_command):
            with contextlib.suppress(BaseException):
                send("refused", what=event)
            raise PermissionError(why.format(event))
        elif event in ("object.__setattr__", "object.__delattr__") and args[1] in parts and (
                args[1] == "__code__" or getattr(args[0], "__code__", None) in trusted):
            tamper(f"{event} {args[1]}")  # namedtuple sets its own functions' defaults: only the grader's are kept
        elif event == "object.__getattr__" and args[1] == "__code__" and getattr(args[0], "__globals__", None) is mark:
            tamper("reading a guard's code")
        elif event == "import" and (args[0] in modules or args[0] in loaded):
            tamper(f"loading {args[0]} again")

    sys.addaudithook(hook)


REFUSED_FUNCTIONS = {"_thread": ("start_new_thread", "start_new"), "_posixsubprocess": ("fork_exec",),
                     "_signal": ("signal", "setitimer", "alarm", "set_wakeup_fd"),
                     "signal": ("signal", "setitimer", "alarm", "set_wakeup_fd")}
"""What a grading run has no use for, and that no audit event covers: starting a thread (its code
would run beside the probes, outside their view), starting a program past ``subprocess``'s audit
event, and handling signals (a handler runs in the middle of the grader's own code)."""


def _refuse(functions: dict[str, tuple[str, ...]]) -> None:
    """Replaces each of ``functions`` (module name -> names), wherever a loaded module holds it, by
    a function that refuses; the originals are dropped (loading their module again is refused)."""
    replace_everywhere(memory_cap.stand_ins(functions, REFUSED_WHY, sys.modules.get))
