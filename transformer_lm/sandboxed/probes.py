"""Call a student's object on given inputs and record what comes out, as plain tensors.

A probe is the *untrusted* half of a check. It runs in two places: inside the grading
sandbox, where only torch and ``transformer_lm/sandboxed`` are importable, and in the
student's own kernel for the visible checks. It therefore imports nothing but torch, and it
judges nothing: it only builds, loads, calls and records. The trusted half
(:mod:`transformer_lm.instructor.kinds`) compares the records with the reference.

How a call travels to a probe is :mod:`transformer_lm.sandboxed.wire`; what every probe does with
a student's object around the call is :mod:`transformer_lm.sandboxed.student_objects`; the traces
some probes record are :mod:`transformer_lm.sandboxed.tensor_trace` (memory and work).

Every probe returns a flat ``{name: tensor}`` record; names are ``output``, ``weights``
(attention weights, when the object returns them), ``output_again`` (a second call, to see
dropout left on in eval mode) and ``grad.<input or parameter name>``.
"""

from __future__ import annotations

import contextlib

import torch

from transformer_lm.sandboxed.decoder import CacheOnlyDecoder, DecoderConfig, Refused, layer_arguments
from transformer_lm.sandboxed.score_blocks import probe_streamed
from transformer_lm.sandboxed.student_objects import (ProbeError, build, builtin_exception, in_grad_mode, kind_of,
                                                      load_parameters, parts_of, plain)
from transformer_lm.sandboxed.tensor_trace import held_by, tensors_in, trace_tensors

# PyTorch's own modules that a student's class may be asked to copy its weights from.
TORCH_MODULES = {"MultiheadAttention": torch.nn.MultiheadAttention,
                 "TransformerEncoderLayer": torch.nn.TransformerEncoderLayer}


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


def _call_in_order(module, inputs: dict, call_kwargs: dict | None):
    names = list(inputs)

    def call(**tensors):
        return module(*(tensors[n] for n in names), **(call_kwargs or {}))
    return call


def probe_module(cls, init: dict, state: dict[str, torch.Tensor], inputs: dict[str, torch.Tensor],
                 call_kwargs: dict | None = None, grad_output: torch.Tensor | None = None,
                 repeat: bool = False, layer: bool = False) -> dict[str, torch.Tensor]:
    """Builds ``cls(**init)``, loads ``state``, switches to eval mode and calls it on
    ``inputs`` (passed by position, in order) and ``call_kwargs``; a decoder ``layer`` takes them
    as :func:`~transformer_lm.sandboxed.decoder.layer_arguments` says."""
    torch.manual_seed(0)
    module = build(cls, init)
    load_parameters(module, state)
    module.eval()
    module.zero_grad(set_to_none=True)
    call = (lambda **tensors: module(*layer_arguments(tensors))) if layer \
        else _call_in_order(module, inputs, call_kwargs)
    return _record_call(call, inputs, dict(module.named_parameters()), grad_output, repeat)


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
    """Calls ``fn(*inputs, **call_kwargs)`` once without gradients, under a
    :class:`~transformer_lm.sandboxed.tensor_trace.TensorTrace`, and records what it returns, one value per name of
    ``parts`` (``["output", "lse"]``), the trace as ``trace.*``, and as ``trace.held`` the largest tensor its code
    reaches outside its arguments (:func:`~transformer_lm.sandboxed.tensor_trace.held_by`)."""
    torch.manual_seed(0)
    arguments = [t.clone() for t in inputs.values()]
    with torch.no_grad(), trace_tensors() as trace:
        result = fn(*arguments, **(call_kwargs or {}))
    return {**parts_of(result, parts), **trace.record("trace"), "trace.held": torch.tensor(held_by(fn))}


def probe_parts(fn, inputs: dict[str, torch.Tensor], parts: list[str], call_kwargs: dict | None = None,
                modes: list[str] | None = None) -> dict[str, torch.Tensor]:
    """Calls ``fn(*inputs, **call_kwargs)`` untraced (where only the kernel's memory cap judges how), once without
    gradients or once in each of ``modes`` (``GRAD_MODES``): records ``parts`` as they are or as ``<mode>.<part>``."""
    torch.manual_seed(0)
    record = {}
    for mode in modes or ["no_grad"]:
        grad_mode, arguments = in_grad_mode(mode, inputs.values())
        with grad_mode:
            found = parts_of(fn(*arguments, **(call_kwargs or {})), parts)
        record.update({f"{mode}.{name}" if modes else name: value for name, value in found.items()})
    return record


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
    _autograd_function(cls)
    torch.manual_seed(0)
    leaves = {name: t.detach().clone().requires_grad_(True) for name, t in (("q", q), ("k", k), ("v", v))}
    with trace_tensors() as forward:
        output = cls.apply(*leaves.values(), *arguments)
    if not isinstance(output, torch.Tensor) or output.grad_fn is None:
        raise ProbeError("Its apply returned no tensor that autograd can differentiate")
    record = {"output": plain(output), **forward.record("forward")}
    for name, value in vars(output.grad_fn).items():
        for i, tensor in enumerate(tensors_in(value)):
            record[f"ctx.{name}.{i}"] = torch.tensor(tuple(tensor.shape), dtype=torch.long)
    if tuple(output.shape) != tuple(grad_output.shape):
        return record   # the judge names the shape
    with trace_tensors() as backward:
        output.backward(grad_output)
    record.update(backward.record("backward"))
    for name, leaf in leaves.items():
        record[f"grad.{name}"] = plain(leaf.grad if leaf.grad is not None else torch.zeros_like(leaf))
    return record


def probe_gradients(cls, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, arguments: list,
                    grad_output: torch.Tensor) -> dict[str, torch.Tensor]:
    """Calls ``cls.apply(q, k, v, *arguments)`` for a ``torch.autograd.Function`` and backpropagates
    ``grad_output``, untraced (at a size where only the kernel's memory cap judges how): records the
    output and the gradients of q, k and v."""
    _autograd_function(cls)
    torch.manual_seed(0)
    leaves = {name: t.detach().requires_grad_(True) for name, t in (("q", q), ("k", k), ("v", v))}
    output = cls.apply(*leaves.values(), *arguments)
    if not isinstance(output, torch.Tensor) or output.grad_fn is None:
        raise ProbeError("Its apply returned no tensor that autograd can differentiate")
    if tuple(output.shape) != tuple(grad_output.shape):
        return {"output": plain(output)}   # the judge names the shape
    output.backward(grad_output)
    return {"output": plain(output), **{f"grad.{name}": plain(leaf.grad if leaf.grad is not None
                                                              else torch.zeros_like(leaf))
                                        for name, leaf in leaves.items()}}


def _autograd_function(cls) -> None:
    if not (isinstance(cls, type) and issubclass(cls, torch.autograd.Function)):
        raise ProbeError("The object given is not a subclass of torch.autograd.Function")


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
                            max_new_tokens: int, pad_id: int | None = None) -> list[list[int]] | dict[str, str]:
    """Builds :class:`~transformer_lm.sandboxed.decoder.CacheOnlyDecoder` on the student's ``attention``
    class with ``state``, in eval mode, and returns ``fn(model, prompts, max_new_tokens)`` (and
    ``pad_id=pad_id`` when given): each prompt and its new tokens, as lists of ints; or, where the
    model refused a call that reached the probe, ``{"refused": why}`` (its
    :class:`~transformer_lm.sandboxed.decoder.Refused` reason)."""
    torch.manual_seed(0)
    model = CacheOnlyDecoder(DecoderConfig(**config), attention, steps=max_new_tokens)
    load_parameters(model, state)
    model.eval()
    pad = {} if pad_id is None else {"pad_id": pad_id}
    try:
        with torch.no_grad():
            result = fn(model, [list(p) for p in prompts], max_new_tokens, **pad)
    except Refused as refusal:
        return {"refused": refusal.reason}
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


PROBES = {probe.__name__: probe for probe in (
    probe_module, probe_load_from_torch, probe_generate, probe_cached_forward, probe_sampler, probe_function,
    probe_transfer, probe_factory, probe_traced, probe_parts, probe_causal_work, probe_autograd_function,
    probe_gradients, probe_call, probe_padding, probe_padded_generation, probe_streamed, parameter_shapes,
    raised_exception)}
"""The probes a call may name: nothing else of this module (or of anything) can be called by name."""
