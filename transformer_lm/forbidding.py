"""What an exercise forbids (the library function it asks students to write themselves), and the
visible check of it.

The names are the same on both sides: the hidden checks (``autograder/checks``) list an item's
``forbids`` from the constants here, and the visible test cell of that item checks the same
constants with :func:`forbidding`, so that a student whom the visible check lets through is never
marked ``forbidden`` by the grader for a call the notebook did not forbid.

:func:`forbidding` looks twice, as the grader does: at the text of the answer (its class or
function and, in a notebook, its whole cell, helpers beside it included), and at what runs while
the checks inside the ``with`` block call it (:func:`transformer_lm.sandboxed.call_trace.trace_calls`), so a
call reached through ``getattr`` or ``torch.ops`` is seen too. A call belongs to the answer when the answer's
own code (or a helper it calls) made it, not when an answer it reuses did (``reuses``): that one
is refused by its own test cell.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
import types
from pathlib import Path

from transformer_lm.judging import CheckFailed
from transformer_lm.sandboxed import call_trace
from transformer_lm.library_calls import Forbidden, forbidden_uses, namespace_bindings
from transformer_lm.source_scan import answer_text, functions_of
from transformer_lm.verdict_texts import fit

SOFTMAX = ("torch.softmax", "torch.nn.functional.softmax", "torch.Tensor.softmax", "torch.special.softmax")
"""PyTorch's softmax, by every name it has: what ``softmax_stable`` must compute itself."""

LIBRARY_ATTENTION = ("torch.nn.functional.scaled_dot_product_attention", "torch.nn.MultiheadAttention.forward",
                     "torch.nn.functional.multi_head_attention_forward")
"""PyTorch's attention: what every attention exercise must compute itself."""


FAMILY_FILE = Path(__file__).parent / "data" / "operator_families.json"
"""What computes each family's result, found by calling every operator of PyTorch's registry and
torch's Python re-implementations on inputs whose result is known
(``python -m transformer_lm.instructor.operator_families``, which writes it)."""
FAMILY_OF = {"softmax": "softmax", "scaled_dot_product_attention": "attention", "MultiheadAttention": "attention",
             "multi_head_attention_forward": "attention"}
"""The family that computes each forbidden function: attention of one query ``e1`` against keys
``x e1 sqrt(d)`` and values ``I`` is ``softmax(x)``, so the softmax family holds the attention kernels."""


def forbidden_name(path: str) -> str:
    """The name an answer must not use for a forbidden dotted path
    (``torch.nn.MultiheadAttention.forward`` forbids ``MultiheadAttention``)."""
    parts = path.split(".")
    return parts[-2] if parts[-1] in ("forward", "__call__", "__init__") else parts[-1]


@functools.cache
def families() -> dict[str, dict[str, list[str]]]:
    """Each family's members, as stored: ``forward`` and ``backward`` operators, ``python`` functions
    (``module:attribute``)."""
    return json.loads(FAMILY_FILE.read_text())["families"]


def family_modules() -> list[str]:
    """The modules of torch that hold the families' Python functions: the grading server imports
    them before it indexes torch, so that no run has to import one (``flex_attention``) and read
    every module again before it can take out what its item forbids."""
    return sorted({member.split(":")[0] for family in families().values() for member in family["python"]})


def members(forbids: tuple[str, ...]) -> dict[str, str]:
    """Every operator and Python function that computes a forbidden call, each with the forbidden name
    it is told under: the one its own name holds (``aten::_scaled_dot_product_flash_attention_for_cpu``
    is told as ``scaled_dot_product_attention``), else the first that ``forbids`` gives. Which
    members there are is the families' (found by what they compute); the name only words a message."""
    names = list(dict.fromkeys(forbidden_name(path) for path in forbids))
    found = {}
    for name in names:
        family = families()[FAMILY_OF[name]]
        for member in family["forward"] + family["backward"] + family["python"]:
            found.setdefault(member, next((own for own in names if own in member), name))
    return found


def library_object(path: str):
    """The object a dotted path of torch names (``torch.nn.MultiheadAttention.forward``): its
    longest loaded module, then attributes."""
    parts = path.split(".")
    at = max(i for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in sys.modules)
    value = sys.modules[".".join(parts[:at])]
    for part in parts[at:]:
        value = getattr(value, part)
    return value


def python_functions(forbids: tuple[str, ...]) -> list[str]:
    """torch's Python functions and classes that compute a forbidden call, as ``module:attribute``:
    its family's and, for a forbidden ``forward``, its class; the forbidden call itself where it is
    a Python function (``multi_head_attention_forward``)."""
    found = {member for member in members(forbids) if "::" not in member}
    for path in forbids:
        parts = path.split(".")
        value = library_object(".".join(parts[:-1]) if parts[-1] == "forward" else path)
        if isinstance(value, (type, types.FunctionType)):
            found.add(f"{value.__module__}:{value.__name__}")
    return sorted(found)


@functools.cache
def forbidden_objects(forbids: tuple[str, ...]) -> Forbidden:
    """What an answer's code may not call, as objects (:class:`transformer_lm.library_calls.Forbidden`):
    each forbidden call, each Python function of its family, the layers whose ``forward`` computes
    it, and its family's operators."""
    objects, layers = {}, {}
    for path in forbids:
        objects[id(library_object(path))] = forbidden_name(path)
        if path.endswith(".forward"):
            layers[id(library_object(path.rsplit(".", 1)[0]))] = forbidden_name(path)
    for member, name in members(forbids).items():
        module_name, _, attribute = member.partition(":")
        value = getattr(sys.modules.get(module_name), attribute, None) if "::" not in member else None
        if value is not None:
            (layers if isinstance(value, type) else objects)[id(value)] = name
    methods = {forbidden_name(path): forbidden_name(path) for path in forbids if not path.endswith(".forward")}
    return Forbidden(objects, layers, {m: n for m, n in members(forbids).items() if "::" in m}, methods)


@functools.cache
def runtime_names(forbids: tuple[str, ...]) -> dict[str, str]:
    """The torch function and ATen operator names a forbidden call runs under, each with its
    forbidden name: its own names (``softmax``, ``_softmax``, ``aten::_softmax``) and every operator
    of its family (:func:`members`), under its ATen name and as the torch function of that name, so
    that ``scaled_dot_product_attention`` counts as softmax where softmax is forbidden."""
    names = {runtime: name for name in (forbidden_name(path) for path in forbids)
             for runtime in (name, f"_{name}", f"aten::{name}", f"aten::_{name}")}
    for member, name in members(forbids).items():
        if "::" in member:
            names.setdefault(member, name)
            names.setdefault(member.split("::")[1], name)
    return names


def _code_of(obj) -> set[types.CodeType]:
    """The code objects of a function or of every function of a class, nested ones included."""
    codes, todo = set(), [f.__code__ for f in functions_of(obj)]
    while todo:
        code = todo.pop()
        codes.add(code)
        todo.extend(const for const in code.co_consts if isinstance(const, types.CodeType))
    return codes


def _uses_in_text(obj, forbids: tuple[str, ...]) -> list:
    """The uses of forbidden objects in the answer's cell, its names resolved in the namespace the
    answer was defined in (:func:`transformer_lm.library_calls.forbidden_uses`)."""
    functions = functions_of(obj)
    namespace = functions[0].__globals__ if functions else {}
    return forbidden_uses(answer_text(obj), forbidden_objects(forbids), namespace_bindings(namespace))


@contextlib.contextmanager
def forbidding(obj, forbids: tuple[str, ...], reuses: tuple = ()):
    """Refuses, with :class:`CheckFailed`, an answer ``obj`` (a class or function) whose code calls
    a forbidden object by any name that resolves to it, or whose code makes a forbidden call while
    the block runs. A use the text cannot settle is only told: what runs decides. ``reuses`` lists
    the other answers ``obj`` calls: the calls made inside them are theirs."""
    name = getattr(obj, "__name__", str(obj))
    uses = _uses_in_text(obj, forbids)
    named = sorted({use.name for use in uses if use.certain})
    if named:
        raise CheckFailed(f"{name} uses {', '.join(named)}: this exercise asks you to write it yourself, and the "
                          f"grader gives no points for an answer that calls it.")
    for use in uses:
        print(fit(f"{name}: line {use.line} of its cell may reach {use.name} through a name the check cannot "
                  f"resolve before it runs; what runs decides, and nothing is taken for it if it does not run."))
    own = _code_of(obj)
    theirs = set().union(*(_code_of(other) for other in reuses)) if reuses else set()
    notebook = {id(f.__globals__) for f in functions_of(obj)}  # the namespace the answer was defined in

    def owner(frame) -> str | None:
        """Who a frame is: this answer, an answer it reuses, a helper of the notebook, or none of them."""
        if frame.f_code in own:
            return "own"
        if frame.f_code in theirs:
            return "reused"
        return "helper" if id(frame.f_globals) in notebook else None

    runtime = runtime_names(forbids)
    failed = None
    with call_trace.trace_calls(runtime, owner) as ran:
        try:
            yield
        except CheckFailed as problem:  # a forbidden call is named first: it is why the check failed
            failed = problem
    if call_trace.UNTRACED in ran:
        raise CheckFailed(f"{name} made a tensor with PyTorch's dispatcher hidden from the check (its tracing "
                          "turned off): the grader cannot see what such code runs or holds, and gives it no points.")
    made = sorted({runtime[call] for call, stacks in ran.items()
                   if any(next((who for who in stack if who != "helper"), None) == "own" for stack in stacks)})
    if made:
        raise CheckFailed(f"{name} ran {', '.join(made)} while it was checked: this exercise asks you to write it "
                          f"yourself, and the grader gives no points for an answer that calls it, whatever name "
                          f"reached it.")
    if failed is not None:
        raise failed
