"""The format of hidden checks.

An assignment's hidden checks live in ``autograder/checks/<assignment>.py``, a module that
defines ``ITEMS``: one :class:`Item` per graded answer. An item names

* ``grade_id``, the nbgrader id of the answer cell (its visible test cell is ``<grade_id>_test``,
  which holds the same ``points`` in the source notebook; a test holds the two equal);
* ``points``;
* ``checks``: what to call and what to expect, each one an object below that turns the
  secret seed into hidden inputs (:meth:`prepare`), naming the student object it probes
  and the reference it compares with;
* ``forbids``: library calls the answer may not make (the thing it has to write itself).

All checks of an item must pass for its points; the first one that fails explains why.
Tolerances are the course's policy (:data:`transformer_lm.checks.RTOL`, ``ATOL``) unless a
check says otherwise.

``prepare`` runs in the trusted process. What crosses into the sandbox is a
:class:`ProbeCall`: the name of a function of :mod:`transformer_lm.probes`, the student
objects it takes (by their names in the notebook), JSON arguments, and tensors.
What comes back is a record of tensors (or a small JSON value), judged by ``judge``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from transformer_lm import checks
from transformer_lm.checks import AttentionAPI, AttentionCase, Verdict


@dataclass
class ProbeCall:
    """One call of a probe in the sandbox: ``getattr(probes, probe)(**objects, **arguments, **tensors)``.

    ``tensors`` maps an argument name to a tensor, or ``"<argument>/<key>"`` to one entry of
    a dict of tensors (``state/W_query.weight``, ``inputs/x``).
    """

    probe: str
    objects: dict[str, str]
    arguments: dict = field(default_factory=dict)
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)

    def plan(self) -> dict:
        """The call as the harness reads it from a plan (JSON): the tensors travel apart, by name."""
        return {"probe": self.probe, "objects": self.objects, "arguments": self.arguments,
                "tensor_keys": list(self.tensors)}


@dataclass
class Prepared:
    """A check made concrete: the call for the sandbox and how to judge what comes back."""

    call: ProbeCall
    judge: Callable[[dict[str, torch.Tensor], object], Verdict]


def _flatten(arguments: dict) -> tuple[dict, dict[str, torch.Tensor]]:
    """Splits probe arguments into JSON ones and tensors, flattening dicts of tensors."""
    plain, tensors = {}, {}
    for name, value in arguments.items():
        if isinstance(value, torch.Tensor):
            tensors[name] = value.detach().contiguous()
        elif isinstance(value, dict) and value and all(isinstance(v, torch.Tensor) for v in value.values()):
            tensors.update({f"{name}/{key}": v.detach().contiguous() for key, v in value.items()})
        elif value is not None:
            plain[name] = value
    return plain, tensors


def _judge_record(expected, candidates=None):
    """Judges a record without quoting expected values: they come from secret inputs."""
    def judge(record, value):
        return checks.judge(record, expected, candidates, values=False)
    return judge


@dataclass(frozen=True)
class AttentionCheck:
    """Builds the student's attention class for ``case``, loads reference weights into it,
    and compares outputs (and attention weights where returned) and gradients of the
    input and of every parameter with the reference, naming catalogued mistakes."""

    object: str
    api: AttentionAPI
    case: AttentionCase

    def prepare(self, generator: torch.Generator) -> Prepared:
        tensors = checks.make_case_tensors(self.case, generator)
        arguments, expected, candidates = checks.attention_records(self.api, self.case, tensors)
        plain, flat = _flatten(arguments)
        if not arguments["inputs"]:
            plain["inputs"] = {}
        return Prepared(ProbeCall("probe_module", {"cls": self.object}, plain, flat),
                        _judge_record(expected, candidates))


@dataclass(frozen=True)
class FunctionCheck:
    """Calls the student's function on inputs drawn by ``make_inputs`` and compares the
    result (and, with ``grad``, the gradients of the inputs) with ``expected``.
    ``candidates(inputs)`` gives mistakes' records to name (e.g.
    :func:`transformer_lm.checks.attention_function_candidates`)."""

    object: str
    expected: Callable[..., torch.Tensor]
    make_inputs: Callable[[torch.Generator], dict[str, torch.Tensor]]
    grad: bool = True
    candidates: Callable[[dict], dict] | None = None

    def prepare(self, generator: torch.Generator) -> Prepared:
        inputs = self.make_inputs(generator)
        output = self.expected(*inputs.values())
        grad_output = torch.randn(output.shape, generator=generator) if self.grad else None
        expected = checks.function_records(self.expected, inputs, grad_output)
        candidates = self.candidates(inputs) if self.candidates else None
        plain, flat = _flatten({"inputs": inputs, "grad_output": grad_output})
        return Prepared(ProbeCall("probe_function", {"fn": self.object}, plain, flat),
                        _judge_record(expected, candidates))


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
        tensors = checks.make_case_tensors(self.case, generator)
        arguments, expected = checks.transfer_records(self.source_api, self.target_api, self.case, tensors)
        plain, flat = _flatten(arguments)
        objects = {"fn": self.object, "source_cls": self.source, "target_cls": self.target}
        return Prepared(ProbeCall("probe_transfer", objects, plain, flat), _judge_record(expected))


@dataclass(frozen=True)
class RaisesCheck:
    """Checks that building the student's class with ``init`` raises ``exception``."""

    object: str
    init: dict
    exception: str = "ValueError"

    def prepare(self, generator: torch.Generator) -> Prepared:
        def judge(record, raised):
            arguments = ", ".join(f"{k}={v!r}" for k, v in self.init.items())
            if raised == self.exception:
                return Verdict("passed", f"{self.object}({arguments}) raises {self.exception}.")
            got = f"raised {raised}" if raised else "raised nothing"
            return Verdict("failed", f"{self.object}({arguments}) {got}; expected a clear {self.exception} "
                                     f"that names the numbers that do not fit.")
        return Prepared(ProbeCall("raised_exception", {"cls": self.object}, {"init": self.init}), judge)


@dataclass(frozen=True)
class FactoryCheck:
    """Calls the student's factory ``fn(**kwargs)`` and judges the module it returns, run on
    a random input ``(batch, seq, d_in)``, with ``judge(record)`` on the output and its
    parameters' shapes."""

    object: str
    kwargs: dict
    input_shape: tuple[int, ...]
    judge_record: Callable[[dict[str, torch.Tensor]], Verdict]

    def prepare(self, generator: torch.Generator) -> Prepared:
        x = torch.randn(*self.input_shape, generator=generator)
        return Prepared(ProbeCall("probe_factory", {"fn": self.object}, {"kwargs": self.kwargs}, {"x": x}),
                        lambda record, value: self.judge_record(record))


@dataclass(frozen=True)
class ParametersCheck:
    """Builds the student's class with ``init`` and compares the names and shapes of its
    parameters with ``expected`` (for items that grade an ``__init__``)."""

    object: str
    init: dict
    expected: dict[str, tuple[int, ...]]

    def prepare(self, generator: torch.Generator) -> Prepared:
        def judge(record, shapes):
            return checks.judge_parameters(self.object, shapes if isinstance(shapes, dict) else {}, self.expected)
        return Prepared(ProbeCall("parameter_shapes", {"cls": self.object}, {"init": self.init}), judge)


@dataclass(frozen=True)
class MultiheadLoadCheck:
    """The student's class copies an ``nn.MultiheadAttention`` with ``load_from_torch`` and
    must then compute what the reference computes with those weights (mask included)."""

    object: str
    api: AttentionAPI
    case: AttentionCase

    def prepare(self, generator: torch.Generator) -> Prepared:
        tensors = checks.make_case_tensors(self.case, generator)
        arguments, expected = checks.multihead_load_records(self.api, self.case, tensors)
        plain, flat = _flatten(arguments)
        return Prepared(ProbeCall("probe_load_from_torch", {"cls": self.object}, plain, flat), _judge_record(expected))


@dataclass(frozen=True)
class DecoderLoadCheck:
    """The student's decoder layer copies an ``nn.TransformerEncoderLayer`` (causal) with
    ``load_from_torch`` and must then compute what the reference block computes."""

    object: str
    init: dict
    case: checks.BlockCase

    def prepare(self, generator: torch.Generator) -> Prepared:
        arguments, expected = checks.decoder_load_records(self.init, self.case, generator)
        plain, flat = _flatten(arguments)
        return Prepared(ProbeCall("probe_load_from_torch", {"cls": self.object}, plain, flat), _judge_record(expected))


@dataclass(frozen=True)
class ModuleCheck:
    """Loads a randomized reference module's weights into the student's class (same
    parameter names) and compares the output and every gradient."""

    object: str
    init: dict
    reference: Callable[[], torch.nn.Module]
    make_inputs: Callable[[torch.Generator], dict[str, torch.Tensor]]

    def prepare(self, generator: torch.Generator) -> Prepared:
        module = checks.randomize(self.reference(), generator)
        arguments, expected = checks.module_case(module, self.make_inputs(generator), generator)
        plain, flat = _flatten({"init": self.init, **arguments})
        return Prepared(ProbeCall("probe_module", {"cls": self.object}, plain, flat), _judge_record(expected))


@dataclass(frozen=True)
class LossCheck:
    """``GPT.forward(idx, targets)`` returns ``(logits, loss)``: the logits and the mean
    cross-entropy over the positions whose target is not -1 must be the reference's, for the
    reference's randomized weights loaded by name. (``ModuleCheck`` compares the first output
    only; the probe records the second one as ``weights``, which this check judges as the loss.)"""

    object: str
    config: dict
    batch: int
    seq: int

    def prepare(self, generator: torch.Generator) -> Prepared:
        from transformer_lm import reference

        cfg = reference.GPTConfig(**self.config)
        model = checks.randomize(reference.GPT(cfg), generator).eval()
        idx = torch.randint(cfg.vocab_size, (self.batch, self.seq), generator=generator)
        targets = torch.randint(cfg.vocab_size, (self.batch, self.seq), generator=generator)
        targets[torch.rand(targets.shape, generator=generator) < 0.4] = -1
        targets[0, 0], targets[-1, -1] = -1, 0   # at least one position left out, one that counts
        with torch.no_grad():
            logits, loss = model(idx, targets)
            flat_logits, flat_targets = logits.flatten(0, 1), targets.flatten()
            summed = torch.nn.functional.cross_entropy(flat_logits, flat_targets, ignore_index=-1, reduction="sum")
            counted = flat_targets != -1
            every_position = torch.nn.functional.cross_entropy(
                flat_logits, flat_targets.clamp(min=0), reduction="none").masked_fill(~counted, 0.0).mean()
        state = {n: p.detach().clone() for n, p in model.named_parameters()}
        plain, flat = _flatten({"init": {"config": self.config}, "state": state,
                                "inputs": {"idx": idx, "targets": targets}})

        def judge(record, value) -> Verdict:
            if "output" not in record:
                return Verdict("failed", "forward(idx, targets) produced no logits.")
            problem = checks.difference("the logits of forward(idx, targets)", record["output"], logits, values=False)
            if problem:
                return Verdict("failed", problem)
            if "weights" not in record:
                return Verdict("failed", "forward(idx, targets) returned loss=None; with targets it must return "
                                         "(logits, loss).")
            got = record["weights"]
            if got.numel() != 1:
                return Verdict("failed", f"the loss has shape {tuple(got.shape)}; expected a single number, the "
                                         "mean over the positions that count.")
            got = got.reshape(())
            problem = checks.difference("the loss", got, loss, values=False)
            if problem is None:
                return Verdict("passed", "Correct: the logits and the loss match the reference.")
            if checks.difference("the loss", got, summed) is None:
                problem += " It is the sum over the positions; the loss is their mean (F.cross_entropy's default)."
            elif checks.difference("the loss", got, every_position) is None:
                problem += (" The positions whose target is -1 still count in the mean: pass ignore_index=-1 to "
                            "F.cross_entropy.")
            return Verdict("failed", problem)

        return Prepared(ProbeCall("probe_module", {"cls": self.object}, plain, flat), judge)


@dataclass(frozen=True)
class GenerateCheck:
    """Greedy generation (``top_k=1``, plus ``call_kwargs``) from the student's GPT with a
    randomized reference model's weights (LayerNorms left as the identity, so that greedy
    tokens depend on the context: :func:`transformer_lm.checks.generate_records`) must give the
    reference's tokens, made without a cache. A prompt longer than ``block_size`` tests the
    cropping. A failure says where the tokens part from the reference's: the shape, the
    prompt, or the first new token that differs, and whether the context had outgrown
    ``block_size`` by then. With ``use_cache``, right tokens are not enough: the model must
    also run on the tokens per step that the reference's cache runs on (a cache that is never
    used gives the right tokens too)."""

    object: str
    config: dict
    batch: int
    prompt: int
    max_new_tokens: int
    call_kwargs: dict = field(default_factory=dict)

    def prepare(self, generator: torch.Generator) -> Prepared:
        from transformer_lm import reference

        cfg = reference.GPTConfig(**self.config)
        state, idx, records = checks.generate_records(cfg, generator, self.batch, self.prompt, self.max_new_tokens)
        expected, steps = records["output"], records["tokens_per_call"]
        plain, flat = _flatten({"init": {"config": self.config}, "state": state, "idx": idx,
                                "max_new_tokens": self.max_new_tokens,
                                "call_kwargs": {"top_k": 1, **self.call_kwargs}})
        call = "generate(idx, max_new_tokens, top_k=1" + "".join(
            f", {k}={v!r}" for k, v in self.call_kwargs.items()) + ")"
        new = self.max_new_tokens

        def judge(record, value) -> Verdict:
            got = record.get("output")
            if got is None or tuple(got.shape) != tuple(expected.shape):
                shape = "nothing" if got is None else f"shape {tuple(got.shape)}"
                return Verdict("failed", f"{call} on a prompt of shape {tuple(idx.shape)} with max_new_tokens={new} "
                                         f"returned {shape}; expected {tuple(expected.shape)}: the prompt followed "
                                         f"by the new tokens.")
            got = got.long()
            seen = record.get("tokens_per_call")
            if torch.equal(got, expected) and self.call_kwargs.get("use_cache") and seen is not None and seen.numel() \
                    and not torch.equal(seen.long(), steps):
                return Verdict("failed", f"{call} gives the right tokens, but ran the model on {seen.tolist()} tokens "
                                         f"per step: with the cache it runs on the prompt (at most block_size="
                                         f"{cfg.block_size} tokens) first, then on one new token per step until the "
                                         f"cache is full, then starts again: {steps.tolist()}.")
            if torch.equal(got, expected):
                return Verdict("passed", "Correct: the greedy tokens are the reference's.")
            if not torch.equal(got[:, :self.prompt], idx):
                return Verdict("failed", f"{call} returned a tensor that does not start with the prompt; it must "
                                         "return the prompt followed by the new tokens.")
            first = int((got != expected).any(dim=0).nonzero()[0])
            outgrown = ""
            if first >= cfg.block_size:
                cached = self.call_kwargs.get("use_cache")
                question = ("did the cache restart from the last block_size tokens?" if cached
                            else "was it cropped to its last block_size tokens?")
                outgrown = f" By then the context ({first} tokens) was longer than block_size={cfg.block_size}: " \
                           + question
            return Verdict("failed", f"{call}: the greedy tokens differ from the reference's from new token "
                                     f"{first - self.prompt + 1} of {new} on.{outgrown} Generation runs your "
                                     "whole model: if the checks of the attention, the block or GPT.forward fail, "
                                     "fix those first.")

        return Prepared(ProbeCall("probe_generate", {"cls": self.object}, plain, flat), judge)


@dataclass(frozen=True)
class Item:
    """One graded item and its hidden checks.

    ``grade_id`` names the item and its visible test cell (``<grade_id>_test``); ``answer`` is
    the answer cell it grades, the item's own id unless several items grade one answer (the
    scores, the mask and the output of one class). ``style_deduction`` points come off a
    passing item whose answer cell breaks PEP 8 (:data:`STYLE`), never below zero.
    """

    grade_id: str
    points: float
    checks: tuple
    forbids: tuple[str, ...] = ()
    answer: str | None = None
    style_deduction: float = 0.0

    @property
    def test_id(self) -> str:
        return f"{self.grade_id}_test"

    @property
    def answer_id(self) -> str:
        return self.answer or self.grade_id


# The PEP 8 rules of the style deduction: pycodestyle's defaults with a longer line and the
# comment-spacing rules off, so that shape comments written beside code (which the course
# asks for) are never what costs a point; a line too long only because of its trailing
# comment is not counted either (autograder.grading.style_problems).
STYLE = {"max_line_length": 120, "ignore": ["E261", "E262", "E265", "E266", "W503", "W504", "W291", "W293", "E303"]}
