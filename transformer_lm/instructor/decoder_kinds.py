"""Kinds of check for the attention of today's decoders (assignment 06): rotary position
embeddings, grouped-query attention (with a sliding window), sliding-window masks, and the size
of a KV cache.

Each works as the kinds of :mod:`transformer_lm.instructor.kinds` do (the visible checks prepare it from a
fixed seed, the grader from the course's secret), against :mod:`transformer_lm.instructor.reference`, and
names the catalogued mistakes of :data:`transformer_lm.catalog.DECODER` by their twins. Positions
never start at 0 unless a case says so: a cache or left padding moves them.
"""

from __future__ import annotations

import functools
from dataclasses import KW_ONLY, dataclass

import torch

from transformer_lm import catalog
from transformer_lm.instructor import mistakes
from transformer_lm.instructor import reference
from transformer_lm.random_weights import randomize
from transformer_lm.decoder_judges import BytesJudge, MaskJudge, PaddedTokensJudge, PaddingJudge, RopeJudge
from transformer_lm.judging import RecordJudge
from transformer_lm.instructor.kinds import function_check, module_case
from transformer_lm.prepared import Prepared, ProbeCall
from transformer_lm.sandboxed import probes


def positions_for(batch: int, seq: int, start: int, per_sequence: bool) -> torch.Tensor:
    """``start .. start + seq - 1`` for every sequence ``(seq,)``, or, ``per_sequence``, each
    sequence ``b`` starting ``b`` positions later ``(batch, seq)``."""
    shared = torch.arange(start, start + seq)
    return shared + torch.arange(batch).unsqueeze(-1) if per_sequence else shared


@dataclass(frozen=True)
class RopeCheck:
    """``object(x, positions, base=...)`` rotates ``x`` ``(batch, heads, seq, head_dim)`` as
    :func:`reference.apply_rope` does: values and the gradient of ``x``, within a tolerance that
    lets the angles be computed in float32 (:class:`transformer_lm.decoder_judges.RopeJudge`)."""

    object: str
    _: KW_ONLY
    batch: int
    heads: int
    seq: int
    head_dim: int
    start: int = 0
    per_sequence: bool = False
    base: float = 10000.0

    @property
    def call(self) -> str:
        """What the check calls, in the notebook's words: said before a failure (an error included)."""
        positions = (f"positions of shape ({self.batch}, {self.seq}), one row per sequence as with left padding "
                     "(cos and sin then need the heads' dimension: (B, 1, T, d))") if self.per_sequence \
            else f"positions {self.start} to {self.start + self.seq - 1}"
        return (f"{self.object}(x of shape (B={self.batch}, H={self.heads}, T={self.seq}, d={self.head_dim}), "
                f"{positions}, base={self.base:g})")

    def prepare(self, generator: torch.Generator) -> Prepared:
        x = torch.randn(self.batch, self.heads, self.seq, self.head_dim, generator=generator)
        inputs = {"x": x, "positions": positions_for(self.batch, self.seq, self.start, self.per_sequence)}
        candidates = {m: {"output": mistakes.flawed_apply_rope(x, inputs["positions"], self.base, m.flaws)}
                      for m in catalog.decoder_mistakes("rope")}
        last_position = int(inputs["positions"].max())
        return function_check(self.object, lambda x, positions: reference.apply_rope(x, positions, self.base), inputs,
                              torch.randn(x.shape, generator=generator), candidates, {"base": self.base},
                              judge=functools.partial(RopeJudge, last_position=last_position))


@dataclass(frozen=True)
class GroupedQueryCheck:
    """The student's ``object(d_model, n_heads, n_kv_heads, rope_base=..., window=...)`` with the
    reference's random weights loaded by name (``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``),
    called as ``forward(x, positions, attn_mask, cache)`` on each branch its signature offers: with
    ``past``, a cache of that many earlier tokens (random keys and values) before the ``seq`` new
    ones; with ``padded``, the mask of a left-padded batch of prompts of those lengths over every
    token (``max(padded) == past + seq``), whose pad queries see no key; without it, no mask, so
    that the layer makes its own. The output, the cache it returns and every gradient (of ``x``,
    the cache passed in and the weights) are compared, naming the mistakes of rotary embeddings,
    of sharing key/value heads, of rows with no key and of the mask the layer makes (its window,
    and which queries it is for after a cache)."""

    object: str
    _: KW_ONLY
    d_model: int
    n_heads: int
    n_kv_heads: int
    batch: int
    seq: int
    start: int = 0
    base: float = 10000.0
    window: int | None = None
    past: int = 0                  # tokens already in the cache
    padded: tuple[int, ...] = ()   # prompt lengths: a left-padded batch, with its positions and mask

    @property
    def call(self) -> str:
        """The branch the check calls, in the notebook's words: said before a failure."""
        window = f", window={self.window}" if self.window is not None else ""
        cache = f"a cache of {self.past} earlier tokens" if self.past else "no cache"
        mask = f"the mask of prompts of lengths {list(self.padded)}" if self.padded else "no attn_mask"
        return (f"{self.object}(d_model={self.d_model}, n_heads={self.n_heads}, n_kv_heads={self.n_kv_heads}{window}) "
                f"on {self.seq} new token(s) with {cache} and {mask}")

    def prepare(self, generator: torch.Generator) -> Prepared:
        module = randomize(reference.GroupedQueryAttention(self.d_model, self.n_heads, self.n_kv_heads,
                                                           rope_base=self.base, window=self.window), generator)
        inputs = {"x": torch.randn(self.batch, self.seq, self.d_model, generator=generator),
                  "positions": positions_for(self.batch, self.seq, self.start, False)}
        if self.past:
            inputs.update({name: torch.randn(self.batch, self.n_kv_heads, self.past, module.head_dim,
                                             generator=generator) for name in ("cache_keys", "cache_values")})
        if self.padded:
            inputs["positions"], inputs["attn_mask"] = reference.padded_inputs(left_padded_batch(self.padded),
                                                                               self.seq)
        arguments, expected = module_case(module, inputs, generator, layer=True)
        x, positions, mask, cache = probes.layer_arguments(inputs)
        with torch.no_grad():
            candidates = {m: {"output": mistakes.flawed_grouped_query_attention(module, x, positions, mask, m.flaws,
                                                                               cache)}
                          for m in self.revealable()}
        init = {"d_model": self.d_model, "n_heads": self.n_heads, "n_kv_heads": self.n_kv_heads, "rope_base": self.base}
        if self.window is not None:
            init["window"] = self.window
        return Prepared(ProbeCall.of(probes.probe_module, {"cls": self.object}, {"init": init, **arguments}),
                        RecordJudge(expected, candidates, labels=CACHE_LABELS))

    def revealable(self) -> list[catalog.Mistake]:
        """The catalogued mistakes this branch can show: a given mask shows rows with no key; no
        mask shows the mask the layer makes, its window and, after a cache, which queries it is for."""
        if self.padded:
            shows = ["gqa", "padded_gqa"]
        else:
            shows = ["gqa", "window"] if self.window is not None else ["gqa"]
            if self.past:
                shows.append("cached_causal" if self.window is None else "cached_window")
        return [mistake for tag in shows for mistake in catalog.decoder_mistakes(tag)]


CACHE_LABELS = {"cache.keys": "the returned cache's keys (the rotated keys of every token so far, before the copy "
                              "for the groups: (B, n_kv_heads, T_k, head_dim))",
                "cache.values": "the returned cache's values (the values of every token so far, before the copy "
                                "for the groups: (B, n_kv_heads, T_k, head_dim))",
                "grad.cache_keys": "the gradient of the cached keys passed in",
                "grad.cache_values": "the gradient of the cached values passed in"}
"""How a failure names the cache a layer takes and returns, ``(output, (k, v))``: what it must hold."""


@dataclass(frozen=True)
class WindowMaskCheck:
    """``object(query_len, key_len, window)`` is the boolean sliding-window mask of
    :func:`reference.sliding_window_mask`: causal, at most ``window`` keys, itself included."""

    object: str
    _: KW_ONLY
    query_len: int
    key_len: int
    window: int

    def prepare(self, generator: torch.Generator) -> Prepared:
        sizes = {"query_len": self.query_len, "key_len": self.key_len, "window": self.window}
        expected = reference.sliding_window_mask(self.query_len, self.key_len, window=self.window)
        [off_by_one] = catalog.decoder_mistakes("window")
        wrong = [reference.sliding_window_mask(self.query_len, self.key_len, window=self.window + step)
                 for step in (1, -1)]
        call = f"{self.object}(query_len={self.query_len}, key_len={self.key_len}, window={self.window})"

        return Prepared(ProbeCall.of(probes.probe_call, {"fn": self.object}, {"arguments": sizes}),
                        MaskJudge(call, expected, wrong, off_by_one))


@dataclass(frozen=True)
class CacheBytesCheck:
    """``object(n_layers, n_kv_heads, head_dim, seq_len, batch, dtype)`` is the size of a KV
    cache in bytes, :func:`reference.kv_cache_bytes`."""

    object: str
    _: KW_ONLY
    n_layers: int
    n_kv_heads: int
    head_dim: int
    seq_len: int
    batch: int
    dtype: str = "bfloat16"

    def prepare(self, generator: torch.Generator) -> Prepared:
        sizes = {"n_layers": self.n_layers, "n_kv_heads": self.n_kv_heads, "head_dim": self.head_dim,
                 "seq_len": self.seq_len, "batch": self.batch}
        dtype = getattr(torch, self.dtype)
        expected = reference.kv_cache_bytes(**sizes, dtype=dtype)
        [keys_only] = catalog.decoder_mistakes("bytes")
        call = f"{self.object}({', '.join(f'{k}={v}' for k, v in sizes.items())}, dtype=torch.{self.dtype})"

        return Prepared(ProbeCall.of(probes.probe_call, {"fn": self.object},
                                     {"arguments": {**sizes, "dtype": f"torch.{self.dtype}"}}),
                        BytesJudge(call, expected, self.dtype, torch.empty((), dtype=dtype).element_size(),
                                   mistakes.flawed_kv_cache_bytes(sizes, dtype, keys_only.flaws), keys_only))


def left_padded_batch(lengths: tuple[int, ...]) -> torch.Tensor:
    """The attention mask ``(B, max(lengths))`` of prompts of ``lengths``, padded on the left."""
    return reference.left_pad([[1] * n for n in lengths])[1]


@dataclass(frozen=True)
class PaddingCheck:
    """``positions_object(attention_mask)`` and ``mask_object(attention_mask, query_len)`` give a
    left-padded batch's positions and mask as :func:`reference.padded_inputs` does (the mask for
    the last ``query_len`` tokens)."""

    positions_object: str
    mask_object: str
    _: KW_ONLY
    lengths: tuple[int, ...]
    query_len: int | None = None

    @property
    def object(self) -> str:
        return self.mask_object

    def prepare(self, generator: torch.Generator) -> Prepared:
        attention_mask = left_padded_batch(self.lengths)
        query_len = self.query_len or attention_mask.shape[-1]
        expected = {"positions": reference.left_padded_positions(attention_mask),
                    "mask": reference.padded_causal_mask(attention_mask, query_len)}
        candidates = {m: dict(zip(("positions", "mask"), mistakes.flawed_padding(attention_mask, query_len, m.flaws)))
                      for m in catalog.decoder_mistakes("padding")}
        calls = (f"{self.positions_object}(attention_mask) and {self.mask_object}(attention_mask, {query_len}) for "
                 f"prompts of lengths {list(self.lengths)}")

        arguments = {"attention_mask": attention_mask, "query_len": query_len}
        return Prepared(ProbeCall.of(probes.probe_padding, {"positions_fn": self.positions_object,
                                                            "mask_fn": self.mask_object}, arguments),
                        PaddingJudge(calls, expected, candidates, attention_mask))


GENERATION_DRAWS = 8
"""How many random models a padded-generation check may draw to find one under which every
catalogued mistake of padded generation changes the greedy tokens."""


@dataclass(frozen=True)
class PaddedGenerationCheck:
    """``object(model, prompts, max_new_tokens)`` on a model built on the student's ``attention``
    class with random reference weights: every prompt's greedy continuation in one left-padded batch
    with a KV cache must be what generating that prompt alone gives. The model handed to the answer
    is a :class:`~transformer_lm.sandboxed.decoder.CacheOnlyDecoder`: it refuses any call but the
    whole prompts once and then one new token per call with the caches, which names a generation
    that runs the whole sequence again. The tokens are what the grade rests on: the model marks the
    tokens of each call after the prompt (:class:`~transformer_lm.sandboxed.decoder.StepMarkedDecoder`),
    so that a generation which steps around the refusal and runs the sequence again gets other
    tokens. The weights and marks are drawn again until every catalogued mistake of padded
    generation that the prompts can show (no padding mistake where all have one length), running
    the sequence again among them, changes the tokens."""

    object: str
    attention: str
    config: tuple[tuple[str, object], ...]
    _: KW_ONLY
    lengths: tuple[int, ...]
    max_new_tokens: int
    pad_id: int | None = None   # None: the answer's default

    def prepare(self, generator: torch.Generator) -> Prepared:
        from transformer_lm.sandboxed.decoder import DecoderConfig, StepMarkedDecoder

        config = DecoderConfig(**dict(self.config))
        tags = ("padding", "cache", "generation") if len(set(self.lengths)) > 1 else ("cache", "generation")
        revealable = [m for tag in tags for m in catalog.decoder_mistakes(tag)
                      if m.name != "positions_from_padding"]   # under RoPE an offset of every position changes nothing
        drawn = None
        for _ in range(GENERATION_DRAWS):
            model = randomize(StepMarkedDecoder(config, reference.GroupedQueryAttention, steps=self.max_new_tokens),
                              generator, scale=0.5).eval()
            prompts = [torch.randint(config.vocab_size, (n,), generator=generator).tolist() for n in self.lengths]
            expected = [reference.generate_padded(model, [p], self.max_new_tokens)[0] for p in prompts]
            candidates = {m: mistakes.flawed_generate_padded(model, prompts, self.max_new_tokens, m.flaws)
                          for m in revealable}
            candidates = {m: tokens for m, tokens in candidates.items() if tokens != expected}
            if drawn is None or len(candidates) > len(drawn[-1]):
                drawn = (model, prompts, expected, candidates)
            if len(candidates) == len(revealable):
                break
        model, prompts, expected, candidates = drawn
        pad = "" if self.pad_id is None else f", pad_id={self.pad_id}"
        call = (f"{self.object}(model, prompts of lengths {list(self.lengths)}, max_new_tokens={self.max_new_tokens}"
                f"{pad})")
        [reruns] = catalog.decoder_mistakes("generation")

        arguments = {"config": dict(self.config), "state": {n: p.detach().clone() for n, p in model.named_parameters()},
                     "prompts": prompts, "max_new_tokens": self.max_new_tokens, "pad_id": self.pad_id}
        return Prepared(ProbeCall.of(probes.probe_padded_generation, {"fn": self.object, "attention": self.attention},
                                     arguments),
                        PaddedTokensJudge(call, prompts, expected, candidates, reruns))
