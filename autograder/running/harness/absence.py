"""What an item forbids, absent from the run that checks it.

Before any student code runs, the run takes out of PyTorch what its items ask students to write
themselves: every operator that computes it, whatever its name (the public one, its private kernels
and fallbacks, the attention kernels that compute a softmax, and their backward operators, as the
trusted side found them by calling each operator, :mod:`transformer_lm.instructor.operator_families`),
is replaced in the dispatcher by one that raises, and so is every Python function of torch found to
compute it (its decompositions and references, ``flex_attention``), with the library layer whose
``forward`` is forbidden. A call of any of them raises :class:`Absent`, whatever name or route
reached it.

What can bring them back? Not the original kernels: a kernel replaced in the dispatcher's table is
no longer reachable from Python, and the registrations that replace it live as long as the run,
held in the constants of a sealed function (:mod:`harness.sealed_code`), whose code the audit hook
does not let a run read. A run may register kernels of its own for those operators, but what it can
register is Python it wrote, which is writing the exercise. Copying torch's own Python source of a
forbidden function is copying, which the similarity report is for.
"""

from __future__ import annotations

import bisect
import importlib
import itertools
import sys
import types
import warnings
from dataclasses import dataclass

import torch

from . import sealed_code

DISPATCH_KEYS = ("CPU", "CompositeImplicitAutograd", "CompositeExplicitAutograd",
                 "CompositeExplicitAutogradNonFunctional", "SparseCPU", "SparseCsrCPU", "QuantizedCPU",
                 "NestedTensorCPU", "MkldnnCPU")
"""The dispatch keys under which a CPU run can reach an operator's computation."""


class Absent(RuntimeError):
    """A forbidden operator or function was called in a run that checks the item forbidding it."""


def _refuse(name: str):
    def absent(*args, **kwargs):
        raise Absent(f"{name} is not available while this item is graded: the exercise asks you to write it "
                     f"yourself.")
    absent.__name__ = absent.__qualname__ = name.rsplit(".", 1)[-1]
    return absent


def _remove_kernels(operators: list[str]) -> list[object]:
    """Every overload of ``operators`` (``namespace::name``) raises under every CPU dispatch key.
    The registrations are made on the dispatcher's own handles, not through
    ``torch.library.Library``, whose finalizer any code could call to take them back."""
    wanted = set(operators)
    handles: dict[str, object] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch warns that a kernel is overridden: that is the point
        for full in torch._C._dispatch_get_all_op_names():
            if full.split(".")[0] not in wanted:
                continue
            namespace, overload = full.split("::", 1)
            name, _, overload_name = full.partition(".")
            try:
                torch._C._dispatch_find_schema_or_throw(name, overload_name)
            except RuntimeError:  # a kernel without a schema (a backend's own operator): nothing to call
                continue
            if namespace not in handles:  # one handle a namespace (setdefault would make one an operator)
                handles[namespace] = torch._C._dispatch_library("IMPL", namespace, "", __file__, 0)
            handle = handles[namespace]
            for key in DISPATCH_KEYS:
                try:
                    handle.impl(overload, key, _refuse(full), False)
                except RuntimeError:  # a key that the operator's schema cannot take
                    continue
    return list(handles.values())


def _named(where: str):
    """The function or class ``module:attribute`` names, its module imported first (a run's item may
    forbid what no module loaded so far holds, ``flex_attention``); None where there is none."""
    module_name, attribute = where.split(":")
    try:
        module = sys.modules.get(module_name) or importlib.import_module(module_name)
    except ImportError:
        return None
    return getattr(module, attribute, None)


def _remove_python(functions: list[str], operators: list[str]) -> None:
    """torch's Python functions and classes named in ``functions`` (``module:attribute``) are
    replaced by ones that raise (a class's ``forward``), in every module of torch that holds the same
    object; so are the decomposition tables' entries of ``operators`` or of those functions, and
    the Python kernels of ``operators``."""
    targets = [value for value in map(_named, functions) if value is not None]
    index = INDEX if INDEX is not None and INDEX.modules == len(sys.modules) else Index.of_torch()
    wanted = {id(value) for value in targets}
    replaced: dict[int, object] = {}
    for module_name, module, attribute, value in index.functions.matching(tuple({v.__name__ for v in targets})):
        if id(value) not in wanted:
            continue
        if isinstance(value, type):
            value.forward = _refuse(f"{value.__module__}.{value.__name__}.forward")
        else:
            setattr(module, attribute, replaced.setdefault(id(value), _refuse(f"{module_name}.{attribute}")))
    packets = [f"{name.replace('::', '.')}." for name in operators]
    for table, operator in index.decompositions.matching(tuple(packets)):
        table[operator] = _refuse(str(operator))
    for table, operator in index.decompositions.matching(tuple(v.__name__ for v in targets)):
        if id(table[operator]) in wanted:
            table[operator] = _refuse(str(operator))
    for name in operators:
        namespace, operator = name.split("::")
        packet = getattr(getattr(torch.ops, namespace), operator, None) if namespace == "aten" else None
        for overload in (getattr(packet, o) for o in packet.overloads()) if packet is not None else ():
            for key in list(overload.py_kernels):
                overload.py_kernels[key] = _refuse(str(overload))


SEPARATORS = ("\n", "\0")
"""What no fragment holds: ``\n`` ends each name of a :class:`Names`, ``\0`` parts one entry's names."""


class Names:
    """Entries to be found by their names (``(names, what)``; an entry's several names are parted by
    ``\0``), kept as one text, so that finding those that hold a fragment reads no entry but those it
    finds: in a run, a fork of the server, every object read is a page copied."""

    def __init__(self, entries: list[tuple[str, tuple]]):
        names = [name.replace("\n", " ") for name, _ in entries]
        self.found = tuple(what for _, what in entries)
        self.text = "".join(f"{name}\n" for name in names)
        self.starts = list(itertools.accumulate((len(name) + 1 for name in names[:-1]), initial=0))

    def matching(self, fragments: tuple[str, ...]) -> list[tuple]:
        """What the entries whose names hold any of ``fragments`` are, in the order they were given."""
        found = set()
        for fragment in (f for f in fragments if f and not any(s in f for s in SEPARATORS)):
            at = self.text.find(fragment)
            while at >= 0:
                found.add(bisect.bisect_right(self.starts, at) - 1)
                at = self.text.find(fragment, at + 1)
        return [self.found[i] for i in sorted(found)]


@dataclass(frozen=True)
class Index:
    """What a run may have to take out, found once in the server (:func:`prepare`): torch's
    functions, and its classes with a ``forward`` of their own, by name, wherever a loaded module of
    torch holds them; the decomposition tables' entries, by operator and by function name. Reading
    every module again took a run 45 ms. ``modules`` is how many modules were loaded: a run with
    more (none loads one before :func:`remove`) reads them all again."""

    functions: Names
    decompositions: Names
    modules: int

    @classmethod
    def of_torch(cls) -> Index:
        functions = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # reading some of torch's deprecated names warns
            for module_name, module in list(sys.modules.items()):
                if not module_name.startswith("torch") or not isinstance(module, types.ModuleType):
                    continue
                for attribute, value in list(vars(module).items()):
                    if isinstance(value, types.FunctionType) or isinstance(value, type) and "forward" in vars(value):
                        functions.append((value.__name__, (module_name, module, attribute, value)))
        decompositions = [(f"{operator}\0{getattr(table[operator], '__name__', '')}", (table, operator))
                          for table in _decomposition_tables() for operator in table]
        return cls(Names(functions), Names(decompositions), len(sys.modules))


def _decomposition_tables() -> list[dict]:
    from torch import _decomp
    return [_decomp.decomposition_table, *_decomp.global_decomposition_table.values()]


INDEX: Index | None = None


def prepare() -> None:
    """Done once in the server, after it has loaded everything a run starts with: finds what
    :func:`remove` may take out (:class:`Index`), for every run, a fork, to start with."""
    global INDEX
    INDEX = Index.of_torch()


def remove(absent: dict) -> None:
    """Takes out of this process what ``absent`` lists: ``operators`` (``aten::_softmax``...) and
    torch's Python ``functions`` (``module:attribute``) that compute them. Call it before any student
    code."""
    if not absent.get("operators") and not absent.get("functions"):
        return
    handles = _remove_kernels(absent.get("operators", []))
    _remove_python(absent.get("functions", []), absent.get("operators", []))
    global keep
    keep = sealed_code.with_constants(sealed_code.KEEP_CODE, "keep", {"KEPT": tuple(handles)})


keep = None
"""The registrations that hold the kernels out, sealed (see the module's docstring)."""
