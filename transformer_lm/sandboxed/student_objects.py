"""What every probe does with a student's object around the call: builds it, loads its weights,
copies what it returns into plain tensors, and says what went wrong in words no student code chose.

Kept apart from the probes themselves (:mod:`transformer_lm.sandboxed.probes`) because the way a
call travels (:mod:`transformer_lm.sandboxed.wire`) needs the same copying and errors, and the
trusted side catches :class:`ProbeError` without caring which probe raised it. Like every module of
this folder it imports nothing but torch: it runs in the grading sandbox and in the student's kernel.
"""

from __future__ import annotations

import builtins
from types import SimpleNamespace

import torch


GRAD_MODES = {"no_grad": (False, False), "enable_grad": (True, False), "no_grad_leaves": (False, True)}
"""The modes a capped forward is called in, as (autograd on, the inputs require grad). In none of
them does autograd record anything for the call, so a tiled pass holds the same in each: without
gradients; with them on, on inputs that need none (a plain call in a notebook); and with them off,
on inputs that need them (as ``torch.autograd.Function.forward`` receives its inputs). A call with
both on would keep every tile for autograd, whatever the answer: no mode claims it."""


def in_grad_mode(mode: str, tensors) -> tuple:
    """The context of ``mode`` (:data:`GRAD_MODES`) and ``tensors`` as that mode hands them over."""
    grad, leaves = GRAD_MODES[mode]
    return torch.set_grad_enabled(grad), [t.detach().requires_grad_(leaves) for t in tensors]


class ProbeError(Exception):
    """The student's object could not be probed; the message says why, for the student. The
    message never quotes a name the student's code chose (a class's, a function's, a
    parameter's): code can set any name at run time, and a name could carry a hidden input out of
    the grader's run. Such names go in ``detail``, which the visible checks show (the student's
    own kernel) and the grader's run leaves out (it reports ``args[0]``, the message alone)."""

    def __init__(self, message: str, detail: str = ""):
        super().__init__(message)
        self.detail = detail

    def __str__(self) -> str:
        return f"{self.args[0]} {self.detail}".rstrip()


_OWN_TYPES = {**{cls: f"torch.nn.{name}" for name, cls in vars(torch.nn).items() if isinstance(cls, type)},
              **{cls: f"torch.{name}" for name, cls in vars(torch).items() if isinstance(cls, type)},
              **{cls: name for name, cls in vars(builtins).items() if isinstance(cls, type)}, type(None): "None"}
"""Python's and torch's own types, by name, as they were before any student code ran."""


OWN_CLASS = "an object of a class of your own"
KINDS = frozenset(_OWN_TYPES.values()) | {OWN_CLASS}
"""Every word :func:`kind_of` gives: what the grader may show of a type a run returned."""


def kind_of(value) -> str:
    """``value``'s type in words that no student code chose: the name of a type of Python's or
    torch's own, else "an object of a class of your own"."""
    return _OWN_TYPES.get(type(value), OWN_CLASS)


def builtin_exception(error: BaseException) -> str:
    """The name of the nearest of Python's own exception types that ``error`` is an instance of
    (a ``ShapeError(ValueError)`` is a ValueError): never a name the student's code chose."""
    return next(_OWN_TYPES[cls] for cls in type(error).__mro__
                if cls in _OWN_TYPES and not _OWN_TYPES[cls].startswith("torch."))


def plain(tensor) -> torch.Tensor:
    """A detached, contiguous, plain ``torch.Tensor`` copy.

    Tensor subclasses and ``__torch_function__`` overrides are switched off while copying,
    so what is recorded is the data itself, not what an object claims about it.
    """
    if not isinstance(tensor, torch.Tensor):
        raise ProbeError(f"expected a torch.Tensor, got {kind_of(tensor)}")
    with torch._C.DisableTorchFunction():
        return torch.Tensor._make_subclass(torch.Tensor, tensor.detach().cpu().clone().contiguous())


def load_parameters(module: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copies ``state`` into the module's parameters, which must match by name and shape."""
    params = dict(module.named_parameters())
    missing = sorted(set(state) - set(params))
    if missing:
        have = ", ".join(f"{n} {tuple(p.shape)}" for n, p in params.items()) or "no parameters at all"
        raise ProbeError(f"The module has no parameter {', '.join(missing)}; name its parameters as the task says.",
                         f"It has: {have}.")
    for name, value in state.items():
        if tuple(params[name].shape) != tuple(value.shape):
            raise ProbeError(f"The module's parameter {name} has shape {tuple(params[name].shape)}, "
                             f"expected {tuple(value.shape)}.")
    with torch.no_grad():
        for name, value in state.items():
            params[name].copy_(value)


def build(cls, init: dict) -> torch.nn.Module:
    """``cls(**init)`` as an ``nn.Module``; a dict under ``config`` becomes an object with
    attributes, as minGPT's classes take their sizes (``config.n_embd``)."""
    init = {k: SimpleNamespace(**v) if k == "config" and isinstance(v, dict) else v for k, v in init.items()}
    module = cls(**init)
    if not isinstance(module, torch.nn.Module):
        raise ProbeError(f"The class built {kind_of(module)}, not an nn.Module")
    return module


def parts_of(result, parts: list[str]) -> dict[str, torch.Tensor]:
    """What a function returned, one plain tensor per name of ``parts`` (``["output", "lse"]``)."""
    values = list(result) if isinstance(result, (tuple, list)) else [result]
    if len(values) != len(parts):
        raise ProbeError(f"The function returned {len(values)} value(s); expected "
                         f"{len(parts)}: {', '.join(parts)}")
    return {name: plain(value) for name, value in zip(parts, values)}
