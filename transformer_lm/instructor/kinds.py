"""Kinds of check: each one says what to call, what the reference gives, and how to judge.

A kind (:class:`AttentionCheck`, :class:`CallCheck`, ... below) names the student object it
probes and the sizes to test. Its :meth:`prepare` turns a random generator into a
:class:`~transformer_lm.prepared.Prepared` check: the :class:`~transformer_lm.prepared.ProbeCall` to make (a function of
:mod:`transformer_lm.sandboxed.probes`, the student objects by name, arguments and tensors) and the
judge of what comes back. The same prepared check serves twice:

* visible checks (:mod:`transformer_lm.checks`) prepare it from a fixed seed and run the probe in
  the student's kernel (:func:`judge_here`), showing expected values when it fails;
* the grader prepares it from the course's secret, runs the probe in the sandbox and judges the
  record in its trusted process, without expected values in the message.

So a kind judges alike wherever it runs. Hidden checks list kinds in ``autograder/checks``.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field
from typing import Callable, Protocol

import torch

from transformer_lm import catalog
from transformer_lm.instructor import adapters, mistakes, reference
from transformer_lm.instructor.cases import AttentionAPI, AttentionCase, BlockCase, CaseTensors, make_case_tensors
from transformer_lm.judging import ParametersJudge, RaisesJudge, RecordJudge, Verdict, overflowing
from transformer_lm.instructor.mistake_family import MistakeFamily
from transformer_lm.prepared import Prepared, ProbeCall
from transformer_lm.random_weights import randomize
from transformer_lm.instructor.reference import AttentionWeights
from transformer_lm.sandboxed import probes


def backward_of(output: torch.Tensor, grad_output: torch.Tensor) -> None:
    """Back-propagates ``grad_output`` through ``output``, as ``output.backward(grad_output)`` does,
    with the same gradients bit for bit (the sum's gradient is ones, times ``grad_output`` exactly).
    Given a tensor, ``backward`` first imports ``torch.fx.experimental.symbolic_shapes`` and so
    sympy, 0.5 s of the grader's load of a class; a scalar needs neither."""
    (output * grad_output).sum().backward()


class CheckKind(Protocol):
    """What every kind of check has: the student object it probes, and :meth:`prepare`."""

    object: str

    def prepare(self, generator: torch.Generator) -> Prepared: ...


def judge_here(check: CheckKind, namespace: dict, generator: torch.Generator, values: bool = False) -> Verdict:
    """Prepares ``check``, runs its probe in this process on the objects of ``namespace`` and
    judges the result: the grader's comparison without the sandbox (benchmarks and tests)."""
    prepared = check.prepare(generator)
    return prepared.judge_result(prepared.call.run_here(namespace), values)


# --------------------------------------------------------------------------------------
# What the reference gives: expected records, and the records of catalogued mistakes
# --------------------------------------------------------------------------------------


def _reference_forward(case: AttentionCase, weights: AttentionWeights, x: torch.Tensor, mask):
    att = reference.multi_head_attention(x, weights, case.num_heads, attn_mask=mask, causal=case.causal)
    return att.output, att.weights


def _mistake_candidates(case: AttentionCase, tensors: CaseTensors,
                        api: AttentionAPI | None = None) -> dict[catalog.Mistake, dict[str, torch.Tensor]]:
    """The output each mistake this case can reveal gives on its tensors, and its attention
    weights where ``api`` returns them (dropout left on shows by two calls giving two outputs,
    not here)."""
    candidates = {}
    for mistake in catalog.revealed_by(case.features):
        with torch.no_grad():
            out, probs = mistakes.flawed_multi_head_attention(tensors.x, tensors.weights, case.num_heads, mistake.flaws,
                                                             attn_mask=tensors.mask, causal=case.causal)
        candidates[mistake] = {"output": out}
        if api is not None and api.weights_layout is not None:
            candidates[mistake]["weights"] = api.weights_layout(probs, case)
        if mistake.flaws.squeezed:  # what the class returns, in the class's layout, squeezed
            candidates[mistake] = {key: value.squeeze() for key, value in candidates[mistake].items()}
    return candidates


def attention_records(api: AttentionAPI, case: AttentionCase, tensors: CaseTensors):
    """The expected record, and each revealable mistake's record, for one case.

    Returns ``(probe_arguments, expected, candidates)``: what to hand the probe (student
    parameter names, inputs, call arguments), the reference's record in the student's
    names and layout, and ``{mistake: record}`` for the mistakes this case can reveal.
    """
    weights = tensors.weights.map(lambda t: t.detach().clone().requires_grad_(True))
    x = tensors.x.clone().requires_grad_(True)
    output, probs = _reference_forward(case, weights, x, tensors.mask)
    backward_of(output, tensors.grad_output)
    expected = {"output": output.detach()}
    if api.weights_layout is not None:
        expected["weights"] = api.weights_layout(probs.detach(), case)
    expected["grad.x"] = x.grad
    grads = weights.map(lambda t: t.grad)
    expected.update({f"grad.{name}": g for name, g in api.state(grads, case).items()})

    candidates = _mistake_candidates(case, tensors, api)
    inputs = {"x": tensors.x}
    if api.mask_arg is not None and tensors.mask is not None:
        inputs[api.mask_arg] = tensors.mask
    arguments = {"init": api.init(case), "state": api.state(tensors.weights, case), "inputs": inputs,
                 "call_kwargs": api.call_kwargs(case), "grad_output": tensors.grad_output,
                 "repeat": True}  # a second call in eval mode shows dropout left on, whatever the case's rate
    return arguments, expected, candidates


def function_records(expected_fn, inputs: dict[str, torch.Tensor], grad_output: torch.Tensor | None = None):
    """The expected record of a function of tensors: ``expected_fn(*inputs)``, and the
    gradients of its floating-point inputs when ``grad_output`` is given."""
    leaves = {k: v.detach().clone().requires_grad_(grad_output is not None and v.is_floating_point())
              for k, v in inputs.items()}
    output = expected_fn(*leaves.values())
    expected = {"output": output.detach()}
    if grad_output is not None:
        backward_of(output, grad_output)
        expected.update({f"grad.{k}": v.grad for k, v in leaves.items() if v.is_floating_point()})
    return expected


def transfer_records(source_api: AttentionAPI, target_api: AttentionAPI, case: AttentionCase, tensors: CaseTensors):
    """Arguments for :func:`probes.probe_transfer`, the expected record (after the transfer, the
    target computes what the reference computes with the source's weights) and the record of a
    transfer without the transpose, which only fits where ``d_in == d_out`` (elsewhere the copy
    raises an error)."""
    with torch.no_grad():
        output, _ = _reference_forward(case, tensors.weights, tensors.x, None)
        candidates = {} if case.d_in != case.d_out else {catalog.BY_NAME["transfer_without_transpose"]: {
            "output": _reference_forward(case, tensors.weights.map(lambda t: t.T), tensors.x, None)[0]}}
    arguments = {"source_init": source_api.init(case), "source_state": source_api.state(tensors.weights, case),
                 "target_init": target_api.init(case), "x": tensors.x}
    return arguments, {"output": output}, candidates


def multihead_load_records(api: AttentionAPI, case: AttentionCase, tensors: CaseTensors):
    """For a class whose ``load_from_torch`` copies an ``nn.MultiheadAttention``: the probe's
    arguments, the expected record (the reference with the same weights) and each revealable
    mistake's record."""
    x = tensors.x.clone().requires_grad_(True)
    output, _ = _reference_forward(case, tensors.weights, x, tensors.mask)
    backward_of(output, tensors.grad_output)
    inputs = {"x": tensors.x}
    if api.mask_arg is not None and tensors.mask is not None:
        inputs[api.mask_arg] = tensors.mask
    arguments = {"init": api.init(case), "torch_module": "MultiheadAttention",
                 "torch_init": {"embed_dim": case.d_out, "num_heads": case.num_heads, "batch_first": True},
                 "torch_state": adapters.multihead_attention_state(tensors.weights), "inputs": inputs,
                 "call_kwargs": api.call_kwargs(case), "grad_output": tensors.grad_output, "repeat": True}
    return arguments, {"output": output.detach(), "grad.x": x.grad}, _mistake_candidates(case, tensors)


def decoder_load_records(init: dict, case: BlockCase, generator: torch.Generator):
    """For a decoder layer whose ``load_from_torch`` copies an ``nn.TransformerEncoderLayer``
    (run with a causal mask): the probe's arguments, the expected record and the record of each
    attention mistake the block can reveal (:func:`transformer_lm.instructor.mistakes.flawed_block`)."""
    block = randomize(reference.Block(case.config()), generator).eval()
    x = torch.randn(case.batch, case.seq, case.model_dim, generator=generator)
    grad_output = torch.randn(x.shape, generator=generator)
    leaf = x.clone().requires_grad_(True)
    output, _ = block(leaf)
    backward_of(output, grad_output)
    torch_init = {"d_model": case.model_dim, "nhead": case.num_heads, "dim_feedforward": case.ff_dim,
                  "dropout": 0.0, "batch_first": True, "norm_first": case.norm_first, "activation": case.activation}
    state = {k: v.detach().clone() for k, v in adapters.encoder_layer_state(block).items()}
    arguments = {"init": init, "torch_module": "TransformerEncoderLayer", "torch_init": torch_init,
                 "torch_state": state, "inputs": {"x": x}, "grad_output": grad_output, "repeat": True}
    features = {"causal", "projection"} | ({"heads"} if case.num_heads > 1 else set()) | \
        ({"size_one"} if 1 in (case.batch, case.seq) else set())
    with torch.no_grad():
        candidates = {mistake: {"output": mistakes.flawed_block(block, x, mistake.flaws)}
                      for mistake in catalog.revealed_by(features)}
    return arguments, {"output": output.detach(), "grad.x": leaf.grad}, candidates


def parameters_of(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A module's parameters by name, detached copies: the state a probe loads into a student's class."""
    return {name: p.detach().clone() for name, p in module.named_parameters()}


def module_case(module: torch.nn.Module, inputs: dict[str, torch.Tensor], generator: torch.Generator,
                layer: bool = False):
    """Probe arguments (the reference module's parameters by name, the inputs, a random
    upstream gradient) and the expected record (first output, input and parameter gradients and,
    for a decoder ``layer``, the ``(k, v)`` cache it returns, where the notebook pins its form) for a
    student's class with the same parameter names as ``module``. The inputs go to ``module`` in
    order, or, to a decoder ``layer``, as :func:`probes.layer_arguments` says."""
    module.eval()
    module.zero_grad(set_to_none=True)
    leaves = {k: v.clone().requires_grad_(v.is_floating_point()) for k, v in inputs.items()}
    result = module(*(probes.layer_arguments(leaves) if layer else leaves.values()))
    output = result[0] if isinstance(result, tuple) else result
    grad_output = torch.randn(output.shape, generator=generator)
    backward_of(output, grad_output)
    expected = {"output": output.detach(), **(probes.cache_of(result) if layer else {})}
    expected.update({f"grad.{k}": v.grad for k, v in leaves.items() if v.is_floating_point()})
    expected.update({f"grad.{n}": p.grad for n, p in module.named_parameters()})
    state = parameters_of(module)
    arguments = {"state": state, "inputs": inputs, "grad_output": grad_output}
    return ({**arguments, "layer": True} if layer else arguments), expected


# --------------------------------------------------------------------------------------
# The kinds
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttentionCheck:
    """Builds the student's attention class for ``case``, loads reference weights into it,
    and compares outputs (and attention weights where returned) and gradients of the
    input and of every parameter with the reference, naming catalogued mistakes.

    ``judges`` limits the comparison to some of the record (``("weights",)``: the step that
    makes the attention weights), for items that grade one step of a class that later items
    grade too; empty, it judges everything."""

    object: str
    api: AttentionAPI
    case: AttentionCase
    judges: tuple[str, ...] = ()
    records = staticmethod(attention_records)  # (api, case, tensors) -> arguments, expected, candidates
    probe = staticmethod(probes.probe_module)

    def prepare(self, generator: torch.Generator) -> Prepared:
        tensors = make_case_tensors(self.case, generator)
        arguments, expected, candidates = self.records(self.api, self.case, tensors)
        if self.judges:
            expected = {key: value for key, value in expected.items() if key in self.judges}
            candidates = {mistake: kept for mistake, record in candidates.items()
                          if (kept := {key: value for key, value in record.items() if key in self.judges})}
        return Prepared(ProbeCall.of(self.probe, {"cls": self.object}, arguments),
                        RecordJudge(expected, candidates, self.api.names))


@dataclass(frozen=True)
class CallCheck:
    """Calls the student's function ``object`` on inputs drawn by ``inputs(generator)`` and
    compares the result (and, with ``grad``, the gradients of the floating-point inputs) with
    ``reference(*inputs)``. A new concept configures it: its reference function, and its
    :class:`~transformer_lm.instructor.mistake_family.MistakeFamily` as ``mistakes``, whose twins take the
    same inputs, so that a failing answer's mistake is named."""

    object: str
    reference: Callable[..., torch.Tensor]
    inputs: Callable[[torch.Generator], dict[str, torch.Tensor]]
    _: KW_ONLY
    grad: bool = True
    mistakes: MistakeFamily | None = None

    def prepare(self, generator: torch.Generator) -> Prepared:
        inputs = self.inputs(generator)
        output = self.reference(*inputs.values())
        grad_output = torch.randn(output.shape, generator=generator) if self.grad else None
        candidates = self.mistakes.records(*inputs.values()) if self.mistakes else None
        raised = self.mistakes.raised(*inputs.values()) if self.mistakes else {}
        return function_check(self.object, self.reference, inputs, grad_output, candidates, raised=raised)


def function_check(name: str, expected_fn, inputs: dict[str, torch.Tensor], grad_output: torch.Tensor | None = None,
                   candidates: dict | None = None, call_kwargs: dict | None = None,
                   raised: dict[str, catalog.Mistake] | None = None, judge=RecordJudge) -> Prepared:
    """The check of function ``name`` on given ``inputs`` (and ``grad_output``, for gradients)
    against ``expected_fn``: what :class:`CallCheck` prepares once it has drawn them. The
    student's function also gets ``call_kwargs``, which ``expected_fn`` must already hold. Inputs
    whose exp overflows (a softmax's scores in the hundreds) go to the judge too, so that an
    answer that overflows on them is told so, with the row that did. ``raised``: the mistakes
    whose twins raise an error on these inputs, by its type (:meth:`MistakeFamily.raised`); ``judge``
    makes the judge (a :class:`RecordJudge`, or one whose honest answers may be further off)."""
    expected = function_records(expected_fn, inputs, grad_output)
    call = ProbeCall.of(probes.probe_function, {"fn": name},
                        {"inputs": inputs, "grad_output": grad_output, "call_kwargs": call_kwargs})
    return Prepared(call, judge(expected, candidates, inputs=overflowing(inputs)), raised=raised or {})


@dataclass(frozen=True)
class TransferCheck:
    """Calls the student's ``fn(source, target)`` between two of their attention classes and
    checks that the target then computes what the source's weights compute."""

    object: str
    source: str
    source_api: AttentionAPI
    target: str
    target_api: AttentionAPI
    case: AttentionCase

    def prepare(self, generator: torch.Generator) -> Prepared:
        tensors = make_case_tensors(self.case, generator)
        arguments, expected, candidates = transfer_records(self.source_api, self.target_api, self.case, tensors)
        objects = {"fn": self.object, "source_cls": self.source, "target_cls": self.target}
        return Prepared(ProbeCall.of(probes.probe_transfer, objects, arguments), RecordJudge(expected, candidates))


@dataclass(frozen=True)
class RaisesCheck:
    """Checks that building the student's class with ``init`` raises ``exception``; a failure
    names the catalogued mistake called ``mistake``, where one is given."""

    object: str
    init: dict
    exception: str = "ValueError"
    mistake: str = ""

    def prepare(self, generator: torch.Generator) -> Prepared:
        return Prepared(ProbeCall(probes.raised_exception, {"cls": self.object}, {"init": self.init}),
                        RaisesJudge(self.object, self.init, self.exception,
                                    catalog.BY_NAME[self.mistake] if self.mistake else None))


@dataclass(frozen=True)
class FactoryCheck:
    """Calls the student's factory ``fn(**kwargs)`` and judges the module it returns, run on
    a random input ``(batch, seq, d_in)``, with ``judge(record)`` on the output and its
    parameters' shapes."""

    object: str
    kwargs: dict
    _: KW_ONLY
    input_shape: tuple[int, ...]
    judge_record: Callable[[dict[str, torch.Tensor]], Verdict]

    def prepare(self, generator: torch.Generator) -> Prepared:
        x = torch.randn(*self.input_shape, generator=generator)
        return Prepared(ProbeCall.of(probes.probe_factory, {"fn": self.object}, {"kwargs": self.kwargs, "x": x}),
                        lambda record, value, values: self.judge_record(record))


@dataclass(frozen=True)
class ParametersCheck:
    """Builds the student's class with ``init`` and compares the names and shapes of its
    parameters with ``expected`` (for items that grade an ``__init__``); ``mistakes`` maps the name
    of a catalogued mistake of the constructor to the shapes it makes, so that a failure is named."""

    object: str
    init: dict
    expected: dict[str, tuple[int, ...]]
    mistakes: dict[str, dict[str, tuple[int, ...]]] = field(default_factory=dict)

    def prepare(self, generator: torch.Generator) -> Prepared:
        candidates = {catalog.BY_NAME[name]: shapes for name, shapes in self.mistakes.items()}
        return Prepared(ProbeCall(probes.parameter_shapes, {"cls": self.object}, {"init": self.init}),
                        ParametersJudge(self.object, self.expected, candidates))


@dataclass(frozen=True)
class MultiheadLoadCheck(AttentionCheck):
    """The student's class copies an ``nn.MultiheadAttention`` with ``load_from_torch`` and
    must then compute what the reference computes with those weights (mask included)."""

    records = staticmethod(multihead_load_records)
    probe = staticmethod(probes.probe_load_from_torch)


@dataclass(frozen=True)
class DecoderLoadCheck:
    """The student's decoder layer copies an ``nn.TransformerEncoderLayer`` (causal) with
    ``load_from_torch`` and must then compute what the reference block computes."""

    object: str
    init: dict
    case: BlockCase

    def prepare(self, generator: torch.Generator) -> Prepared:
        arguments, expected, candidates = decoder_load_records(self.init, self.case, generator)
        return Prepared(ProbeCall.of(probes.probe_load_from_torch, {"cls": self.object}, arguments),
                        RecordJudge(expected, candidates))


@dataclass(frozen=True)
class ModuleCheck:
    """Loads a randomized reference module's weights into the student's class (same parameter
    names), built with ``init``, and compares the output and every gradient on inputs drawn by
    ``inputs(generator)``. A new concept configures it with a factory of its reference module and,
    as ``mistakes``, a :class:`~transformer_lm.instructor.mistake_family.MistakeFamily` whose twins take the
    reference module and the inputs. With ``repeat``, for a module with dropout, the probe calls it
    twice in eval mode: two outputs name dropout left on."""

    object: str
    init: dict
    reference: Callable[[], torch.nn.Module]
    inputs: Callable[[torch.Generator], dict[str, torch.Tensor]]
    _: KW_ONLY
    mistakes: MistakeFamily | None = None
    repeat: bool = False

    def prepare(self, generator: torch.Generator) -> Prepared:
        module = randomize(self.reference(), generator)
        inputs = self.inputs(generator)
        arguments, expected = module_case(module, inputs, generator)
        candidates = self.mistakes.records(module, *inputs.values()) if self.mistakes else None
        repeat = {"repeat": True} if self.repeat else {}
        return Prepared(ProbeCall.of(probes.probe_module, {"cls": self.object},
                                     {"init": self.init, **arguments, **repeat}),
                        RecordJudge(expected, candidates))
