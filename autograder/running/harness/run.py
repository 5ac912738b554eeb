"""The run: a student's notebook code and the probes of each graded item, in the sandbox.

A run is a process of its own (:mod:`autograder.running.harness.isolate`), forked from the template of the warm server
(:mod:`autograder.running.harness.template`, :mod:`autograder.running.harness.serve`). It reads the plan and hidden inputs the trusted side has just
written, runs each code cell of the plan in an IPython shell (so magics work as in Jupyter), and
after the answer cell of an item runs that item's probe calls. It reports every step through
its server (:mod:`autograder.running.harness.report`): ``cell_start`` and ``cell_end``, ``probe_start``
and ``probe_end``, each probe's record as a file, and ``done``. The trusted side reads the
journal to know what finished, and where a run that died (timeout, memory, segfault,
``os._exit``) was at that moment.

This package is copied into the sandbox on its own: it imports only the standard library, torch,
safetensors, IPython and ``transformer_lm/sandboxed`` (the probes and how a call travels,
:func:`transformer_lm.sandboxed.wire.call_probe`), never the grader, the hidden checks or the
reference. It judges nothing.

Before any student code, a run takes out of PyTorch what its items forbid (:mod:`harness.absence`)
and, when its plan holds a capped check, caps its memory for good (:mod:`transformer_lm.sandboxed.memory_cap`).

A run of the plan's ``late`` probe calls gets the course's own code for the answers that those
probes' items build on (:class:`CourseCode`), and nothing else of the course: an item that builds
on a wrong earlier answer is judged by such a run, so that one mistake costs points once.
"""

import contextlib
import importlib
import json
import os
import sys
import traceback
import types

import torch
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config
from safetensors import TensorSpec, serialize
from safetensors.torch import load_file

import transformer_lm
from transformer_lm.sandboxed import call_trace, memory_cap, probes, tensor_trace, wire
from transformer_lm.sandboxed.student_objects import ProbeError, builtin_exception

from . import absence, clock, guard, refusals, report, traces, type_objects

MAX_MESSAGE = 2000
MAX_VALUE = 20000


TRUSTED_FILES = tuple(os.path.dirname(path) + os.sep for path in (probes.__file__, __file__, torch.__file__,
                                                                    contextlib.__file__))
"""Where the code of a genuine probe failure lies: the probes, this harness, torch and Python's own
library (files on disk; student code has a cell's or a made-up file name)."""


def describe(error: BaseException) -> dict:
    """What a student may learn of an exception raised in a run, as event fields: ``error``, the
    nearest of Python's own exception types it is an instance of, or a probe's own message;
    and ``where``, the execution count of the notebook cell it was raised in and the line (for a call
    of what the run took out, ``cells`` too: the counts of the cells on the stack, innermost first,
    which say whose call it was). Never a
    message, class name or line text that the student's code could have made at run time: any of
    them could carry a hidden input out (the trusted side shows the line from the submitted cell).
    A probe's message counts as the probe's only when no student code is on its traceback: student
    code can import ProbeError and raise it with any text."""
    frames = list(traceback.walk_tb(error.__traceback__))
    if isinstance(error, ProbeError) and all(f.f_code.co_filename.startswith(TRUSTED_FILES) for f, _ in frames):
        return {"error": str(error.args[0])[:MAX_MESSAGE], "kind": "probe"}
    where, cells = None, []
    for frame, line in frames:
        match = traces.CELL_FILE.match(frame.f_code.co_filename)
        if match:
            where = [int(match.group(1)), line]
            cells.insert(0, int(match.group(1)))
    if isinstance(error, absence.Absent):  # it reached for what its item forbids (its words are not kept)
        return {"error": "Absent", "kind": "absent", "where": where, "cells": cells}
    return {"error": builtin_exception(error), "where": where}


class CourseCode:
    """The course's reference (``transformer_lm.instructor.reference``, sent as text: it is not importable
    here) and its stand-ins for students' answers, in the assignment's API
    (``<checks_dir>/stand_ins/<assignment>.py``), both compiled under
    :data:`~transformer_lm.sandboxed.call_trace.COURSE_CODE_FILE`."""

    def __init__(self, code: dict):
        instructor = types.ModuleType("transformer_lm.instructor")  # holds the reference alone, as text made it
        reference = types.ModuleType("transformer_lm.instructor.reference")
        reference.__file__ = call_trace.COURSE_CODE_FILE
        for module in (instructor, reference):
            sys.modules[module.__name__] = module  # dataclasses look their module up there
        exec(compile(code["reference"], call_trace.COURSE_CODE_FILE, "exec"), reference.__dict__)
        instructor.reference = reference
        transformer_lm.instructor = instructor
        self.stand_ins = compile(code["stand_ins"], call_trace.COURSE_CODE_FILE, "exec")
        self.names = set(code["names"])

    @contextlib.contextmanager
    def standing_in(self, namespace: dict, names: list[str]):
        """``namespace`` with the course's objects under ``names`` while the block runs. The
        stand-ins run in a copy of the namespace, so that the names they look up (a class they
        build, a function they call) are the student's own, except those stood in for."""
        scope = dict(namespace)
        exec(self.stand_ins, scope)
        for name in self.names - set(names):
            if name in namespace:
                scope[name] = namespace[name]
            else:
                scope.pop(name, None)
        saved = {name: namespace[name] for name in names if name in namespace}
        namespace.update({name: scope[name] for name in names})
        try:
            yield
        finally:
            for name in names:
                if name in saved:
                    namespace[name] = saved[name]
                else:
                    namespace.pop(name, None)


def probe(pid: str, call_text: str, tensors, namespace: dict, io: tuple, standing_in=None) -> None:
    """Runs the planned call ``pid`` (its plan as JSON text: a fresh copy for each call) on the
    student's objects under the trace, and reports its record, value or error. ``io`` is the
    run's ``(send, send_file, checked, trace, receive)``: ``checked()`` ends the run if anything the
    grader calls has changed since the run began: before the call, after it, and once its end is
    reported (what the student's code left to run later is caught then). A call with ``windows``
    is made once per window, each timed by the server (:mod:`harness.clock`), on inputs the server
    hands it then."""
    send, send_file, checked, trace, receive = io
    checked()
    send("probe_start", probe=pid)
    try:
        call = json.loads(call_text)
        owner = call.get("tensors_of", pid)
        if "windows" in call:
            with standing_in or contextlib.nullcontext():
                clock.clocked_call(pid, call, lambda kwargs, tensors: window_record(call, kwargs, tensors, namespace),
                                   (send, send_file, receive, as_safetensors))
            checked()
            send("probe_end", probe=pid, saved=True)
            checked()
            return
        own = {name: tensors[wire.tensor_key(owner, name)] for name in call["tensor_keys"]}
        modes = (contextlib.nullcontext, contextlib.nullcontext) if call.get("untraced") else trace
        with standing_in or contextlib.nullcontext(), modes[0](), modes[1]():
            value = wire.call_probe(call, namespace, own)
        checked()
        record = wire.as_record(value)
        if record is not None:
            send_file(f"{pid}.safetensors", as_safetensors(record))
            send("probe_end", probe=pid, saved=True)
        else:
            send("probe_end", probe=pid, value=plain_value(value))
    except BaseException as error:  # noqa: BLE001 - anything a student object raises is a result
        checked()
        send("probe_end", probe=pid, **{"kind": "todo" if isinstance(error, NotImplementedError) else "error",
                                        **describe(error)})
    checked()


def window_record(call: dict, kwargs: dict, tensors: dict, namespace: dict) -> dict:
    """The record of one timed window of ``call`` on ``tensors``, its keyword arguments those of the
    call updated with the window's."""
    arguments = {**call["arguments"], "call_kwargs": {**call["arguments"].get("call_kwargs", {}), **kwargs}}
    record = wire.as_record(wire.call_probe({**call, "arguments": arguments}, namespace, tensors))
    if record is None:
        raise ProbeError("A timed call returned no tensors.")
    return record


def as_safetensors(record: dict, _spec=TensorSpec, _serialize=serialize, _bytes=bytes) -> bytes:
    """A probe's record (name -> contiguous CPU tensor) as safetensors' bytes, made by safetensors'
    own serializer from each tensor's memory as PyTorch gives it: the same bytes as
    ``safetensors.torch.save``, which reaches that memory through ctypes, disarmed in a run."""
    specs = {name: _spec(dtype=str(tensor.dtype).removeprefix("torch."), shape=list(tensor.shape),
                         data_ptr=tensor.data_ptr(), data_len=tensor.numel() * tensor.element_size())
             for name, tensor in record.items()}
    return _bytes(_serialize(specs, metadata=None))


def plain_value(value):
    """A probe's plain value as JSON takes it (numbers, strings, lists and string-keyed dicts of
    them), or None: nothing a student's object could make speak for itself."""
    if type(value) in (int, float, bool, str) or value is None:
        return value if type(value) is not str or len(value) <= MAX_VALUE else None
    if type(value) in (list, tuple) and len(value) <= MAX_VALUE:
        items = [plain_value(item) for item in value]
        return None if any(item is None for item in items) else items
    if type(value) is dict and len(value) <= MAX_VALUE and all(type(key) is str for key in value):
        items = {key: plain_value(item) for key, item in value.items()}
        return None if any(item is None for item in items.values()) else items
    return None


def run_cell(shell, cell: dict, send) -> None:
    """Runs one cell of the plan in the shell, between its reported start and end."""
    send("cell_start", index=cell["index"], count=shell.execution_count)
    result = shell.run_cell(cell["source"], store_history=True)
    error = result.error_before_exec or result.error_in_exec
    send("cell_end", index=cell["index"], **(describe(error) if error else {"error": None}))


def _shell() -> InteractiveShell:
    """An IPython shell without its history, which would write in a thread of its own. It is made
    once, in the server (:func:`warm_up`), and every run, a fork, starts with its own copy as it
    was made: no cell has run in it, and what one run does to its copy dies with that run."""
    config = Config()
    config.HistoryManager.enabled = False
    return InteractiveShell.instance(config=config)


def run(plan_path: str, inputs_path: str, report_fd: int, course_fd: int) -> None:
    """Runs one submission's plan, in a process of its own, reporting on ``report_fd`` and
    reading each stage's course code from ``course_fd``; never returns.

    What the grader relies on while student code runs lives in this function's own variables,
    which no code can rebind, and in immutable objects (see :mod:`harness.guard`)."""
    with open(plan_path) as f:
        plan = json.load(f)
    absence.remove(plan.get("absent", {}))
    calls = types.MappingProxyType({pid: json.dumps(call) for pid, call in plan.pop("calls").items()})
    skip = frozenset(plan["skip_probes"])
    tensors = types.MappingProxyType(load_file(inputs_path) if os.path.getsize(inputs_path) else {})
    send, send_file = report.senders(report_fd)
    shell = _shell()
    trace = traces.trace_classes(send, frozenset(name for names in plan["watch"].values() for name in names))
    tensor_trace.TRACE_FACTORY = traces.sealed_traces()
    io = (send, send_file, guard.checker(send, guard.snapshot()), trace, lambda into: report.receive(course_fd, into))
    if plan.get("memory_cap"):
        memory_cap.cap(plan["memory_cap"])   # first: it sets the allocator through ctypes
    type_objects.disarm_ctypes()
    refusals.install(send, capped=bool(plan.get("memory_cap")))
    for cell in plan.pop("cells"):
        if cell["index"] not in plan["skip_cells"]:
            run_cell(shell, cell, send)
        for pid in cell["probes"]:
            if pid not in skip:
                probe(pid, calls[pid], tensors, shell.user_ns, io)
    for stage in plan.get("stages", ()):
        course = CourseCode(report.receive(course_fd))
        for pid in stage:
            if pid not in skip:
                names = json.loads(calls[pid])["stand_ins"]
                probe(pid, calls[pid], tensors, shell.user_ns, io, course.standing_in(shell.user_ns, names))
    send("done")
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown: student atexit hooks cannot change the outcome


class _Tiny(torch.nn.Module):
    """A small attention-like module for :func:`warm_up`."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        scores = self.linear(x) @ x.transpose(-2, -1) / 2.0  # (B, T, T)
        mask = torch.triu(torch.ones(x.shape[1], x.shape[1], dtype=torch.bool), diagonal=1)
        return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ x  # (B, T, 4)


def warm_up(modules: list[str]) -> None:
    """Imports what the course's notebooks use, and ``modules`` (those of torch that an item may take
    out, :func:`transformer_lm.forbidding.family_modules`), and probes a small module once, traced, so that
    every forked run starts with torch's lazy set-up done (a probe's first call alone imports
    sympy, and the first traced call sets up Python dispatch). Then it makes what every run starts
    from and would otherwise make again: the guards of the trace's switches, the IPython shell,
    the refused functions (:func:`refusals.prepare`) and the index of what an item may take out
    of torch (:func:`absence.prepare`). The run's own checks (the audit hook,
    the snapshot, ctypes disarmed) are still made in each run, before its first cell."""
    import matplotlib.pyplot  # noqa: F401
    import numpy  # noqa: F401

    for module in modules:
        importlib.import_module(module)
    from transformer_lm.sandboxed import test_values, viz  # noqa: F401

    with call_trace.trace_calls({"softmax", "aten::_softmax"}, lambda frame: None):  # its first use costs 0.4 s
        probes.probe_module(_Tiny, init={}, state={}, inputs={"x": torch.ones(2, 3, 4)}, grad_output=torch.ones(2, 3, 4))
    # What a first einsum, vmap or autograd.grad sets up (functorch's modules among it) is done
    # here, before any run forks, so that a capped run's first call pays none of it.
    x = torch.ones(2, 3, 4, requires_grad=True)
    torch.autograd.grad(torch.vmap(lambda t: torch.einsum("qd,kd->qk", t, t))(x).sum(), x)
    guard.prepare(probe.__code__)
    _shell()
    refusals.prepare()
    absence.prepare()  # last: it lists what the server holds once everything above is done


