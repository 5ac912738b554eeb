"""Kinds of check for the attention of today's decoders (assignment 06): rotary position
embeddings, grouped-query attention (with a sliding window), sliding-window masks, and the size
of a KV cache.

Each works as the kinds of :mod:`transformer_lm.kinds` do (the visible checks prepare it from a
fixed seed, the grader from the course's secret), against :mod:`transformer_lm.reference`, and
names the catalogued mistakes of :data:`transformer_lm.mistakes.DECODER` by their twins. Positions
never start at 0 unless a case says so: a cache or left padding moves them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from transformer_lm import mistakes as catalog
from transformer_lm import reference
from transformer_lm.cases import randomize
from transformer_lm.judging import Verdict
from transformer_lm.kinds import Prepared, ProbeCall, _judge_record, function_check, module_case
from transformer_lm.sandboxed import probes


def positions_for(batch: int, seq: int, start: int, per_sequence: bool) -> torch.Tensor:
    """``start .. start + seq - 1`` for every sequence ``(seq,)``, or, ``per_sequence``, each
    sequence ``b`` starting ``b`` positions later ``(batch, seq)``."""
    shared = torch.arange(start, start + seq)
    return shared + torch.arange(batch).unsqueeze(-1) if per_sequence else shared


@dataclass(frozen=True)
class RopeCheck:
    """``object(x, positions, base=...)`` rotates ``x`` ``(batch, heads, seq, head_dim)`` as
    :func:`reference.apply_rope` does: values and the gradient of ``x``."""

    object: str
    batch: int
    heads: int
    seq: int
    head_dim: int
    start: int = 0
    per_sequence: bool = False
    base: float = 10000.0

    def prepare(self, generator: torch.Generator) -> Prepared:
        x = torch.randn(self.batch, self.heads, self.seq, self.head_dim, generator=generator)
        inputs = {"x": x, "positions": positions_for(self.batch, self.seq, self.start, self.per_sequence)}
        candidates = {m: {"output": catalog.flawed_apply_rope(x, inputs["positions"], self.base, m.flaws)}
                      for m in catalog.decoder_mistakes("rope")}
        return function_check(self.object, lambda x, positions: reference.apply_rope(x, positions, self.base), inputs,
                              torch.randn(x.shape, generator=generator), candidates, {"base": self.base})


@dataclass(frozen=True)
class GroupedQueryCheck:
    """The student's ``object(d_model, n_heads, n_kv_heads, rope_base=..., window=...)`` with the
    reference's random weights loaded by name (``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``),
    called as ``forward(x, positions)``: the output and every gradient, naming the mistakes of
    rotary embeddings, of sharing key/value heads and (with ``window``) of the window."""

    object: str
    d_model: int
    n_heads: int
    n_kv_heads: int
    batch: int
    seq: int
    start: int = 0
    base: float = 10000.0
    window: int | None = None

    def prepare(self, generator: torch.Generator) -> Prepared:
        module = randomize(reference.GroupedQueryAttention(self.d_model, self.n_heads, self.n_kv_heads,
                                                           rope_base=self.base, window=self.window), generator)
        x = torch.randn(self.batch, self.seq, self.d_model, generator=generator)
        positions = positions_for(self.batch, self.seq, self.start, False)
        arguments, expected = module_case(module, {"x": x, "positions": positions}, generator)
        mask = module.causal_mask(self.seq, self.seq)
        with torch.no_grad():
            candidates = {m: {"output": catalog.flawed_grouped_query_attention(module, x, positions, mask, m.flaws)}
                          for m in catalog.decoder_mistakes("gqa")}
            if self.window is not None:
                for mistake in catalog.decoder_mistakes("window"):
                    wrong = catalog.flawed_sliding_window_mask(self.seq, self.seq, self.window, mistake.flaws)
                    candidates[mistake] = {"output": module(x, positions, wrong)[0]}
        init = {"d_model": self.d_model, "n_heads": self.n_heads, "n_kv_heads": self.n_kv_heads, "rope_base": self.base}
        if self.window is not None:
            init["window"] = self.window
        return Prepared(ProbeCall.of(probes.probe_module, {"cls": self.object}, {"init": init, **arguments}),
                        _judge_record(expected, candidates))


@dataclass(frozen=True)
class WindowMaskCheck:
    """``object(query_len, key_len, window)`` is the boolean sliding-window mask of
    :func:`reference.sliding_window_mask`: causal, at most ``window`` keys, itself included."""

    object: str
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

        def judge_mask(record, value, values) -> Verdict:
            got = record.get("output")
            if got is None or tuple(got.shape) != tuple(expected.shape):
                shape = "a number" if got is None else f"shape {tuple(got.shape)}"
                return Verdict("failed", f"{call} returned {shape}; expected a boolean mask of shape "
                                         f"{tuple(expected.shape)}, True where a query may look at a key.")
            got = got.bool()
            if torch.equal(got, expected):
                return Verdict("passed", "Correct: causal, and at most window keys per query, itself included.")
            row = int((got != expected).any(dim=-1).nonzero()[0])
            seen = f" (it allows {got[row].int().tolist()}, expected {expected[row].int().tolist()})" if values else ""
            mistake = off_by_one if any(torch.equal(got, w) for w in wrong) else None
            return Verdict("failed", f"{call}: row {row} is wrong{seen}.", mistake)

        return Prepared(ProbeCall.of(probes.probe_call, {"fn": self.object}, {"arguments": sizes}), judge_mask)


@dataclass(frozen=True)
class CacheBytesCheck:
    """``object(n_layers, n_kv_heads, head_dim, seq_len, batch, dtype)`` is the size of a KV
    cache in bytes, :func:`reference.kv_cache_bytes`."""

    object: str
    n_layers: int
    n_kv_heads: int
    head_dim: int
    seq_len: int
    batch: int
    dtype: str = "bfloat16"

    def prepare(self, generator: torch.Generator) -> Prepared:
        sizes = {"n_layers": self.n_layers, "n_kv_heads": self.n_kv_heads, "head_dim": self.head_dim,
                 "seq_len": self.seq_len, "batch": self.batch}
        expected = reference.kv_cache_bytes(**sizes, dtype=getattr(torch, self.dtype))
        call = f"{self.object}({', '.join(f'{k}={v}' for k, v in sizes.items())}, dtype=torch.{self.dtype})"

        def judge_bytes(record, value, values) -> Verdict:
            if not isinstance(value, (int, float)) or value != expected:
                why = " Count the keys and the values: two vectors per layer, head and token." \
                    if value == expected / 2 else ""
                shown = f" expected {expected}" if values else ""
                return Verdict("failed", f"{call} returned {value!r};{shown or ' not the size of that cache'}.{why}")
            return Verdict("passed", f"Correct: {expected} bytes.")

        return Prepared(ProbeCall.of(probes.probe_call, {"fn": self.object},
                                     {"arguments": {**sizes, "dtype": f"torch.{self.dtype}"}}), judge_bytes)
