"""Which torch functions and ATen operators ran, and from which notebook cells: the trace that
judges what a student's answer may not call (``scaled_dot_product_attention`` where the task is to
write attention), by what runs rather than by the names its text mentions.

The visible checks run it in the student's kernel (:mod:`transformer_lm.forbidding`), where it
refuses a forbidden call and a product made past the dispatcher. In the grading sandbox the
harness builds its own frozen modes on :data:`COURSE_CODE_FILE`, which the trusted side reads back
(:data:`COURSE_CODE_CELL`); there they only say which forbidden name ran, and from which cell: the
forbidden kernels are absent from that run, which is what costs the points.
"""

from __future__ import annotations

import contextlib
import os
import sys

import torch
from torch.overrides import TorchFunctionMode

from transformer_lm.sandboxed.tensor_trace import DispatchMode, tensors_in


MAX_TRACED_STACKS = 20
"""Distinct stacks kept per watched name: enough to tell who called it."""


UNTRACED = "<untraced>"
"""The name :func:`trace_calls` notes a torch function under when it returned a tensor of new memory
and no ATen operator ran: the dispatcher's tracing was turned off around it."""


def made_untraced(name: str, result, args, kwargs: dict, _list=list,
                  _error=(RuntimeError, NotImplementedError)) -> bool:
    """Whether the torch function ``name`` made a tensor (its ``result`` holds one whose memory none
    of its arguments had), though no operator passed the dispatch trace while it ran: returning an
    argument (``x.float()`` of a float tensor) or a view of one makes nothing, and neither does
    reading an attribute (``__get__``: ``x.grad``). A tensor without plain storage (a sparse one)
    is left out, and so is a tensor made from no tensor at all: PyTorch's legacy constructors
    (``torch.Tensor(3, 4)``, ``torch.FloatTensor(2)`` in fairseq-style code) make theirs past the
    dispatch mode, and honest code uses them. A product of the student's tensors made out of sight
    has tensors among its arguments."""
    def pointers(value) -> set[int]:
        found = set()
        for tensor in tensors_in(value):
            try:
                if tensor.numel():
                    found.add(tensor.untyped_storage().data_ptr())
            except _error:
                continue
        return found
    given = pointers(_list(args) + _list(kwargs.values()))
    return name != "__get__" and bool(given) and bool(pointers(result) - given)


TORCH_FOLDER = os.path.dirname(torch.__file__) + os.sep


class _Watch:
    """What both modes share: the watched names, and for each one seen, the notebook cells that
    were on the Python stack when it ran (innermost first), as ``cell_of(frame)`` names them; and
    how many operators the dispatch mode has seen, so that a torch function whose work bypassed
    it is noted as :data:`UNTRACED`."""

    def __init__(self, names: frozenset[str], cell_of):
        self.names, self.cell_of = names | {UNTRACED}, cell_of
        self.seen: dict[str, set[tuple[int, ...]]] = {}
        self.operators = 0
        self.torch_names: dict[object, str | None] = {}   # code of torch's -> the watched name it is

    def note_reimplementations(self) -> None:
        """Notes torch's own Python functions on the stack that are watched names, where no torch
        function or operator runs under the forbidden name: the decompositions and references
        (``torch._decomp``'s ``_softmax``, ``torch._refs.softmax``, the decomposition of
        ``aten::_scaled_dot_product_flash_attention_for_cpu``) and the ``forward`` of a watched
        class (the quantizable ``MultiheadAttention``). Each of them runs operators, so the dispatch
        mode calls this; the grader makes them absent from its runs."""
        frame = sys._getframe(2)
        while frame is not None:
            code = frame.f_code
            if code not in self.torch_names:
                self.torch_names[code] = self._watched_name(code)
            if self.torch_names[code]:
                self.note(self.torch_names[code])
            frame = frame.f_back

    def _watched_name(self, code) -> str | None:
        if not code.co_filename.startswith(TORCH_FOLDER):
            return None
        return next((name for name in (code.co_name, code.co_qualname.split(".")[0], f"aten::{code.co_name}",
                                       f"aten::_{code.co_name}") if name in self.names), None)

    def note(self, name: str) -> None:
        if name not in self.names:
            return
        stacks = self.seen.setdefault(name, set())
        if len(stacks) >= MAX_TRACED_STACKS:
            return
        cells, frame = [], sys._getframe(2)
        while frame is not None:
            cell = self.cell_of(frame)
            if cell is not None and cell not in cells:
                cells.append(cell)
            frame = frame.f_back
        stacks.add(tuple(cells))


class _FunctionNames(TorchFunctionMode):
    """Sees every torch function called (``softmax``, ``scaled_dot_product_attention``,
    ``multi_head_attention_forward``), whichever Python name or route reached it."""

    def __init__(self, watch: _Watch):
        super().__init__()
        self.watch = watch

    def __torch_function__(self, func, types, args=(), kwargs=None):
        watch, name = self.watch, getattr(func, "__name__", "")
        watch.note(name)
        before = watch.operators
        result = func(*args, **(kwargs or {}))
        if watch.operators == before and made_untraced(name, result, args, kwargs or {}):
            watch.note(UNTRACED)
        return result


class _OperatorNames(DispatchMode):
    """Sees every ATen operator that runs (``aten::_softmax``), forward and backward."""

    def __init__(self, watch: _Watch):
        super().__init__()
        self.watch = watch

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.watch.operators += 1
        self.watch.note(func.name())
        self.watch.note_reimplementations()
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def trace_calls(names, cell_of):
    """Watches the torch functions and ATen operators (``aten::<name>``) of ``names`` while the
    block runs, and yields ``{name: {cells on the stack, innermost first}}`` for those that ran;
    ``cell_of(frame)`` tells which notebook cell (or answer) a Python frame's code is, or None. What runs
    is judged this way, not by the names an answer's text mentions, so ``getattr(F,
    "scaled_dot_" + "product_attention")``, ``torch.ops.aten`` and a helper defined in another
    cell are all seen, and the cell that made the call is known."""
    watch = _Watch(frozenset(names), cell_of)
    with _FunctionNames(watch), _OperatorNames(watch):
        yield watch.seen


COURSE_CODE_FILE = "<the course's code>"
"""The file name the course's reference and stand-ins run under in the sandbox (never a notebook cell)."""
COURSE_CODE_CELL = -1
"""What a trace records for a frame of the course's code: it owns the calls made inside it."""
