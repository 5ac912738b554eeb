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
import types

import torch

from transformer_lm.judging import CheckFailed
from transformer_lm.sandboxed import call_trace
from transformer_lm.source_scan import answer_text, functions_of, mentioned_names

SOFTMAX = ("torch.softmax", "torch.nn.functional.softmax", "torch.Tensor.softmax", "torch.special.softmax")
"""PyTorch's softmax, by every name it has: what ``softmax_stable`` must compute itself."""

LIBRARY_ATTENTION = ("torch.nn.functional.scaled_dot_product_attention", "torch.nn.MultiheadAttention.forward",
                     "torch.nn.functional.multi_head_attention_forward")
"""PyTorch's attention: what every attention exercise must compute itself."""


def forbidden_name(path: str) -> str:
    """The name an answer must not use for a forbidden dotted path
    (``torch.nn.MultiheadAttention.forward`` forbids ``MultiheadAttention``)."""
    parts = path.split(".")
    return parts[-2] if parts[-1] in ("forward", "__call__", "__init__") else parts[-1]


FAMILIES = {"softmax": ("softmax",),
            "scaled_dot_product_attention": ("scaled_dot_product", "flash_attention", "efficient_attention",
                                             "flex_attention"),
            "MultiheadAttention": ("multi_head_attention", "transformer_encoder"),
            "multi_head_attention_forward": ("multi_head_attention", "transformer_encoder")}
"""What the names of a forbidden call's ATen operators contain: the public operator, and its private
kernels and fallbacks (the CPU flash kernel, the math fallback, the safe and masked softmax,
``log_softmax``) with their backward operators."""


def name_fragments(forbids: tuple[str, ...]) -> set[str]:
    """What the names of a forbidden call's functions, classes and operators contain: its own name
    and its :data:`FAMILIES`."""
    return {fragment for name in {forbidden_name(path) for path in forbids}
            for fragment in (name, *FAMILIES.get(name, ()))}


@functools.cache
def runtime_names(forbids: tuple[str, ...]) -> dict[str, str]:
    """The torch function and ATen operator names a forbidden call runs under, each with its
    forbidden name: ``softmax`` runs as ``softmax`` (or ``_softmax`` through ``torch.ops``) and
    as ``aten::_softmax``; ``scaled_dot_product_attention`` keeps its name whichever route
    reached it; ``nn.MultiheadAttention`` runs ``multi_head_attention_forward``. Every operator of
    PyTorch's registry whose name holds one of the call's :data:`FAMILIES` counts too, taken from
    the registry of the torch that runs, so a new version's kernels are covered."""
    names = {runtime: name for name in (forbidden_name(path) for path in forbids)
             for runtime in (name, f"_{name}", f"aten::{name}", f"aten::_{name}")}
    registry = {op.split(".")[0] for op in torch._C._dispatch_get_all_op_names()}
    for name in {forbidden_name(path) for path in forbids}:
        names.update({op: name for op in registry if any(part in op for part in FAMILIES.get(name, ()))})
    return names


def _code_of(obj) -> set[types.CodeType]:
    """The code objects of a function or of every function of a class, nested ones included."""
    codes, todo = set(), [f.__code__ for f in functions_of(obj)]
    while todo:
        code = todo.pop()
        codes.add(code)
        todo.extend(const for const in code.co_consts if isinstance(const, types.CodeType))
    return codes


def _named_in_text(obj, forbids: tuple[str, ...]) -> list[str]:
    return sorted({forbidden_name(path) for path in forbids} & mentioned_names(answer_text(obj)))


@contextlib.contextmanager
def forbidding(obj, forbids: tuple[str, ...], reuses: tuple = ()):
    """Refuses, with :class:`CheckFailed`, an answer ``obj`` (a class or function) whose text names
    a forbidden call, or whose code makes one while the block runs. ``reuses`` lists the other
    answers ``obj`` calls: the calls made inside them are theirs."""
    name = getattr(obj, "__name__", str(obj))
    named = _named_in_text(obj, forbids)
    if named:
        raise CheckFailed(f"{name} uses {', '.join(named)}: this exercise asks you to write it yourself, and the "
                          f"grader gives no points for an answer that calls it.")
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
