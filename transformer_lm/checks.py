"""The checks behind the notebooks' visible test cells, and the comparisons of the grader.

A check has two halves. The probe (:mod:`transformer_lm.probes`) calls the student's object
and records tensors; this module computes what the reference gives on the same inputs and
judges: shapes first, then values under the tolerance policy, then gradients element by
element. When an answer is wrong, it recomputes the inputs through every mistake of
:mod:`transformer_lm.mistakes` that the test can reveal and names the one that matches.

In a notebook both halves run in the student's kernel. The grader runs the probe in a
sandbox and only this half in a trusted process, on inputs the student never saw.

Tolerance policy (float32, the same everywhere): ``|got - expected| <= ATOL + RTOL * |expected|``
element-wise, for outputs and for gradients.
"""

from __future__ import annotations

import ast
import inspect
import math
import re
import textwrap
import threading
from dataclasses import dataclass, field
from typing import Callable

import torch

from transformer_lm import mistakes as catalog
from transformer_lm import probes, reference
from transformer_lm.reference import AttentionWeights

_PARSING = threading.Lock()  # see parse_cell
RTOL = 1e-4
ATOL = 1e-5


class CheckFailed(AssertionError):
    """A visible check failed; the message is written for the student."""


# --------------------------------------------------------------------------------------
# Comparing tensors
# --------------------------------------------------------------------------------------


def _show(t: torch.Tensor, limit: int = 6) -> str:
    values = t.flatten()[:limit].tolist()
    more = ", ..." if t.numel() > limit else ""
    return "[" + ", ".join(f"{v:.6g}" for v in values) + more + "]"


def difference(name: str, got: torch.Tensor, expected: torch.Tensor,
               rtol: float = RTOL, atol: float = ATOL, values: bool = True) -> str | None:
    """None when ``got`` matches ``expected``; otherwise a sentence that says how it differs.
    With ``values=False`` (hidden checks) it names the largest error but lists no values."""
    if tuple(got.shape) != tuple(expected.shape):
        return f"{name} has shape {tuple(got.shape)}, expected {tuple(expected.shape)}."
    if not got.is_floating_point():
        got = got.to(expected.dtype)
    got64, expected64 = got.double(), expected.double()
    nan_got, nan_expected = torch.isnan(got64), torch.isnan(expected64)
    if not torch.equal(nan_got, nan_expected):
        if (nan_got & ~nan_expected).any():
            where = tuple(torch.nonzero(nan_got & ~nan_expected)[0].tolist())
            return (f"{name} contains NaN (first at index {where}). A row whose every score is -inf "
                    f"gives NaN after the softmax; so does a softmax over the wrong dimension of a masked row.")
        return f"{name} has numbers where NaN was expected."
    error = (got64 - expected64).abs().masked_fill(nan_got, 0.0)
    allowed = (atol + rtol * expected64.abs()).masked_fill(nan_expected, math.inf)
    if bool((error <= allowed).all()):
        return None
    worst = int(torch.argmax(error - allowed))
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), got.shape)) if got.dim() else ()
    message = f"{name} has the right shape {tuple(got.shape)} but wrong values: the largest error is " \
              f"{error.flatten()[worst].item():.3g} at index {index}"
    if not values:
        return message + "."
    return (message + f" (expected {expected64.flatten()[worst].item():.6g}, got {got64.flatten()[worst].item():.6g})."
            f"\n  expected {_show(expected)}\n  got      {_show(got)}")


def check_shape(got: torch.Tensor, expected_shape, name: str = "output") -> None:
    """Raises :class:`CheckFailed` unless ``got`` has ``expected_shape``."""
    if not isinstance(got, torch.Tensor):
        raise CheckFailed(f"{name} should be a torch.Tensor, got {type(got).__name__}.")
    if tuple(got.shape) != tuple(expected_shape):
        raise CheckFailed(f"{name} has shape {tuple(got.shape)}, expected {tuple(expected_shape)}.")


def check_close(got: torch.Tensor, expected: torch.Tensor, name: str = "output",
                rtol: float = RTOL, atol: float = ATOL) -> None:
    """Raises :class:`CheckFailed` with expected, got and the largest error unless they match."""
    check_shape(got, expected.shape, name)
    problem = difference(name, got, expected, rtol, atol)
    if problem:
        raise CheckFailed(problem)


@dataclass
class Verdict:
    """The judgement of one check: ``passed`` or ``failed``, a message and, if named, a mistake."""

    status: str
    message: str
    mistake: catalog.Mistake | None = None

    @property
    def hint(self) -> str:
        return self.mistake.hint if self.mistake else ""

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def raise_if_failed(self) -> None:
        if not self.passed:
            hint = f"\nLikely mistake: {self.mistake.title}.\n  {self.mistake.hint}" if self.mistake else ""
            raise CheckFailed(self.message + hint)


def _changes_between_calls(got: dict[str, torch.Tensor], rtol: float, atol: float) -> bool:
    """Whether two calls in eval mode on the same input gave different outputs (dropout left on)."""
    return "output_again" in got and difference("output", got["output_again"], got["output"], rtol, atol) is not None


def identify_mistake(got: dict[str, torch.Tensor], candidates: dict[catalog.Mistake, dict[str, torch.Tensor]],
                     rtol: float = RTOL, atol: float = ATOL) -> catalog.Mistake | None:
    """The first catalogued mistake whose record matches ``got`` on every tensor it holds."""
    if _changes_between_calls(got, rtol, atol):
        return catalog.BY_NAME["dropout_in_eval"]
    for mistake, record in candidates.items():
        if all(key in got and difference(key, got[key], value, rtol, atol) is None for key, value in record.items()):
            return mistake
    return None


def judge(got: dict[str, torch.Tensor], expected: dict[str, torch.Tensor],
          candidates: dict[catalog.Mistake, dict[str, torch.Tensor]] | None = None,
          rtol: float = RTOL, atol: float = ATOL, values: bool = True) -> Verdict:
    """Compares a probe's record with the expected one: output, then weights, then gradients.
    ``values=False`` keeps expected values out of the message (for hidden checks)."""
    order = sorted(expected, key=lambda k: (k != "output", k.startswith("grad."), k))
    # A mistake that gives the right output here cannot be what went wrong.
    candidates = {m: r for m, r in (candidates or {}).items()
                  if "output" not in r or difference("output", r["output"], expected["output"], rtol, atol)}
    for key in order:
        if key not in got:
            return Verdict("failed", f"{key} was not produced.")
        problem = difference(key.replace("grad.", "the gradient of "), got[key], expected[key], rtol, atol, values)
        if problem:
            return Verdict("failed", problem, identify_mistake(got, candidates, rtol, atol))
    if _changes_between_calls(got, rtol, atol):
        return Verdict("failed", "Two calls in eval mode on the same input gave different outputs.",
                       catalog.BY_NAME["dropout_in_eval"])
    gradients = any(k.startswith("grad.") for k in expected)
    return Verdict("passed", "Correct: " + ("outputs and gradients match" if gradients else "the output matches")
                   + " the reference.")


# --------------------------------------------------------------------------------------
# Attention modules: one case, the reference's record, each mistake's record
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttentionCase:
    """The sizes and switches of one attention test. ``batch=None`` feeds a single
    sequence ``(seq, d_in)`` instead of a batch ``(batch, seq, d_in)``."""

    batch: int | None
    seq: int
    d_in: int
    d_out: int
    num_heads: int = 1
    causal: bool = False
    bias: bool = True
    out_proj: bool = False
    mask: str | None = None  # None, "bool" (True = may attend) or "float" (added to the scores)
    dropout: float = 0.0
    context_length: int | None = None  # room for longer sequences than seq, where the class has a mask buffer
    d_value: int | None = None  # width of the values (and outputs) when it differs from d_out (queries, keys)

    @property
    def out_width(self) -> int:
        return self.d_value or self.d_out

    @property
    def features(self) -> frozenset[str]:
        """What this case can reveal, in the terms of :attr:`Mistake.shows_with`."""
        on = {"heads": self.num_heads > 1, "causal": self.causal, "mask": self.mask is not None,
              "projection": self.out_proj, "dropout": self.dropout > 0}
        return frozenset(name for name, present in on.items() if present)


@dataclass(frozen=True)
class AttentionAPI:
    """How one student attention class is built and called, for :func:`attention_records`.

    ``state`` turns reference weights into the student's parameters by name (it is applied to
    gradients too, so it must only select, transpose, slice or stack). ``weights_layout``
    turns reference attention weights ``(..., heads, seq, seq)`` into what the class returns.
    """

    init: Callable[[AttentionCase], dict]
    state: Callable[[AttentionWeights, AttentionCase], dict[str, torch.Tensor]] | None = None
    call_kwargs: Callable[[AttentionCase], dict] = lambda case: {}
    mask_arg: str | None = None
    weights_layout: Callable[[torch.Tensor, AttentionCase], torch.Tensor] | None = None


@dataclass
class CaseTensors:
    """Concrete inputs for one :class:`AttentionCase`, drawn from one generator."""

    weights: AttentionWeights
    x: torch.Tensor
    grad_output: torch.Tensor
    mask: torch.Tensor | None = None
    extra: dict = field(default_factory=dict)


def make_case_tensors(case: AttentionCase, generator: torch.Generator) -> CaseTensors:
    """Random weights, input, mask and upstream gradient for ``case``."""
    def randn(*shape):
        return torch.randn(*shape, generator=generator) / math.sqrt(shape[-1] if len(shape) > 1 else 1)

    d_in, d_out, d_v = case.d_in, case.d_out, case.out_width
    weights = AttentionWeights(
        randn(d_out, d_in), randn(d_out, d_in), randn(d_v, d_in),
        *((randn(d_out), randn(d_out), randn(d_v)) if case.bias else (None, None, None)),
        *((randn(d_v, d_v), randn(d_v)) if case.out_proj else (None, None)),
    )
    lead = () if case.batch is None else (case.batch,)
    x = torch.randn(*lead, case.seq, d_in, generator=generator)
    grad_output = torch.randn(*lead, case.seq, d_v, generator=generator)
    mask = None
    if case.mask is not None:
        keep = torch.rand(case.seq, case.seq, generator=generator) < 0.7
        keep[torch.arange(case.seq), torch.randint(case.seq, (case.seq,), generator=generator)] = True
        mask = keep if case.mask == "bool" else torch.zeros(case.seq, case.seq).masked_fill(~keep, float("-inf"))
    return CaseTensors(weights, x, grad_output, mask)


def _reference_forward(case: AttentionCase, weights: AttentionWeights, x: torch.Tensor, mask):
    att = reference.multi_head_attention(x, weights, case.num_heads, attn_mask=mask, causal=case.causal)
    return att.output, att.weights


def attention_records(api: AttentionAPI, case: AttentionCase, tensors: CaseTensors):
    """The expected record, and each revealable mistake's record, for one case.

    Returns ``(probe_arguments, expected, candidates)``: what to hand the probe (student
    parameter names, inputs, call arguments), the reference's record in the student's
    names and layout, and ``{mistake: record}`` for the mistakes this case can reveal.
    """
    weights = tensors.weights.map(lambda t: t.detach().clone().requires_grad_(True))
    x = tensors.x.clone().requires_grad_(True)
    output, probs = _reference_forward(case, weights, x, tensors.mask)
    output.backward(tensors.grad_output)
    expected = {"output": output.detach()}
    if api.weights_layout is not None:
        expected["weights"] = api.weights_layout(probs.detach(), case)
    expected["grad.x"] = x.grad
    grads = weights.map(lambda t: t.grad)
    expected.update({f"grad.{name}": g for name, g in api.state(grads, case).items()})

    candidates = {}
    for mistake in catalog.CATALOG:
        if mistake.visible_in(case.features) and mistake.name != "dropout_in_eval":
            with torch.no_grad():
                out, _ = catalog.flawed_multi_head_attention(
                    tensors.x, tensors.weights, case.num_heads, mistake.flaws,
                    attn_mask=tensors.mask, causal=case.causal)
            candidates[mistake] = {"output": out}

    inputs = {"x": tensors.x}
    if api.mask_arg is not None and tensors.mask is not None:
        inputs[api.mask_arg] = tensors.mask
    arguments = {"init": api.init(case), "state": api.state(tensors.weights, case), "inputs": inputs,
                 "call_kwargs": api.call_kwargs(case), "grad_output": tensors.grad_output,
                 "repeat": case.dropout > 0}
    return arguments, expected, candidates


def call_student(name: str, function, *args, **kwargs):
    """Calls student code (through a probe) in this kernel, turning whatever goes wrong into
    a :class:`CheckFailed` that says what to do. The original error stays chained, so the
    traceback still shows the line of the answer that raised it."""
    try:
        return function(*args, **kwargs)
    except NotImplementedError:
        raise CheckFailed(f"TODO: {name} is not written yet (it raises NotImplementedError). "
                          "Fill in the cell marked YOUR CODE HERE above, run it, then run this check again.") from None
    except probes.ProbeError as error:
        raise CheckFailed(f"{name}: {error}") from None
    except Exception as error:  # noqa: BLE001 - any error of the answer is reported to the student
        raise CheckFailed(f"{name} raised {type(error).__name__}: {error}") from error


def parse_cell(source: str) -> ast.Module | None:
    """A notebook cell's code as a syntax tree, with IPython magics and shell escapes left out;
    None when it is not valid Python. One thread at a time: CPython 3.11 can fail with
    "AST constructor recursion depth mismatch" when threads build syntax trees at once, and the
    grader grades submissions in threads."""
    python = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
    with _PARSING:
        try:
            return ast.parse(python)
        except SyntaxError:
            return None


def mentioned_names(source: str) -> set[str]:
    """Every identifier, attribute name and word in a string constant that ``source`` mentions
    (IPython magics and shell escapes are ignored). Used to spot forbidden library calls."""
    tree = parse_cell(source)
    if tree is None:
        return set(re.findall(r"\w+", source))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.alias):
            names.update(node.name.split("."))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            names.update(re.findall(r"\w+", node.value))  # getattr(torch, "softmax") counts; docstrings do not
    return names


def check_not_used(obj, forbidden: tuple[str, ...]) -> None:
    """Raises :class:`CheckFailed` when the source of ``obj`` mentions a forbidden name
    (the library version of what the exercise asks you to write)."""
    try:
        source = textwrap.dedent(inspect.getsource(obj))  # a method's source is indented
    except (OSError, TypeError):
        return
    used = sorted(set(forbidden) & mentioned_names(source))
    if used:
        raise CheckFailed(f"{obj.__name__} uses {', '.join(used)}: this exercise asks you to write it yourself, "
                          f"and the grader gives no points for an answer that calls it.")


def judge_parameters(name: str, got: dict[str, list[int]], expected: dict[str, tuple[int, ...]]) -> Verdict:
    """Compares a module's parameters (name -> shape) with the expected ones."""
    missing = [n for n in expected if n not in got]
    if missing:
        have = ", ".join(f"{n} {tuple(s)}" for n, s in got.items()) or "no parameters"
        return Verdict("failed", f"{name} has no parameter {', '.join(missing)}. It has: {have}.")
    wrong = [f"{n} is {tuple(got[n])}, expected {tuple(shape)}" for n, shape in expected.items()
             if tuple(got[n]) != tuple(shape)]
    if wrong:
        return Verdict("failed", f"{name}: " + "; ".join(wrong) + ". nn.Linear(in, out) stores its weight as (out, in).")
    return Verdict("passed", f"{name} has the expected layers: " + ", ".join(expected) + ".")


def check_parameters(cls, init: dict, expected: dict[str, tuple[int, ...]]) -> Verdict:
    """Visible check of an ``__init__``: the parameters' names and shapes."""
    got = call_student(cls.__name__, probes.parameter_shapes, cls, init)
    return _report(cls.__name__, judge_parameters(cls.__name__, got, expected))


def _report(name: str, verdict: Verdict) -> Verdict:
    verdict.raise_if_failed()
    print(f"{name}: {verdict.message}")
    return verdict


def check_attention_module(cls, api: AttentionAPI, case: AttentionCase, seed: int = 0) -> Verdict:
    """Visible check of an attention class: probe it here and judge it against the reference."""
    tensors = make_case_tensors(case, torch.Generator().manual_seed(seed))
    arguments, expected, candidates = attention_records(api, case, tensors)
    got = call_student(cls.__name__, probes.probe_module, cls, **arguments)
    return _report(cls.__name__, judge(got, expected, candidates))


def function_records(expected_fn, inputs: dict[str, torch.Tensor], grad_output: torch.Tensor | None = None):
    """The expected record of a function of tensors: ``expected_fn(*inputs)``, and the
    gradients of its floating-point inputs when ``grad_output`` is given."""
    leaves = {k: v.detach().clone().requires_grad_(grad_output is not None and v.is_floating_point())
              for k, v in inputs.items()}
    output = expected_fn(*leaves.values())
    expected = {"output": output.detach()}
    if grad_output is not None:
        output.backward(grad_output)
        expected.update({f"grad.{k}": v.grad for k, v in leaves.items() if v.is_floating_point()})
    return expected


def attention_function_candidates(inputs: dict[str, torch.Tensor]) -> dict[catalog.Mistake, dict[str, torch.Tensor]]:
    """Each revealable mistake's output for an attention *function* called on ``inputs``
    (``q, k, v`` and an optional mask, in that order)."""
    q, k, v, *rest = inputs.values()
    mask = rest[0] if rest else None
    features = {"mask"} if mask is not None and mask.dtype == torch.bool else set()
    candidates = {}
    for mistake in catalog.CATALOG:
        if mistake.visible_in(features):
            with torch.no_grad():
                candidates[mistake] = {"output": catalog.flawed_attention(q, k, v, mask, mistake.flaws)[0]}
    return candidates


def check_function(fn, expected_fn, inputs: dict[str, torch.Tensor], *, grad_output: torch.Tensor | None = None,
                   candidates: dict | None = None, forbids: tuple[str, ...] = ()) -> Verdict:
    """Visible check of a function of tensors against ``expected_fn`` (from the reference);
    ``forbids`` names library functions the answer may not call."""
    check_not_used(fn, forbids)
    expected = function_records(expected_fn, inputs, grad_output)
    got = call_student(fn.__name__, probes.probe_function, fn, inputs, grad_output=grad_output)
    return _report(fn.__name__, judge(got, expected, candidates))


def transfer_records(source_api: AttentionAPI, target_api: AttentionAPI, case: AttentionCase, tensors: CaseTensors):
    """Arguments for :func:`probes.probe_transfer` and the expected record: after the transfer,
    the target computes what the reference computes with the source's weights."""
    with torch.no_grad():
        output, _ = _reference_forward(case, tensors.weights, tensors.x, None)
    arguments = {"source_init": source_api.init(case), "source_state": source_api.state(tensors.weights, case),
                 "target_init": target_api.init(case), "x": tensors.x}
    return arguments, {"output": output}


def check_transfer(fn, source_cls, source_api: AttentionAPI, target_cls, target_api: AttentionAPI,
                   case: AttentionCase, seed: int = 0) -> Verdict:
    """Visible check of a weight transfer ``fn(source, target)`` between two attention classes."""
    tensors = make_case_tensors(case, torch.Generator().manual_seed(seed))
    arguments, expected = transfer_records(source_api, target_api, case, tensors)
    got = call_student(fn.__name__, probes.probe_transfer, fn, source_cls, target_cls=target_cls, **arguments)
    return _report(fn.__name__, judge(got, expected))


# --------------------------------------------------------------------------------------
# Classes that load PyTorch's own layers, whole modules, generation
# --------------------------------------------------------------------------------------


def multihead_load_records(api: AttentionAPI, case: AttentionCase, tensors: CaseTensors):
    """For a class whose ``load_from_torch`` copies an ``nn.MultiheadAttention``: the probe's
    arguments and the expected record (the reference with the same weights)."""
    from transformer_lm import adapters

    x = tensors.x.clone().requires_grad_(True)
    output, _ = _reference_forward(case, tensors.weights, x, tensors.mask)
    output.backward(tensors.grad_output)
    inputs = {"x": tensors.x}
    if api.mask_arg is not None and tensors.mask is not None:
        inputs[api.mask_arg] = tensors.mask
    arguments = {"init": api.init(case), "torch_module": "MultiheadAttention",
                 "torch_init": {"embed_dim": case.d_out, "num_heads": case.num_heads, "batch_first": True},
                 "torch_state": adapters.multihead_attention_state(tensors.weights), "inputs": inputs,
                 "call_kwargs": api.call_kwargs(case), "grad_output": tensors.grad_output}
    return arguments, {"output": output.detach(), "grad.x": x.grad}


def randomize(module: torch.nn.Module, generator: torch.Generator, scale: float = 0.3) -> torch.nn.Module:
    """Draws every parameter of ``module`` from ``generator``, so tests see weights that no
    initialisation scheme would give (LayerNorm's weights included)."""
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * scale)
    return module


@dataclass(frozen=True)
class BlockCase:
    """The sizes of one transformer block test (``nn.TransformerEncoderLayer``'s names)."""

    batch: int
    seq: int
    model_dim: int
    num_heads: int
    ff_dim: int
    norm_first: bool = False
    activation: str = "relu"

    def config(self) -> reference.GPTConfig:
        return reference.GPTConfig(n_embd=self.model_dim, n_head=self.num_heads, block_size=self.seq,
                                   ff_dim=self.ff_dim, activation=self.activation, norm_first=self.norm_first)


def decoder_load_records(init: dict, case: BlockCase, generator: torch.Generator):
    """For a decoder layer whose ``load_from_torch`` copies an ``nn.TransformerEncoderLayer``
    (run with a causal mask): the probe's arguments and the expected record."""
    from transformer_lm import adapters

    block = randomize(reference.Block(case.config()), generator).eval()
    x = torch.randn(case.batch, case.seq, case.model_dim, generator=generator)
    grad_output = torch.randn(x.shape, generator=generator)
    leaf = x.clone().requires_grad_(True)
    output, _ = block(leaf)
    output.backward(grad_output)
    torch_init = {"d_model": case.model_dim, "nhead": case.num_heads, "dim_feedforward": case.ff_dim,
                  "dropout": 0.0, "batch_first": True, "norm_first": case.norm_first, "activation": case.activation}
    state = {k: v.detach().clone() for k, v in adapters.encoder_layer_state(block).items()}
    arguments = {"init": init, "torch_module": "TransformerEncoderLayer", "torch_init": torch_init,
                 "torch_state": state, "inputs": {"x": x}, "grad_output": grad_output}
    return arguments, {"output": output.detach(), "grad.x": leaf.grad}


def module_case(module: torch.nn.Module, inputs: dict[str, torch.Tensor], generator: torch.Generator):
    """Probe arguments (the reference module's parameters by name, the inputs, a random
    upstream gradient) and the expected record (first output, input and parameter
    gradients) for a student's class with the same parameter names as ``module``."""
    module.eval()
    module.zero_grad(set_to_none=True)
    leaves = {k: v.clone().requires_grad_(v.is_floating_point()) for k, v in inputs.items()}
    result = module(*leaves.values())
    output = result[0] if isinstance(result, tuple) else result
    grad_output = torch.randn(output.shape, generator=generator)
    output.backward(grad_output)
    expected = {"output": output.detach()}
    expected.update({f"grad.{k}": v.grad for k, v in leaves.items() if v.is_floating_point()})
    expected.update({f"grad.{n}": p.grad for n, p in module.named_parameters()})
    state = {n: p.detach().clone() for n, p in module.named_parameters()}
    return {"state": state, "inputs": inputs, "grad_output": grad_output}, expected


def generate_records(config: reference.GPTConfig, generator: torch.Generator, batch: int, prompt: int,
                     max_new_tokens: int):
    """A reference GPT's weights, a prompt, its greedy continuation (``top_k=1``) and, as
    ``tokens_per_call``, the tokens each call of the model runs on when it uses a KV cache."""
    model = randomize(reference.GPT(config), generator, scale=0.5).eval()
    for module in model.modules():  # random LayerNorm biases would push every position to one token
        if isinstance(module, torch.nn.LayerNorm):
            module.reset_parameters()
    idx = torch.randint(config.vocab_size, (batch, prompt), generator=generator)
    expected = {"output": model.generate(idx, max_new_tokens, top_k=1)}
    with probes.tokens_per_call(model) as seen:
        model.generate(idx, max_new_tokens, top_k=1, use_cache=True)
    expected["tokens_per_call"] = torch.tensor(seen, dtype=torch.long)
    state = {n: p.detach().clone() for n, p in model.named_parameters()}
    return state, idx, expected


def check_attention_function(fn, inputs: dict[str, torch.Tensor], grad_output: torch.Tensor | None = None,
                             forbids: tuple[str, ...] = ()) -> Verdict:
    """Visible check of an attention function ``fn(q, k, v[, mask])`` against the reference,
    naming the catalogued mistakes it matches."""
    def expected(q, k, v, mask=None):
        return reference.scaled_dot_product_attention(q, k, v, mask).output
    return check_function(fn, expected, inputs, grad_output=grad_output,
                          candidates=attention_function_candidates(inputs), forbids=forbids)


def check_multihead_load(cls, api: AttentionAPI, case: AttentionCase, seed: int = 0) -> Verdict:
    """Visible check of ``cls(...).load_from_torch(nn.MultiheadAttention)`` and its forward."""
    tensors = make_case_tensors(case, torch.Generator().manual_seed(seed))
    arguments, expected = multihead_load_records(api, case, tensors)
    got = call_student(cls.__name__, probes.probe_load_from_torch, cls, **arguments)
    return _report(cls.__name__, judge(got, expected))


def check_decoder_load(cls, init: dict, case: BlockCase, seed: int = 0) -> Verdict:
    """Visible check of ``cls(**init).load_from_torch(nn.TransformerEncoderLayer)`` and its forward."""
    arguments, expected = decoder_load_records(init, case, torch.Generator().manual_seed(seed))
    got = call_student(cls.__name__, probes.probe_load_from_torch, cls, **arguments)
    return _report(cls.__name__, judge(got, expected))


def check_module(cls, init: dict, reference_module: torch.nn.Module, inputs: dict[str, torch.Tensor],
                 seed: int = 0) -> Verdict:
    """Visible check of a class with the same parameter names as ``reference_module``: the
    reference's (randomized) weights are loaded into it; outputs and gradients must match."""
    generator = torch.Generator().manual_seed(seed)
    arguments, expected = module_case(randomize(reference_module, generator), inputs, generator)
    got = call_student(cls.__name__, probes.probe_module, cls, init, **arguments)
    return _report(cls.__name__, judge(got, expected))


def check_generate(cls, config: reference.GPTConfig, *, batch: int = 2, prompt: int = 3, max_new_tokens: int = 6,
                   seed: int = 0, **call_kwargs) -> Verdict:
    """Visible check of ``generate``: greedy tokens (``top_k=1``) equal the reference's (the
    notebook counts the tokens per step of a cache itself, where it teaches that)."""
    from dataclasses import asdict

    state, idx, expected = generate_records(config, torch.Generator().manual_seed(seed), batch, prompt,
                                            max_new_tokens)
    got = call_student(f"{cls.__name__}.generate", probes.probe_generate, cls, {"config": asdict(config)}, state, idx,
                       max_new_tokens, {"top_k": 1, **call_kwargs})
    return _report(f"{cls.__name__}.generate", judge({"output": got["output"]}, {"output": expected["output"]}))


# --------------------------------------------------------------------------------------
# Seed 000's gradient fingerprint of minGPT attention
# --------------------------------------------------------------------------------------

SEED_000_FINGERPRINT = [161, 13, 294, 0, 37187, 432]
SEED_000_CONFIG = reference.GPTConfig(vocab_size=11, block_size=5, n_head=4, n_embd=12)


def seed_000_input() -> torch.Tensor:
    """Seed 000's input: 5 tokens of 12 features, the first 1,1,1,2,2,2,3,3,3,4,4,4, the rest ones."""
    x = torch.ones(1, 5, 12)
    x[0, 0] = torch.tensor([1.0, 2.0, 3.0, 4.0]).repeat_interleave(3)
    return x


def mingpt_fingerprint(module: torch.nn.Module, x: torch.Tensor | None = None) -> list[int]:
    """Seed 000's check: every parameter at 0.1, ``y.sum()`` backpropagated, then
    ``int(sum(grad**2))`` for query, key and value weights and biases."""
    for parameter in module.parameters():
        torch.nn.init.constant_(parameter, 0.1)
    module.zero_grad(set_to_none=True)
    output = module(seed_000_input() if x is None else x)
    output = output[0] if isinstance(output, tuple) else output
    output.sum().backward()
    return reference.gradient_fingerprint(AttentionWeights(
        module.query.weight.grad, module.key.weight.grad, module.value.weight.grad,
        module.query.bias.grad, module.key.bias.grad, module.value.bias.grad))


def flawed_fingerprint(flaws: catalog.Flaws) -> list[int]:
    """The fingerprint that minGPT attention with ``flaws`` gives on seed 000's input."""
    width = SEED_000_CONFIG.n_embd
    weights = AttentionWeights(*(torch.full((width, width), 0.1) for _ in range(3)),
                               *(torch.full((width,), 0.1) for _ in range(3)),
                               torch.full((width, width), 0.1), torch.full((width,), 0.1))
    weights = weights.map(lambda t: t.requires_grad_(True))
    output, _ = catalog.flawed_multi_head_attention(seed_000_input(), weights, SEED_000_CONFIG.n_head, flaws,
                                                    causal=True)
    output.sum().backward()
    return reference.gradient_fingerprint(weights.map(lambda t: t.grad))


def diagnose_fingerprint(fingerprint: list[int]) -> Verdict:
    """Judges a seed 000 fingerprint and names the catalogued mistake it comes from."""
    if list(fingerprint) == SEED_000_FINGERPRINT:
        return Verdict("passed", f"Gradient fingerprint {SEED_000_FINGERPRINT}: correct.")
    message = f"Gradient fingerprint {list(fingerprint)}, expected {SEED_000_FINGERPRINT}."
    features = {"heads", "causal", "projection"}
    for mistake in catalog.CATALOG:
        if mistake.visible_in(features) and mistake.name != "dropout_in_eval":
            if flawed_fingerprint(mistake.flaws) == list(fingerprint):
                return Verdict("failed", message, mistake)
    if fingerprint and fingerprint[-1] == SEED_000_FINGERPRINT[-1]:
        return Verdict("failed", message + " The value gradients are right, so the weights reach the values "
                       "correctly; look at the mask fill value (-inf) and the softmax.",
                       catalog.BY_NAME["mask_filled_with_zero"])
    return Verdict("failed", message)
