"""Call a student's object on given inputs and record what comes out, as plain tensors.

A probe is the *untrusted* half of a check. It runs in two places: inside the grading
sandbox, where only torch and ``transformer_lm/sandboxed`` are importable, and in the
student's own kernel for the visible checks. It therefore imports nothing but torch, and it
judges nothing: it only builds, loads, calls and records. The trusted half
(:mod:`transformer_lm.kinds`) compares the records with the reference.

How a call travels (:func:`flatten_arguments`, :func:`call_probe`) is defined here once, for
both sides: the trusted side writes it, the harness in the sandbox and the visible checks in
the student's kernel read it.

Every probe returns a flat ``{name: tensor}`` record; names are ``output``, ``weights``
(attention weights, when the object returns them), ``output_again`` (a second call, to see
dropout left on in eval mode) and ``grad.<input or parameter name>``.
"""

from __future__ import annotations

import builtins
import contextlib
import gc
import sys
import types
import weakref
from types import SimpleNamespace

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from transformer_lm.sandboxed.decoder import DecoderConfig, TinyDecoder
from transformer_lm.sandboxed.outside import probe_outside_torch

# PyTorch's own modules that a student's class may be asked to copy its weights from.
TORCH_MODULES = {"MultiheadAttention": torch.nn.MultiheadAttention,
                 "TransformerEncoderLayer": torch.nn.TransformerEncoderLayer}


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


def kind_of(value) -> str:
    """``value``'s type in words that no student code chose: the name of a type of Python's or
    torch's own, else "an object of a class of your own"."""
    return _OWN_TYPES.get(type(value), "an object of a class of your own")


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


def _split_result(result):
    """``output`` or ``(output, weights)`` as the object returned it (a second value that is not a
    tensor, such as a layer's cache, is not weights)."""
    if isinstance(result, (tuple, list)):
        if len(result) != 2:
            raise ProbeError(f"forward returned {len(result)} values, expected the output (and the weights)")
        return result[0], result[1] if isinstance(result[1], torch.Tensor) else None   # (output, cache): no weights
    return result, None


def cache_of(result) -> dict[str, torch.Tensor]:
    """The keys and values a layer returned as its cache, ``(output, (k, v))``, as
    ``cache.keys`` and ``cache.values``; nothing when it returned no such pair."""
    if isinstance(result, (tuple, list)) and len(result) == 2 and isinstance(result[1], (tuple, list)) \
            and len(result[1]) == 2 and all(isinstance(t, torch.Tensor) for t in result[1]):
        return {"cache.keys": plain(result[1][0]), "cache.values": plain(result[1][1])}
    return {}


def _record_call(call, tensors: dict[str, torch.Tensor], parameters: dict[str, torch.Tensor],
                 grad_output: torch.Tensor | None, repeat: bool) -> dict[str, torch.Tensor]:
    """Calls ``call(**inputs)``, then backpropagates ``grad_output`` and records the gradients."""
    inputs = {name: t.detach().clone().requires_grad_(t.is_floating_point()) for name, t in tensors.items()}
    result = call(**inputs)
    output, weights = _split_result(result)
    record = {"output": plain(output), **cache_of(result)}
    if weights is not None:
        record["weights"] = plain(weights)
    if repeat:
        with torch.no_grad():
            record["output_again"] = plain(_split_result(call(**inputs))[0])
    if grad_output is not None and tuple(output.shape) == tuple(grad_output.shape):  # else the judge names the shape
        if not output.requires_grad:
            raise ProbeError("the output is not connected to the inputs by autograd (was it detached, "
                             "or built with torch.no_grad or numpy?)")
        output.backward(grad_output)
        for name, t in {**inputs, **parameters}.items():
            if t.is_floating_point():
                record[f"grad.{name}"] = plain(t.grad if t.grad is not None else torch.zeros_like(t))
    return record


def build(cls, init: dict) -> torch.nn.Module:
    """``cls(**init)`` as an ``nn.Module``; a dict under ``config`` becomes an object with
    attributes, as minGPT's classes take their sizes (``config.n_embd``)."""
    init = {k: SimpleNamespace(**v) if k == "config" and isinstance(v, dict) else v for k, v in init.items()}
    module = cls(**init)
    if not isinstance(module, torch.nn.Module):
        raise ProbeError(f"The class built {kind_of(module)}, not an nn.Module")
    return module


def _call_in_order(module, inputs: dict, call_kwargs: dict | None):
    names = list(inputs)

    def call(**tensors):
        return module(*(tensors[n] for n in names), **(call_kwargs or {}))
    return call


def probe_module(cls, init: dict, state: dict[str, torch.Tensor], inputs: dict[str, torch.Tensor],
                 call_kwargs: dict | None = None, grad_output: torch.Tensor | None = None,
                 repeat: bool = False) -> dict[str, torch.Tensor]:
    """Builds ``cls(**init)``, loads ``state``, switches to eval mode and calls it on
    ``inputs`` (passed by position, in order) and ``call_kwargs``."""
    torch.manual_seed(0)
    module = build(cls, init)
    load_parameters(module, state)
    module.eval()
    module.zero_grad(set_to_none=True)
    return _record_call(_call_in_order(module, inputs, call_kwargs), inputs, dict(module.named_parameters()),
                        grad_output, repeat)


def probe_load_from_torch(cls, init: dict, torch_module: str, torch_init: dict, torch_state: dict[str, torch.Tensor],
                          inputs: dict[str, torch.Tensor], call_kwargs: dict | None = None,
                          grad_output: torch.Tensor | None = None, repeat: bool = False) -> dict[str, torch.Tensor]:
    """Builds PyTorch's ``torch_module`` with ``torch_state``, lets the student's
    ``cls(**init).load_from_torch(it)`` copy its weights, and records the student's module
    in eval mode (output and input gradients: its parameter names are the student's own)."""
    torch.manual_seed(0)
    theirs = TORCH_MODULES[torch_module](**torch_init)
    theirs.load_state_dict(torch_state)
    theirs.eval()
    module = build(cls, init)
    if not callable(getattr(module, "load_from_torch", None)):
        raise ProbeError("The module has no method load_from_torch")
    with torch.no_grad():
        module.load_from_torch(theirs)
    module.eval()
    return _record_call(_call_in_order(module, inputs, call_kwargs), inputs, {}, grad_output, repeat)


@contextlib.contextmanager
def tokens_per_call(model: torch.nn.Module):
    """Collects how many tokens per sequence each call of ``model`` runs on: a model used with a
    KV cache runs on the prompt first, then on one new token per step. It wraps the model's own
    ``forward``, so ``model(idx)`` and ``model.forward(idx)`` are both counted."""
    seen: list[int] = []
    forward = model.forward

    def counted(*args, **kwargs):
        tokens = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
        if tokens is not None:
            seen.append(int(tokens.shape[-1]))
        return forward(*args, **kwargs)

    model.forward = counted
    try:
        yield seen
    finally:
        del model.forward


def probe_generate(cls, init: dict, state: dict[str, torch.Tensor], idx: torch.Tensor, max_new_tokens: int,
                   call_kwargs: dict | None = None) -> dict[str, torch.Tensor]:
    """Builds the student's model with ``state``, in eval mode, and records
    ``generate(idx, max_new_tokens, **call_kwargs)`` as ``output``, and the tokens that each
    call of the model ran on as ``tokens_per_call``."""
    torch.manual_seed(0)
    model = build(cls, init)
    load_parameters(model, state)
    model.eval()
    with torch.no_grad(), tokens_per_call(model) as seen:
        tokens = model.generate(idx.clone(), max_new_tokens, **(call_kwargs or {}))
    return {"output": plain(tokens), "tokens_per_call": torch.tensor(seen, dtype=torch.long)}


def probe_cached_forward(cls, init: dict, state: dict[str, torch.Tensor], idx: torch.Tensor,
                         prefix: int) -> dict[str, torch.Tensor]:
    """Builds the student's GPT with ``state``, in eval mode, and records its logits for ``idx``
    ``(B, T)`` run whole (``output``) and run with a KV cache (``cached``, ``(B, T - prefix + 1,
    vocab)``): the first ``prefix`` tokens (their last position's logits), then one token per call.
    The cache is minGPT's: a list of one dict per block, empty at the start."""
    torch.manual_seed(0)
    model = build(cls, init)
    load_parameters(model, state)
    model.eval()
    with torch.no_grad():
        whole = _split_result(model(idx))[0]
        cache = [{} for _ in model.blocks]
        steps = [_split_result(model(idx[:, :prefix], kv_cache=cache))[0][:, -1:]]
        for position in range(prefix, idx.shape[1]):
            steps.append(_split_result(model(idx[:, position:position + 1], kv_cache=cache))[0])
    return {"output": plain(whole), "cached": plain(torch.cat(steps, dim=1))}


def probe_sampler(fn, logits: torch.Tensor, call_kwargs: dict | None = None) -> dict[str, torch.Tensor]:
    """Calls ``fn(logits, **call_kwargs)`` once, under a fixed seed and without gradients, and
    records the tokens it draws."""
    torch.manual_seed(0)
    with torch.no_grad():
        return {"output": plain(fn(logits.clone(), **(call_kwargs or {})))}


def probe_function(fn, inputs: dict[str, torch.Tensor], call_kwargs: dict | None = None,
                   grad_output: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Calls ``fn(*inputs, **call_kwargs)``; gradients flow to the floating-point inputs."""
    names = list(inputs)

    def call(**tensors):
        return fn(*(tensors[n] for n in names), **(call_kwargs or {}))

    return _record_call(call, inputs, {}, grad_output, repeat=False)


def probe_transfer(fn, source_cls, source_init: dict, source_state: dict[str, torch.Tensor],
                   target_cls, target_init: dict, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """Calls ``fn(source, target)`` (a weight transfer), then records ``target(x)``."""
    torch.manual_seed(0)
    source = build(source_cls, source_init)
    load_parameters(source, source_state)
    torch.manual_seed(1)
    target = build(target_cls, target_init)
    fn(source, target)
    with torch.no_grad():
        return {"output": plain(_split_result(target(x))[0])}


def probe_factory(fn, kwargs: dict, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """Calls ``fn(**kwargs)`` for a module, runs it in eval mode on ``x`` and records the
    output and, as ``shape.<name>``, the shape of each parameter."""
    torch.manual_seed(0)
    module = fn(**kwargs)
    if not isinstance(module, torch.nn.Module):
        raise ProbeError(f"The function returned {kind_of(module)}, expected an nn.Module")
    module.eval()
    with torch.no_grad():
        record = {"output": plain(_split_result(module(x))[0])}
    record.update({f"shape.{name}": torch.tensor(list(p.shape)) for name, p in module.named_parameters()})
    return record


def probe_traced(fn, inputs: dict[str, torch.Tensor], parts: list[str],
                 call_kwargs: dict | None = None) -> dict[str, torch.Tensor]:
    """Calls ``fn(*inputs, **call_kwargs)`` once without gradients, under a :class:`TensorTrace`,
    and records what it returns, one value per name of ``parts`` (``["output", "lse"]``), the
    trace as ``trace.*``, and as ``trace.held`` the largest tensor its code reaches outside its
    arguments (:func:`held_by`)."""
    torch.manual_seed(0)
    arguments = [t.clone() for t in inputs.values()]
    with torch.no_grad(), trace_tensors() as trace:
        result = fn(*arguments, **(call_kwargs or {}))
    values = list(result) if isinstance(result, (tuple, list)) else [result]
    if len(values) != len(parts):
        raise ProbeError(f"The function returned {len(values)} value(s); expected "
                         f"{len(parts)}: {', '.join(parts)}")
    return {**{name: plain(value) for name, value in zip(parts, values)}, **trace.record("trace"),
            "trace.held": torch.tensor(held_by(fn))}


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


def probe_causal_work(fn, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call_kwargs: dict | None = None,
                      backward: bool = False) -> dict[str, torch.Tensor]:
    """Calls ``fn(q, k, v, causal=..., **call_kwargs)`` without the causal mask and with it, each
    under a :class:`TensorTrace`, and records how many numbers each call exponentiated
    (``full.exponentials``, ``causal.exponentials``: the scores it computed), how many products its
    matrix products summed (``full.multiplies``, ``causal.multiplies``) and the shape of the
    largest tensor each created (``full.largest``, ``causal.largest``). With ``backward``, ``fn``
    is a ``torch.autograd.Function``, called as ``fn.apply(q, k, v, causal, *call_kwargs.values())``,
    and what is traced is its backward pass (of a gradient of ones)."""
    torch.manual_seed(0)
    record = {}
    for name, causal in (("full", False), ("causal", True)):
        arguments = [t.detach().clone().requires_grad_(backward) for t in (q, k, v)]
        if backward:
            output = fn.apply(*arguments, causal, *(call_kwargs or {}).values())
            with trace_tensors() as trace:
                output.backward(torch.ones_like(output))
        else:
            with torch.no_grad(), trace_tensors() as trace:
                fn(*arguments, causal=causal, **(call_kwargs or {}))
        totals = trace.record(name)
        record.update({key: totals[key] for key in (f"{name}.exponentials", f"{name}.multiplies", f"{name}.largest")})
    return record


def probe_autograd_function(cls, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, arguments: list,
                            grad_output: torch.Tensor) -> dict[str, torch.Tensor]:
    """Calls ``cls.apply(q, k, v, *arguments)`` for a ``torch.autograd.Function`` and backpropagates
    ``grad_output``, each under a :class:`TensorTrace`. Records the output, the gradients of q, k
    and v, both traces (``forward.*``, measured once the forward has returned: what it keeps for
    the backward is still alive; ``backward.*``) and the shape of every tensor the forward left
    on ``ctx`` as an attribute (``ctx.<name>.<i>``)."""
    if not (isinstance(cls, type) and issubclass(cls, torch.autograd.Function)):
        raise ProbeError("The object given is not a subclass of torch.autograd.Function")
    torch.manual_seed(0)
    leaves = {name: t.detach().clone().requires_grad_(True) for name, t in (("q", q), ("k", k), ("v", v))}
    with trace_tensors() as forward:
        output = cls.apply(*leaves.values(), *arguments)
    if not isinstance(output, torch.Tensor) or output.grad_fn is None:
        raise ProbeError("Its apply returned no tensor that autograd can differentiate")
    record = {"output": plain(output), **forward.record("forward")}
    for name, value in vars(output.grad_fn).items():
        for i, tensor in enumerate(_tensors_in(value)):
            record[f"ctx.{name}.{i}"] = torch.tensor(tuple(tensor.shape), dtype=torch.long)
    if tuple(output.shape) != tuple(grad_output.shape):
        return record   # the judge names the shape
    with trace_tensors() as backward:
        output.backward(grad_output)
    record.update(backward.record("backward"))
    for name, leaf in leaves.items():
        record[f"grad.{name}"] = plain(leaf.grad if leaf.grad is not None else torch.zeros_like(leaf))
    return record


def probe_call(fn, arguments: dict):
    """Calls ``fn(**arguments)`` with plain arguments (a string ``"torch.<dtype>"`` becomes that
    dtype) and records a tensor result as ``output``; a number comes back as itself."""
    torch.manual_seed(0)
    arguments = {name: getattr(torch, value[len("torch."):]) if isinstance(value, str) and value.startswith("torch.")
                 else value for name, value in arguments.items()}
    result = fn(**arguments)
    if isinstance(result, torch.Tensor) and result.dim():
        return {"output": plain(result)}
    number = result.item() if isinstance(result, torch.Tensor) else result
    if not isinstance(number, (int, float)) or isinstance(number, bool):
        raise ProbeError(f"The function returned {kind_of(result)}; expected a number or a tensor")
    return number


def probe_padding(positions_fn, mask_fn, attention_mask: torch.Tensor, query_len: int) -> dict[str, torch.Tensor]:
    """Records ``positions_fn(attention_mask)`` and ``mask_fn(attention_mask, query_len)``, the
    positions and the mask of a left-padded batch."""
    torch.manual_seed(0)
    return {"positions": plain(positions_fn(attention_mask.clone())),
            "mask": plain(mask_fn(attention_mask.clone(), query_len))}


def probe_padded_generation(fn, attention, config: dict, state: dict[str, torch.Tensor], prompts: list[list[int]],
                            max_new_tokens: int) -> list[list[int]]:
    """Builds :class:`~transformer_lm.sandboxed.decoder.TinyDecoder` on the student's ``attention``
    class with ``state``, in eval mode, and returns ``fn(model, prompts, max_new_tokens)``: each
    prompt and its new tokens, as lists of ints."""
    torch.manual_seed(0)
    model = TinyDecoder(DecoderConfig(**config), attention)
    load_parameters(model, state)
    model.eval()
    with torch.no_grad():
        result = fn(model, [list(p) for p in prompts], max_new_tokens)
    if isinstance(result, torch.Tensor) or not isinstance(result, (list, tuple)):
        raise ProbeError(f"The function returned {kind_of(result)}; expected a list with one "
                         "list of token ids per prompt")
    try:
        return [[int(token) for token in row] for row in result]
    except (TypeError, ValueError):
        raise ProbeError("every row of the result must be a list of token ids (ints)") from None


def parameter_shapes(cls, init: dict) -> dict[str, list[int]]:
    """The names and shapes of the parameters of ``cls(**init)``."""
    return {name: list(p.shape) for name, p in build(cls, init).named_parameters()}


def raised_exception(cls, init: dict) -> str | None:
    """The name of the exception that ``cls(**init)`` raises, or None."""
    try:
        build(cls, init)
    except ProbeError:
        return None
    except Exception as error:  # noqa: BLE001 - any exception is a result here
        return builtin_exception(error)
    return None


PROBES = {probe.__name__: probe for probe in (probe_module, probe_load_from_torch, probe_generate, probe_cached_forward,
                                              probe_sampler, probe_function, probe_transfer, probe_factory,
                                              probe_traced, probe_causal_work, probe_autograd_function, probe_call,
                                              probe_padding, probe_padded_generation,
                                              probe_outside_torch, parameter_shapes, raised_exception)}
"""The probes a call may name: nothing else of this module (or of anything) can be called by name."""


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
    is left out."""
    def pointers(value) -> set[int]:
        found = set()
        for tensor in _tensors_in(value):
            try:
                if tensor.numel():
                    found.add(tensor.untyped_storage().data_ptr())
            except _error:
                continue
        return found
    return name != "__get__" and bool(pointers(result) - pointers(_list(args) + _list(kwargs.values())))


class _Watch:
    """What both modes share: the watched names, and for each one seen, the notebook cells that
    were on the Python stack when it ran (innermost first), as ``cell_of(frame)`` names them; and
    how many operators the dispatch mode has seen, so that a torch function whose work bypassed
    it is noted as :data:`UNTRACED`."""

    def __init__(self, names: frozenset[str], cell_of):
        self.names, self.cell_of = names | {UNTRACED}, cell_of
        self.seen: dict[str, set[tuple[int, ...]]] = {}
        self.operators = 0

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


class _OperatorNames(TorchDispatchMode):
    """Sees every ATen operator that runs (``aten::_softmax``), forward and backward."""

    def __init__(self, watch: _Watch):
        super().__init__()
        self.watch = watch

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.watch.operators += 1
        self.watch.note(func.name())
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
# (``builtins.max``, ``probes._numel``, ``torch.tensor``) and put it back before the grader looks.
# So every function of it finds what it uses in its own defaults, bound when this module is loaded.


def _tensors_in(value, _isinstance=isinstance, _tensor=torch.Tensor, _sequences=(tuple, list),
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

    def operator(self, func, args, kwargs: dict, result, _tensors_in=_tensors_in, _list=list, _max=max,
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


class TensorTrace(TorchDispatchMode):
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
