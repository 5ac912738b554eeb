"""Which of PyTorch's operators and Python functions compute what an item forbids, found by calling
them, never by their names.

An item that forbids softmax has to take away every kernel that computes one, whatever it is
called: attention of queries ``e1`` against keys ``x e1 sqrt(d)`` and values ``I`` is ``softmax(x)``,
so the fused CPU kernel ``_scaled_dot_product_flash_attention_for_cpu``, whose name holds no
"softmax", computes a softmax too. So each operator of PyTorch's registry is called with arguments
made from its schema on inputs whose softmax (or attention) is known, and it belongs to the family
when one of its outputs is that result (:func:`forward_members`). The operators that autograd runs
in the backward of a member, that give one of its input gradients and that hand-written code's
backward never runs, belong to it too (:func:`backward_members`): the backward of the library's
kernel is the library's. Then torch's Python functions are called the same way
(:func:`python_members`): its references and decompositions compute a softmax from ``exp`` and
``sum``, with no kernel of the family.

A call can crash the process (a few batch-norm kernels do on these inputs), so every call is made in
a forked child (:func:`transformer_lm.instructor.forked_trials.crash_safe`). What a template cannot drive (an operator that needs a CUDA
device, or quantized input whose 8-bit output no check's tolerance accepts) stays out; the tests
show what a run keeps (tests/test_operator_families.py).

``python -m transformer_lm.instructor.operator_families`` writes the families to
:data:`transformer_lm.forbidding.FAMILY_FILE`, which the checks read.
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
import sys
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from transformer_lm.forbidding import FAMILY_FILE
from transformer_lm.instructor.forked_trials import crash_safe

D = 8
"""The size of a row, a head and a key set: small, and the same for each, so that the attention of
``D`` queries against ``D`` keys with values ``I`` holds each query's softmax."""
INTEGERS = {"dim": 1, "embed_dim": D, "num_head": 1, "num_heads": 1}
"""Integer arguments by name: a row's dimension and one head of size ``D``; any other integer
without a default leaves the candidate untried (an operator that needs sizes of its own)."""
TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}
"""The grader's float32 tolerance: an output closer than this to the result would earn its points."""
PYTHON_MODULES = ("torch._refs", "torch._decomp", "torch._prims", "torch._higher_order_ops", "torch.nn.functional",
                  "torch.nn.modules", "torch.nn.attention", "torch.nn.attention.flex_attention", "torch.special",
                  "torch.ao.nn.quantizable")
"""The packages of torch that hold Python implementations of its operators and layers (its
references, decompositions, primitives, higher-order operators, functional API, layers and
attention API): every function in a module of theirs is a candidate. The rest of torch (tracing,
compilation, distributed training, tooling) computes no softmax itself, and some of its functions
block or start compilers when called on a tensor."""


@dataclass(frozen=True)
class Case:
    """Inputs (tensors, given to a candidate's tensor arguments in order) and what a member gives."""

    tensors: tuple
    expected: torch.Tensor


def _softmax(x: torch.Tensor) -> torch.Tensor:
    """A row's softmax, by hand in float64: the answer the candidates are compared with."""
    e = (x.double() - x.double().amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


def _attention(q, k, v) -> torch.Tensor:
    return _softmax(q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])) @ v.double()


def _identity_projections() -> tuple:
    """The weights of a multi-head attention layer of one head that projects nothing: qkv, its bias,
    the output projection and its bias."""
    eye = torch.eye(D)
    return torch.cat([eye, eye, eye]), torch.zeros(3 * D), eye, torch.zeros(D)


def cases(generator: torch.Generator) -> dict[str, list[Case]]:
    """For each family, the inputs a member computes it on: rows (dense, sparse, nested, with an
    empty mask) and, for softmax, attention that is a softmax; for attention, queries, keys and
    values, with one head of identity projections for the multi-head kernels."""
    x = torch.randn(3, D, generator=generator)
    row = x[0]
    keys = torch.zeros(D, D)
    keys[:, 0] = row * math.sqrt(D)                 # each query e1 scores key j as row[j]
    queries = torch.zeros(D, D)
    queries[:, 0] = 1.0                             # D queries e1: D copies of the row's softmax
    as_attention = _softmax(row).expand(D, D)
    values = torch.eye(D)
    q, k, v = (torch.randn(1, 5, D, generator=generator) for _ in range(3))
    softmax = [Case((x,), _softmax(x)), Case((x,), _softmax(x).log()),
               Case((queries[:, None], keys[:, None], values[:, None]), as_attention[:, None]),
               Case((x, torch.zeros(3, D, dtype=torch.bool)), _softmax(x)),
               Case((x.to_sparse(),), _softmax(x)), Case((x.to_sparse(),), _softmax(x).log()),
               Case((torch.nested.nested_tensor([x]),), _softmax(x)),
               Case((queries[None, None], keys[None, None], values[None, None]), as_attention),
               Case((queries[None], keys[None], values[None], *_identity_projections()), as_attention)]
    attention = [Case((q[None], k[None], v[None]), _attention(q, k, v)),
                 Case((q, k, v, *_identity_projections()), _attention(q, k, v)),
                 Case(tuple(t.transpose(0, 1) for t in (q, k, v)), _attention(q, k, v).transpose(0, 1))]
    return {"softmax": softmax, "attention": attention}


def _dense(tensor):
    if tensor.layout == torch.sparse_coo:
        return tensor.to_dense()
    if tensor.is_nested:
        return tensor.to_padded_tensor(0.0)
    return tensor if tensor.layout == torch.strided else None


def outputs(result) -> list[torch.Tensor]:
    """The floating-point tensors a call returned, made dense."""
    found = result if isinstance(result, (tuple, list)) else (result,)
    dense = [_dense(t) for t in found if isinstance(t, torch.Tensor) and not t.is_quantized]
    return [t for t in dense if t is not None and t.is_floating_point()]


def gives(result, expected: torch.Tensor) -> bool:
    """Whether one of a call's outputs is ``expected``, within the grader's tolerance."""
    return any(t.numel() == expected.numel() and torch.allclose(t.detach().double().flatten(), expected.flatten(),
                                                                **TOLERANCE) for t in outputs(result))


def _schema_arguments(schema, tensors: tuple) -> dict | None:
    """Keyword arguments for an operator's ``schema``: ``tensors`` in order for its tensors, an
    integer by :data:`INTEGERS`, False, 0.0 and None where it has no default; None when the
    tensors do not fit, it writes to an argument, or it needs what no case gives."""
    given, arguments = list(tensors), {}
    for argument in schema.arguments:
        kind = str(argument.type)
        if argument.alias_info is not None and argument.alias_info.is_write:
            return None
        if kind == "Tensor":
            if not given:
                return None
            arguments[argument.name] = given.pop(0).clone()
        elif argument.name in INTEGERS and kind in ("int", "SymInt", "Optional[int]"):
            arguments[argument.name] = INTEGERS[argument.name]
        elif argument.has_default_value():
            continue
        elif kind in ("bool", "float", "ScalarType") or kind.startswith("Optional["):
            arguments[argument.name] = {"bool": False, "float": 0.0, "ScalarType": torch.float32}.get(kind)
        else:
            return None
    return None if given else arguments


def _python_arguments(function: Callable, tensors: tuple) -> list | None:
    """Positional arguments for a Python function: ``tensors`` first, then its other parameters
    without a default by :data:`INTEGERS` or False; None when the tensors do not fit."""
    try:
        parameters = [p for p in inspect.signature(function).parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return None
    if len(parameters) < len(tensors):
        return None
    rest = [INTEGERS.get(p.name, False) for p in parameters[len(tensors):] if p.default is p.empty]
    return [t.clone() for t in tensors] + rest


def operators() -> list:
    """Every overload of the registry with a schema, as ``(name, overload, schema)``."""
    registered = set(torch._C._dispatch_get_all_op_names())
    return [(s.name, s.overload_name, s) for s in torch._C._jit_get_all_schemas()
            if (f"{s.name}.{s.overload_name}" if s.overload_name else s.name) in registered]


def overload(name: str, overload_name: str):
    namespace, operator = name.split("::")
    return getattr(getattr(getattr(torch.ops, namespace), operator), overload_name or "default")


def _members_by_trial(families: dict[str, list[Case]], candidates: list, label: Callable,
                      call: Callable) -> dict[str, set[str]]:
    """For each family, ``label(candidate)`` of each candidate one of whose calls on a case gives its
    result: ``call(candidate, case)`` is that call, a function of no arguments, or None where the
    case does not fit the candidate. Each candidate is tried in a forked child (:func:`crash_safe`)."""
    def tried(candidate):
        for family, family_cases in families.items():
            for case in family_cases:
                made = call(candidate, case)
                if made is None:
                    continue
                try:
                    result = made()
                except BaseException:  # noqa: BLE001 - SystemExit too: a candidate that refuses is no member
                    continue
                if gives(result, case.expected):
                    yield f"{family} {label(candidate)}"
                    break
    found, _ = crash_safe(candidates, tried)
    members = {family: set() for family in families}
    for line in found:
        family, member = line.split(" ", 1)
        members[family].add(member)
    return members


def forward_members(families: dict[str, list[Case]]) -> dict[str, set[str]]:
    """For each family, the operators (``aten::_softmax``) one of whose calls on a case gives its result."""
    def call(candidate, case):
        name, overload_name, schema = candidate
        arguments = _schema_arguments(schema, case.tensors)
        return None if arguments is None else lambda: overload(name, overload_name)(**arguments)
    return _members_by_trial(families, operators(), lambda candidate: candidate[0], call)


class _Recorder(TorchDispatchMode):
    """The operators that run, each with its dense floating-point outputs."""

    def __init__(self):
        super().__init__()
        self.ran: list[tuple[str, list[torch.Tensor]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        self.ran.append((func._schema.name, [t.detach().clone() for t in outputs(result)]))
        return result


def _with_grad(tensors: tuple) -> tuple:
    return tuple(t.clone().requires_grad_(True) if t.is_floating_point() and t.layout == torch.strided
                 and not t.is_nested else t.clone() for t in tensors)


def _backward_ran(forward: Callable, tensors: tuple, expected: torch.Tensor,
                  generator: torch.Generator) -> tuple[list, list[torch.Tensor]] | None:
    """What autograd ran in the backward of ``forward`` on ``tensors`` (from the output that is
    ``expected``), and the input gradients it gave; None where no output is differentiable."""
    inputs = _with_grad(tensors)
    differentiable = [t for t in inputs if t.requires_grad]
    try:
        result = forward(*inputs)
    except Exception:  # noqa: BLE001 - a form of call this candidate does not take
        return None
    found = result if isinstance(result, (tuple, list)) else (result,)
    chosen = [t for t in found if isinstance(t, torch.Tensor) and t.requires_grad and t.layout == torch.strided
              and t.numel() == expected.numel() and torch.allclose(t.detach().double().flatten(), expected.flatten(),
                                                                  **TOLERANCE)]
    if not chosen or not differentiable:
        return None
    with _Recorder() as recorder:
        try:
            grads = torch.autograd.grad(chosen[0], differentiable, torch.randn(chosen[0].shape, generator=generator),
                                        allow_unused=True)
        except RuntimeError:  # an operator with no derivative: its backward runs nothing
            return None
    return recorder.ran, [g for g in grads if g is not None]


def _hand_written_ran(generator: torch.Generator) -> set[str]:
    """Every operator that hand-written softmax and attention run, forward and backward, on inputs
    of two, three and four dimensions: what a student's own code runs, which no family may hold."""
    ran = set()
    for shape in ((5, D), (2, 5, D), (2, 2, 5, D)):
        x, q, k, v = (torch.randn(shape, generator=generator) for _ in range(4))
        for function, tensors in ((lambda x: _softmax(x).float(), (x,)),
                                  (lambda q, k, v: _attention(q, k, v).float(), (q, k, v))):
            expected = function(*tensors).double()
            with _Recorder() as forward:
                recorded = _backward_ran(function, tensors, expected, generator)
            ran |= {name for name, _ in forward.ran} | {name for name, _ in recorded[0]}
    return ran


def backward_members(families: dict[str, list[Case]], members: dict[str, set[str]],
                     generator: torch.Generator) -> dict[str, set[str]]:
    """For each family, the operators autograd runs in a member's backward that give one of its
    input gradients, less those that hand-written code runs too."""
    hand_written = _hand_written_ran(generator)
    found = {family: set() for family in families}
    by_name = {}
    for name, overload_name, schema in operators():
        by_name.setdefault(name, []).append((overload_name, schema))
    for family, names in members.items():
        for name in sorted(names):
            for overload_name, schema in by_name.get(name, []):
                for case in families[family]:
                    arguments = _schema_arguments(schema, case.tensors)
                    if arguments is None:
                        continue
                    tensors = [k for k, v in arguments.items() if isinstance(v, torch.Tensor)]
                    recorded = _backward_ran(
                        lambda *given: overload(name, overload_name)(**{**arguments, **dict(zip(tensors, given))}),
                        tuple(arguments[k] for k in tensors), case.expected, generator)
                    for ran, grads in [recorded] if recorded else []:
                        found[family] |= {op for op, made in ran if op not in hand_written and any(
                            m.numel() == g.numel() and torch.allclose(m.double().flatten(), g.double().flatten(),
                                                                      **TOLERANCE) for m in made for g in grads)}
    return found


def python_functions() -> list[str]:
    """The functions and layers of :data:`PYTHON_MODULES`, as ``module:attribute``, once they are
    imported: each under the module that defines it (the run takes it out under every other name)."""
    found = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in PYTHON_MODULES:
            importlib.import_module(name)
        for module_name, module in list(sys.modules.items()):
            if module_name.startswith(PYTHON_MODULES) and isinstance(module, types.ModuleType):
                found |= {f"{module_name}:{attribute}" for attribute, value in list(vars(module).items())
                          if (isinstance(value, types.FunctionType) or isinstance(value, type) and
                              issubclass(value, torch.nn.Module)) and value.__module__ == module_name}
    return sorted(found)


def identity_layer(layer_class: type) -> torch.nn.Module | None:
    """A layer of ``layer_class`` made with its integer arguments by :data:`INTEGERS` (one head of
    size ``D``), its square weights (and stacks of them) the identity and every other parameter 0, so
    that a multi-head attention layer computes plain attention; None when it cannot be made so."""
    try:
        required = [p.name for p in inspect.signature(layer_class).parameters.values()
                    if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        if not all(name in INTEGERS for name in required):
            return None
        layer = layer_class(**{name: INTEGERS[name] for name in required})
        with torch.no_grad():
            for parameter in layer.parameters():
                square = parameter.dim() == 2 and parameter.shape[1] == D and parameter.shape[0] % D == 0
                parameter.copy_(torch.eye(D).repeat(parameter.shape[0] // D, 1) if square else 0.0)
        return layer.eval()
    except Exception:  # noqa: BLE001 - a layer these arguments do not make
        return None


def resolve(where: str):
    """The object named ``module:attribute``, or None when its module is not loaded."""
    module_name, attribute = where.split(":")
    return getattr(sys.modules.get(module_name), attribute, None)


def python_members(families: dict[str, list[Case]]) -> dict[str, set[str]]:
    """For each family, torch's Python functions and layers (``module:attribute``) one of whose calls
    on a case gives its result: a function called with the case's tensors, a layer made by
    :func:`identity_layer` called with queries, keys and values."""
    def call(where, case):
        function = resolve(where)
        if isinstance(function, type):
            layer = identity_layer(function)
            function = layer.forward if layer is not None else None
        arguments = _python_arguments(function, case.tensors) if function is not None else None
        return None if arguments is None else lambda: function(*arguments)
    return _members_by_trial(families, python_functions(), lambda where: where, call)


def find() -> dict:
    """Every family, found anew in this process's torch."""
    generator = torch.Generator().manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # nested tensors and flex_attention warn that they are prototypes
        families = cases(generator)
        forward = forward_members(families)
        python = python_members(families)
        backward = backward_members(families, forward, generator)   # last: in this process, after every fork
    return {"torch": torch.__version__.split("+")[0],
            "families": {family: {"forward": sorted(forward[family]), "backward": sorted(backward[family] -
                                                                                         forward[family]),
                                  "python": sorted(python[family])} for family in families}}


def main() -> None:
    found = find()
    FAMILY_FILE.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    for family, members in found["families"].items():
        print(f"{family}: {len(members['forward'])} operators, {len(members['backward'])} backward operators, "
              f"{len(members['python'])} Python functions")


if __name__ == "__main__":
    main()
