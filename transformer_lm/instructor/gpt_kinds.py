"""Kinds of check for assignment 04's minGPT: its loss, greedy generation with and without a KV
cache, the cached forward pass, and sampling with a temperature and top-k. They work as the kinds
of :mod:`transformer_lm.instructor.kinds` do, with the judges of :mod:`transformer_lm.gpt_judges`."""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field

import torch

from transformer_lm import catalog
from transformer_lm.instructor import mistakes, reference
from transformer_lm.gpt_judges import TEXTS, DrawsJudge, LossJudge, TokensJudge, frequency_misfit
from transformer_lm.judging import RecordJudge
from transformer_lm.instructor.kinds import parameters_of
from transformer_lm.prepared import Prepared, ProbeCall
from transformer_lm.random_weights import randomize
from transformer_lm.sandboxed import probes


def generate_records(config: reference.GPTConfig, generator: torch.Generator, batch: int, prompt: int,
                     max_new_tokens: int):
    """A reference GPT (in eval mode), its weights, a prompt, its greedy continuation (``top_k=1``)
    and, as ``tokens_per_call``, the tokens each call of the model runs on when it uses a KV cache."""
    model = randomize(reference.GPT(config), generator, scale=0.5).eval()
    for module in model.modules():  # random LayerNorm biases would push every position to one token
        if isinstance(module, torch.nn.LayerNorm):
            module.reset_parameters()
    idx = torch.randint(config.vocab_size, (batch, prompt), generator=generator)
    expected = {"output": model.generate(idx, max_new_tokens, top_k=1)}
    with probes.tokens_per_call(model) as seen:
        model.generate(idx, max_new_tokens, top_k=1, use_cache=True)
    expected["tokens_per_call"] = torch.tensor(seen, dtype=torch.long)
    state = parameters_of(model)
    return model, state, idx, expected


def cached_logits(model: reference.GPT, idx: torch.Tensor, prefix: int) -> torch.Tensor:
    """The reference GPT's logits with its KV cache, as :func:`probes.probe_cached_forward` records
    a student's: the last of the first ``prefix`` tokens, then one token per call."""
    cache: list = []
    with torch.no_grad():
        steps = [model(idx[:, :prefix], cache=cache)[0][:, -1:]]
        for position in range(prefix, idx.shape[1]):
            steps.append(model(idx[:, position:position + 1], cache=cache)[0])
    return torch.cat(steps, dim=1)


GENERATE_DRAWS = 8
"""How many random models a generation check may draw to find one whose greedy tokens each
catalogued mistake changes (under some weights one token wins whatever the context)."""


def sampling_check(name: str, logits: torch.Tensor, temperature: float, top_k: int | None, draws: int) -> Prepared:
    """The check of a sampler ``name(logits, temperature, top_k)``: ``draws`` tokens from each row
    of ``logits`` ``(rows, vocab)``, in one call on the rows repeated, must follow
    :func:`reference.sampling_probabilities`; a catalogued sampling mistake that they follow
    instead is named."""
    expected = reference.sampling_probabilities(logits, temperature, top_k)
    candidates = {mistake: mistakes.flawed_sampling_probabilities(logits, temperature, top_k, mistake.flaws)
                  for mistake in catalog.generation_mistakes("sampling")}
    candidates = {mistake: q for mistake, q in candidates.items() if frequency_misfit(q, expected, draws)}
    repeated = logits.repeat_interleave(draws, dim=0)   # row r fills draws r * draws .. (r + 1) * draws - 1
    call = f"{name}(logits of shape {tuple(repeated.shape)}, temperature={temperature}, top_k={top_k})"
    return Prepared(ProbeCall.of(probes.probe_sampler, {"fn": name},
                                 {"logits": repeated, "call_kwargs": {"temperature": temperature, "top_k": top_k}}),
                    DrawsJudge(call, draws, expected, candidates))


@dataclass(frozen=True)
class LossCheck:
    """``GPT.forward(idx, targets)`` returns ``(logits, loss)``: the logits and the mean
    cross-entropy over the positions whose target is not -1 must be the reference's, for the
    reference's randomized weights loaded by name. (``ModuleCheck`` compares the first output
    only; the probe records the second one as ``weights``, which this check judges as the loss.)"""

    object: str
    config: dict
    _: KW_ONLY
    batch: int
    seq: int

    def prepare(self, generator: torch.Generator) -> Prepared:
        cfg = reference.GPTConfig(**self.config)
        model = randomize(reference.GPT(cfg), generator).eval()
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
        state = parameters_of(model)
        arguments = {"init": {"config": self.config}, "state": state, "inputs": {"idx": idx, "targets": targets}}

        return Prepared(ProbeCall.of(probes.probe_module, {"cls": self.object}, arguments),
                        LossJudge(logits, loss, summed, every_position))


@dataclass(frozen=True)
class GenerateCheck:
    """Greedy generation (``top_k=1``, plus ``call_kwargs``) from the student's GPT with a
    randomized reference model's weights (LayerNorms left as the identity, so that greedy
    tokens depend on the context: :func:`generate_records`) must give the
    reference's tokens, made without a cache. A prompt longer than ``block_size`` tests the
    cropping. A failure says where the tokens part from the reference's: the shape, the
    prompt, or the first new token that differs, and whether the context had outgrown
    ``block_size`` by then. With ``use_cache``, right tokens are not enough: the model must
    also run on the tokens per step that the reference's cache runs on (a cache that is never
    used gives the right tokens too). The weights are drawn again (up to :data:`GENERATE_DRAWS`
    times) until every catalogued generation mistake changes the tokens, where one can."""

    object: str
    config: dict
    _: KW_ONLY
    batch: int
    prompt: int
    max_new_tokens: int
    call_kwargs: dict = field(default_factory=dict)

    def prepare(self, generator: torch.Generator) -> Prepared:
        cfg = reference.GPTConfig(**self.config)
        cached = bool(self.call_kwargs.get("use_cache"))
        revealable = catalog.generation_mistakes("cache" if cached else "generation")
        drawn = None
        for _ in range(GENERATE_DRAWS):  # weights under which every catalogued mistake changes the tokens, if any do
            model, state, idx, records = generate_records(cfg, generator, self.batch, self.prompt, self.max_new_tokens)
            candidates = {mistake: mistakes.flawed_greedy_tokens(model, idx, self.max_new_tokens, cached, mistake.flaws)
                          for mistake in revealable}
            candidates = {m: tokens for m, tokens in candidates.items() if not torch.equal(tokens, records["output"])}
            if drawn is None or len(candidates) > len(drawn[-1]):
                drawn = (model, state, idx, records, candidates)
            if len(candidates) == len(revealable):
                break
        model, state, idx, records, candidates = drawn
        steps = {m: mistakes.flawed_cache_steps(model, idx, self.max_new_tokens, m.flaws)
                 for m in (catalog.generation_mistakes("cache_steps") if cached else ())}
        arguments = {"init": {"config": self.config}, "state": state, "idx": idx,
                     "max_new_tokens": self.max_new_tokens, "call_kwargs": {"top_k": 1, **self.call_kwargs}}
        call = "generate(idx, max_new_tokens, top_k=1" + "".join(
            f", {k}={v!r}" for k, v in self.call_kwargs.items()) + ")"
        judge_tokens = TokensJudge(call, idx, records["output"], records["tokens_per_call"], cfg.block_size, cached,
                                   candidates, {m: s for m, s in steps.items()
                                                if not torch.equal(s, records["tokens_per_call"])})
        return Prepared(ProbeCall.of(probes.probe_generate, {"cls": self.object}, arguments), judge_tokens)


@dataclass(frozen=True)
class SamplingCheck:
    """The student's sampler ``object(logits, temperature, top_k)`` draws ``draws`` tokens from
    each of ``rows`` rows of random logits over ``vocab`` tokens, in one call under a fixed seed;
    their frequencies must follow the reference's distribution (:func:`sampling_check`)."""

    object: str
    _: KW_ONLY
    vocab: int
    temperature: float
    top_k: int | None = None
    rows: int = 3
    draws: int = 4000

    def prepare(self, generator: torch.Generator) -> Prepared:
        logits = torch.randn(self.rows, self.vocab, generator=generator) * 2.0
        return sampling_check(self.object, logits, self.temperature, self.top_k, self.draws)


@dataclass(frozen=True)
class CachedForwardCheck:
    """The student's GPT with a randomized reference model's weights: its logits for the tokens
    after a ``prefix`` run with the KV cache, one token per call, must be those of the whole
    sequence run at once (:func:`probes.probe_cached_forward`); positions that start at 0 again
    after the cache are named."""

    object: str
    config: dict
    _: KW_ONLY
    batch: int
    seq: int
    prefix: int

    def prepare(self, generator: torch.Generator) -> Prepared:
        cfg = reference.GPTConfig(**self.config)
        model = randomize(reference.GPT(cfg), generator).eval()
        idx = torch.randint(cfg.vocab_size, (self.batch, self.seq), generator=generator)
        with torch.no_grad():
            expected = {"cached": model(idx)[0][:, self.prefix - 1:]}
        candidates = {mistake: {"cached": cached_logits(mistakes.flawed_model(model, mistake.flaws), idx, self.prefix)}
                      for mistake in catalog.generation_mistakes("cache")}
        state = parameters_of(model)
        arguments = {"init": {"config": self.config}, "state": state, "idx": idx, "prefix": self.prefix}

        judge_cached = RecordJudge(
            expected, candidates, call=f"forward(idx, kv_cache=...) on the first {self.prefix} of {self.seq} tokens, "
                                       "then on one token per call, must give the logits of the whole sequence run at "
                                       "once",
            passed=TEXTS["cached_passed"], labels={"cached": TEXTS["cached"]})
        return Prepared(ProbeCall.of(probes.probe_cached_forward, {"cls": self.object}, arguments), judge_cached)
