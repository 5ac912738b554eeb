"""How a probe's call and its record cross the sandbox's boundary.

The trusted side plans a call (:func:`flatten_arguments`: plain arguments go in the plan, tensors in
a file beside it, under :func:`tensor_key`); the harness in the sandbox, and the visible checks in the
student's kernel, make it (:func:`call_probe`) and read what came back (:func:`as_record`). Defined
here once, for both sides, so that the two cannot drift apart.
"""

from __future__ import annotations

import torch

from transformer_lm.sandboxed.probes import PROBES
from transformer_lm.sandboxed.student_objects import ProbeError, plain


def flatten_arguments(arguments: dict) -> tuple[dict, dict[str, torch.Tensor]]:
    """Splits probe arguments into plain (JSON) ones and tensors; a dict of tensors becomes
    one tensor per entry, named ``"<argument>/<key>"``. None values are left out."""
    plain, tensors = {}, {}
    for name, value in arguments.items():
        if isinstance(value, torch.Tensor):
            tensors[name] = value.detach().contiguous()
        elif isinstance(value, dict) and value and all(isinstance(v, torch.Tensor) for v in value.values()):
            tensors.update({f"{name}/{key}": v.detach().contiguous() for key, v in value.items()})
        elif value is not None:
            plain[name] = value
    return plain, tensors


def unflatten_arguments(tensors: dict[str, torch.Tensor]) -> dict:
    """The inverse of the tensor half of :func:`flatten_arguments`, in the order given."""
    arguments: dict = {}
    for name, value in tensors.items():
        if "/" in name:
            outer, inner = name.split("/", 1)
            arguments.setdefault(outer, {})[inner] = value
        else:
            arguments[name] = value
    return arguments


def tensor_key(call_id: str, name: str) -> str:
    """The key of one call's tensor in a file that holds the tensors of many calls."""
    return f"{call_id}::{name}"


def call_probe(call: dict, namespace: dict, tensors: dict[str, torch.Tensor]):
    """Makes a planned call (``probe``, ``objects``, ``arguments``, ``tensor_keys``) on the
    student objects of ``namespace``, with ``tensors`` by their flattened names."""
    objects = {}
    for argument, name in call["objects"].items():
        if name not in namespace:
            raise ProbeError(f"{name} is not defined: its cell did not run, or the name was changed.")
        objects[argument] = namespace[name]
    arguments = {**call["arguments"], **unflatten_arguments({name: tensors[name] for name in call["tensor_keys"]})}
    torch.set_grad_enabled(True)
    return PROBES[call["probe"]](**objects, **arguments)


def as_record(value) -> dict[str, torch.Tensor] | None:
    """A probe's result as a record of plain tensors; None when it is a plain value."""
    if isinstance(value, dict) and value and all(isinstance(v, torch.Tensor) for v in value.values()):
        return {k: plain(v) for k, v in value.items()}
    return None
