"""What a call's tensors cost: the dispatch trace that counts the memory and work of every ATen
operator that runs (:class:`TensorTrace`, its :class:`TraceTotals`), and the tensors a function's
code holds outside its arguments (:func:`held_by`).

The memory checks judge these numbers, so they are kept apart from the probes that record them
(:mod:`transformer_lm.sandboxed.probes`): this is the part a student's code runs beside while it is
counted, and every function of it is written to be out of that code's reach (see the note above
:func:`tensors_in`). In the grading sandbox the harness puts its own sealed trace in
:data:`TRACE_FACTORY`.
"""

from __future__ import annotations

import contextlib
import gc
import types
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode


REDUCTIONS = frozenset({"amax", "amin", "aminmax", "max", "min", "sum", "nansum", "mean", "nanmean", "prod",
                        "logsumexp", "special_logsumexp", "argmax", "argmin", "var", "std", "var_mean", "std_mean",
                        "norm", "linalg_vector_norm", "linalg_norm", "frobenius_norm", "median", "nanmedian", "mode",
                        "kthvalue", "all", "any", "count_nonzero"})
"""ATen reductions: they combine the numbers along the dimensions they are given (all without one)."""
ALONG_A_DIMENSION = frozenset({"_softmax", "_log_softmax", "_safe_softmax", "_masked_softmax", "softmax",
                               "log_softmax", "special_softmax", "special_log_softmax", "cumsum", "cumprod", "cummax",
                               "cummin", "logcumsumexp", "sort", "topk", "renorm"})
"""ATen operators that combine the numbers along one dimension without removing it: each output
number depends on the whole of that dimension."""
DIM_POSITION = {"norm": 2, "linalg_vector_norm": 2, "linalg_norm": 2, "topk": 2, "kthvalue": 2, "renorm": 2}
"""Where an operator takes its dimension, when not second (after the tensor): after ``p`` or ``k``."""
EXPONENTIALS = frozenset({"exp", "exp2", "expm1", "_softmax", "_log_softmax", "_safe_softmax", "_masked_softmax",
                          "softmax", "log_softmax", "sigmoid", "tanh", "softplus", "log_sigmoid_forward", "logsumexp",
                          "logcumsumexp", "logaddexp", "logaddexp2", "special_expit", "special_exp2",
                          "special_expm1", "special_logsumexp", "special_softmax", "special_log_softmax"})
"""ATen operators that exponentiate (each number of their input, once): the work an attention does
per score it computes. An in-place variant (``exp_``) or one that writes into ``out=`` counts the same."""
MATMULS = {"mm": 0, "bmm": 0, "matmul": 0, "mv": 0, "dot": 0, "vdot": 0, "addmm": 1, "baddbmm": 1, "addbmm": 1,
           "addmv": 1}
"""ATen matrix products, each with the position of its first matrix: every number of the output
sums that matrix's last dimension of products (a tile's scores: ``d``; a tile's values: ``block_k``)."""


def operator_name(func) -> str:
    """An ATen operator's name without the trailing ``_`` of its in-place variant (``exp_`` is ``exp``)."""
    name = func.overloadpacket.__name__
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


# The trace's accounting (below, to TensorTrace) runs while a student's code is on the stack, and
# the student's code may rebind any name of a module for a moment, Python's builtins included
# (``builtins.max``, ``tensor_trace._numel``, ``torch.tensor``) and put it back before the grader looks.
# So every function of it finds what it uses in its own defaults, bound when this module is loaded.


def tensors_in(value, _isinstance=isinstance, _tensor=torch.Tensor, _sequences=(tuple, list),
               _reversed=reversed) -> list:
    """The tensors in ``value``: itself, or those in its nested tuples and lists, in order."""
    found, todo = [], [value]
    while todo:
        item = todo.pop()
        if _isinstance(item, _tensor):
            found.append(item)
        elif _isinstance(item, _sequences):
            todo += _reversed(item)
    return found


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


def _reduced_length(name: str, args, kwargs: dict, _isinstance=isinstance, _tensor=torch.Tensor,
                    _reductions=REDUCTIONS, _along=ALONG_A_DIMENSION, _positions=DIM_POSITION, _matmuls=MATMULS,
                    _len=len, _int=int, _dims=(int, list, tuple), _range=range, _max=max) -> int:
    """The most numbers the operator ``name`` combined into one: for ``amax(scores, -1)`` the number
    of keys; for a max over a whole tile, its longest side; for a matrix product, the length of the
    sums of products it makes (``scores @ ones`` sums a whole row of scores). 0 for operators that
    combine none."""
    if name in _matmuls:
        first = args[_matmuls[name]] if _len(args) > _matmuls[name] else None
        return first.shape[-1] if _isinstance(first, _tensor) and first.dim() else 0
    source = args[0] if args and _isinstance(args[0], _tensor) else None
    if source is None or not (name in _reductions or name in _along):
        return 0
    if source.dim() == 0:
        return 1
    position = _positions.get(name, 1)
    dim = kwargs.get("dim", args[position] if _len(args) > position else None)
    if _isinstance(dim, _tensor) or (dim is not None and not _isinstance(dim, _dims)):
        return 0   # a binary form (max of two tensors), not a reduction
    dims = _range(source.dim()) if dim is None or dim == [] else [dim] if _isinstance(dim, _int) else dim
    rank = source.dim()
    return _max((source.shape[d] for d in dims if _isinstance(d, _int) and -rank <= d < rank), default=0)


def _work(name: str, args, outputs: list, reduced: int, _isinstance=isinstance, _tensor=torch.Tensor,
          _exponentials=EXPONENTIALS, _matmuls=MATMULS, _sum=sum, _max=max) -> tuple[int, int]:
    """How many numbers the operator ``name`` exponentiated, and how many products of two numbers
    its matrix product summed, each of ``reduced`` of them (:func:`_reduced_length`); 0 for other
    operators."""
    made = _sum(out.numel() for out in outputs)
    if name in _exponentials:
        first = args[0] if args and _isinstance(args[0], _tensor) else None
        return _max(made, first.numel() if first is not None else 0), 0
    if name == "pow" and args and not _isinstance(args[0], _tensor):
        return made, 0   # a number raised to a tensor: 2 ** x
    if name in _matmuls:
        return 0, made * reduced
    return 0, 0


class TraceTotals:
    """What the tensors made while a block runs cost (the accounting of a :class:`TensorTrace`),
    from the operators that ran, whatever code made them (forward and backward passes alike):

    * ``largest``: the shape of the largest tensor an operator created with new memory, or wrote
      in place or into ``out=`` (a view of an input holds no new memory, but a buffer made before
      the call and filled at once holds as many numbers as it is written);
    * ``peak`` and ``live``: bytes of those tensors alive at once, at most and now (a tensor
      counts until it is freed: one kept in a list or on ``ctx`` stays counted);
    * ``widest``: the longest dimension a reduction ran along (a max or a sum over a whole row of
      keys runs along ``T_k``; over a tile, along ``block_k``, and a max of the whole tile along its
      longest side);
    * ``exponentials``: how many numbers were exponentiated (the scores an attention computed);
    * ``multiplies``: how many products of two numbers matrix products summed (a tile's scores,
      and its values weighted);
    * ``saved``: the shapes of the tensors autograd saved for a backward pass (a custom
      Function's ``save_for_backward`` included).
    """

    def __init__(self):
        self.largest: tuple[int, ...] = ()
        self.live: dict[int, tuple] = {}  # data pointer -> (bytes, weak reference to the storage), not yet freed
        self.live_bytes = 0
        self.peak = 0
        self.widest = 0
        self.exponentials = 0
        self.multiplies = 0
        self.saved: list[tuple[int, ...]] = []

    def operator(self, func, args, kwargs: dict, result, _tensors_in=tensors_in, _list=list, _max=max,
                 _reduced_length=_reduced_length, _work=_work, _name=operator_name) -> list:
        """Counts what one operator's call made; returns the storages it counted as new, which count
        until they are freed (:meth:`freed`)."""
        name = _name(func)
        given = {t.untyped_storage().data_ptr() for t in _tensors_in(_list(args) + _list(kwargs.values()))}
        outputs = _tensors_in(result)
        created = [storage for out in outputs if (storage := self._created(out, given)) is not None]
        if func._schema.is_mutable:  # written in place or into out=: a buffer made before the call holds it
            for out in outputs:
                self._largest(out)
        reduced = _reduced_length(name, args, kwargs)
        self.widest = _max(self.widest, reduced)
        exponentials, multiplies = _work(name, args, outputs, reduced)
        self.exponentials += exponentials
        self.multiplies += multiplies
        return created

    def _created(self, tensor: torch.Tensor, given: set[int], _max=max, _ref=weakref.ref):
        """Counts ``tensor`` if its memory is new: not an input's (a view of one, or one written
        in place) nor a tensor's already counted; returns its storage then."""
        storage = tensor.untyped_storage()
        pointer = storage.data_ptr()
        if tensor.numel() == 0 or pointer in given or pointer in self.live:
            return None
        self._largest(tensor)
        size = storage.nbytes()
        self.live[pointer] = (size, _ref(storage))
        self.live_bytes += size
        self.peak = _max(self.peak, self.live_bytes)
        return storage

    def _largest(self, tensor: torch.Tensor, _numel=_numel, _tuple=tuple) -> None:
        """Counts the shape of ``tensor`` (created, or written in place or grown with ``resize_``)
        among the largest: its numbers are in memory at once, whoever allocated them."""
        if tensor.numel() > _numel(self.largest):
            self.largest = _tuple(tensor.shape)

    def freed(self, pointer: int) -> None:
        """Stops counting the storage at ``pointer`` once it is gone (its finalizer says so); one
        still alive stays counted, whoever says otherwise."""
        size, storage = self.live.get(pointer, (0, None))
        if storage is not None and storage() is None:
            del self.live[pointer]
            self.live_bytes -= size

    NAMES = ("largest", "peak", "live_bytes", "widest", "exponentials", "multiplies", "saved")

    def value(self, name: str, _error=AttributeError, _getattr=getattr):
        """One of the totals (:data:`NAMES`), by name."""
        if name not in self.NAMES:
            raise _error(name)
        return _getattr(self, name)

    def saved_tensor(self, shape: tuple[int, ...]) -> None:
        self.saved.append(shape)

    def record(self, prefix: str, _collect=gc.collect, _tensor=torch.tensor, _long=torch.long,
               _enumerate=enumerate) -> dict[str, torch.Tensor]:
        """The totals as a probe's record: ``<prefix>.largest`` (a shape), ``.peak``, ``.live``,
        ``.widest``, ``.exponentials``, ``.multiplies`` and ``.saved.<i>`` (shapes)."""
        _collect(1)  # tensors held only by a reference cycle just made are not kept (the young generations suffice)
        record = {f"{prefix}.largest": _tensor(self.largest, dtype=_long),
                  f"{prefix}.peak": _tensor(self.peak), f"{prefix}.live": _tensor(self.live_bytes),
                  f"{prefix}.widest": _tensor(self.widest), f"{prefix}.exponentials": _tensor(self.exponentials),
                  f"{prefix}.multiplies": _tensor(self.multiplies)}
        record.update({f"{prefix}.saved.{i}": _tensor(shape, dtype=_long) for i, shape in _enumerate(self.saved)})
        return record


class DispatchMode(TorchDispatchMode):
    """A dispatch mode whose ``__torch_dispatch__`` PyTorch leaves as written. By default it wraps the
    method so that ``torch.compile`` skips it, and that wrapper imports ``torch._dynamo`` on the first
    call: 1.6 s, paid by each grading sandbox as it starts and by a student's first visible check.
    Nothing here is compiled; a student's ``torch.compile`` would trace into the mode, as PyTorch's
    own example of this switch shows (``TorchDispatchMode._should_skip_dynamo``)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False


class TensorTrace(DispatchMode):
    """A dispatch mode that keeps :class:`TraceTotals` of what runs while it is on: the judged
    record of attention that must fit in memory (its fields: ``trace.largest``, ``trace.peak``,
    ...). In the grading sandbox, the grader's own subclass keeps them where no other code can
    reach them."""

    def __init__(self):
        super().__init__()
        self.totals = TraceTotals()

    def __getattr__(self, name: str):
        return self.__dict__["totals"].value(name)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        for storage in self.totals.operator(func, args, kwargs or {}, result):
            weakref.finalize(storage, self.totals.freed, storage.data_ptr())
        return result

    def saved_tensor(self, shape: tuple[int, ...]) -> None:
        self.totals.saved_tensor(shape)

    def record(self, prefix: str) -> dict[str, torch.Tensor]:
        return self.totals.record(prefix)


@contextlib.contextmanager
def trace_tensors():
    """Yields a :class:`TensorTrace` of what runs in the block."""
    trace = TRACE_FACTORY()

    def pack(tensor, _trace=trace, _tuple=tuple):  # a default, not a closure's cell, which any code may set
        _trace.saved_tensor(_tuple(tensor.shape))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor), trace:
        yield trace


TRACE_FACTORY = TensorTrace
"""What :func:`trace_tensors` makes a trace with (the grading sandbox puts its own in place)."""


def held_by(fn, _isinstance=isinstance, _tensor=torch.Tensor, _function=types.FunctionType,
            _code=types.CodeType, _module=types.ModuleType, _id=id, _max=max, _vars=vars, _type=type) -> int:
    """The most numbers of one tensor or NumPy array that ``fn``'s code reaches outside its
    arguments: the notebook's globals its code names, its closure, its defaults, and what those
    hold (lists, dicts, objects' attributes, the functions and classes of the notebook they name).
    A buffer made before the call and written a tile at a time holds the whole matrix all the same."""
    seen, todo, largest, visits = set(), [(fn, 0)], 0, 0
    home = getattr(fn, "__module__", None)
    while todo and visits < 100_000:
        value, depth = todo.pop()
        if _id(value) in seen or depth > 5 or _isinstance(value, _module):
            continue
        seen.add(_id(value))
        visits += 1
        if _isinstance(value, _tensor):
            largest = _max(largest, value.numel())
        elif _type(value).__module__ == "numpy" and _isinstance(getattr(value, "size", None), int):
            largest = _max(largest, value.size)
        elif _isinstance(value, _function):
            if value.__module__ not in (home, "__main__") and depth:
                continue  # a library's function: not the student's to fill
            codes, names = [value.__code__], set()
            while codes:
                code = codes.pop()
                names.update(code.co_names)
                codes += [c for c in code.co_consts if _isinstance(c, _code)]
            todo += [(value.__globals__[n], depth + 1) for n in names if n in value.__globals__]
            for cell in value.__closure__ or ():
                with contextlib.suppress(ValueError):  # a cell not yet filled
                    todo.append((cell.cell_contents, depth + 1))
            todo += [(d, depth + 1) for d in (*(value.__defaults__ or ()), *(value.__kwdefaults__ or {}).values())]
        elif _isinstance(value, (list, tuple, set, frozenset)):
            todo += [(item, depth + 1) for item in list(value)[:10_000]]
        elif _isinstance(value, dict):
            todo += [(item, depth + 1) for item in list(value.values())[:10_000]]
        elif _isinstance(value, (staticmethod, classmethod)):
            todo.append((value.__func__, depth))
        elif hasattr(value, "__dict__") and (_type(value).__module__ in (home, "__main__")
                                             or _isinstance(value, (type, torch.nn.Module))):
            todo += [(item, depth + 1) for item in list(_vars(value).values())[:10_000]]
    return largest
