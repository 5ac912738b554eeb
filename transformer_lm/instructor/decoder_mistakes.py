"""What the catalogued mistakes of today's decoders compute (assignment 06): twins of the
reference's rotary embeddings, grouped-query attention, masks, left padding and generation, each
with :class:`transformer_lm.flaws.DecoderFlaws` switching one step to a student's mistake. Part of
:mod:`transformer_lm.instructor.mistakes`, which the checks read them from."""

from __future__ import annotations

import torch

from transformer_lm.flaws import DecoderFlaws
from transformer_lm.instructor import reference


def flawed_apply_rope(x: torch.Tensor, positions: torch.Tensor, base: float, flaws: DecoderFlaws) -> torch.Tensor:
    """:func:`transformer_lm.instructor.reference.apply_rope` as a student might write it: pairs interleaved,
    or frequencies with the exponent off."""
    d = x.shape[-1]
    exponents = torch.arange(0, d, 2, dtype=torch.float64) / d if flaws.rope_exponent == "2i/d" \
        else torch.arange(d // 2, dtype=torch.float64) / d
    angles = positions.to(torch.float64).unsqueeze(-1) * base ** -exponents   # (..., T, d/2)
    if positions.dim() == 2 and x.dim() == 4:
        angles = angles.unsqueeze(1)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    if flaws.rope_interleaved:
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)
    return x * torch.cat((cos, cos), dim=-1) + reference.rotate_half(x) * torch.cat((sin, sin), dim=-1)


def flawed_repeat_kv(x: torch.Tensor, repeats: int, flaws: DecoderFlaws) -> torch.Tensor:
    """:func:`transformer_lm.instructor.reference.repeat_kv` as a student might write it."""
    return x.repeat(1, repeats, 1, 1) if flaws.kv_repeat == "repeat" else reference.repeat_kv(x, repeats)


def flawed_sliding_window_mask(query_len: int, key_len: int, window: int, flaws: DecoderFlaws) -> torch.Tensor:
    """:func:`transformer_lm.instructor.reference.sliding_window_mask` with the window off by ``window_offset``."""
    return reference.sliding_window_mask(query_len, key_len, window=window + flaws.window_offset)


def flawed_kv_cache_bytes(sizes: dict[str, int], dtype: torch.dtype, flaws: DecoderFlaws) -> int:
    """:func:`transformer_lm.instructor.reference.kv_cache_bytes` of ``sizes`` as a student might count
    it: the keys or the values only (``cache_keys_only``), half the cache."""
    size = reference.kv_cache_bytes(**sizes, dtype=dtype)
    return size // 2 if flaws.cache_keys_only else size


def flawed_padding(attention_mask: torch.Tensor, query_len: int | None, flaws: DecoderFlaws):
    """The positions ``(B, T)`` and the mask ``(B, 1, query_len, T_k)`` of a left-padded batch as a
    student might make them."""
    key_len = attention_mask.shape[-1]
    positions = torch.arange(key_len).expand(attention_mask.shape) if flaws.positions_from_padding \
        else reference.left_padded_positions(attention_mask)
    mask = reference.causal_mask(query_len or key_len, key_len)[None, None].expand(
        attention_mask.shape[0], 1, -1, -1) if flaws.pads_attended else reference.padded_causal_mask(attention_mask,
                                                                                                      query_len)
    return positions, mask


def flawed_layer_mask(module: reference.GroupedQueryAttention, query_len: int, key_len: int,
                      flaws: DecoderFlaws) -> torch.Tensor:
    """The mask a layer makes itself when it is given none, for its ``query_len`` new queries among
    ``key_len`` keys (a cache before them), as a student might make it: causal, or within the
    layer's window, aligned to the last queries, or (``causal_from_first_query``,
    ``window_from_first_query``) to the first, as if there were no cache."""
    if module.window is None:
        if flaws.causal_from_first_query:
            return torch.ones(query_len, key_len, dtype=torch.bool).tril()
        return reference.causal_mask(query_len, key_len)
    if flaws.window_from_first_query:
        return flawed_sliding_window_mask(key_len, key_len, module.window, flaws)[:query_len]
    return flawed_sliding_window_mask(query_len, key_len, module.window, flaws)


def flawed_grouped_query_attention(module: reference.GroupedQueryAttention, x: torch.Tensor, positions: torch.Tensor,
                                   attn_mask: torch.Tensor | None, flaws: DecoderFlaws,
                                   cache: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """The output of ``module`` (the reference's weights) as a student's forward with ``flaws``
    computes it (rotary embeddings, the sharing of key/value heads, rows with no key to see, the
    mask it makes itself), after the keys and values of ``cache`` where there is one."""
    q = flawed_apply_rope(reference.split_heads(module.q_proj(x), module.n_heads), positions, module.rope_base, flaws)
    k = flawed_apply_rope(reference.split_heads(module.k_proj(x), module.n_kv_heads), positions, module.rope_base,
                          flaws)
    v = reference.split_heads(module.v_proj(x), module.n_kv_heads)
    if cache is not None:
        k, v = torch.cat((cache[0], k), dim=-2), torch.cat((cache[1], v), dim=-2)
    repeats = module.n_heads // module.n_kv_heads
    if attn_mask is None:
        attn_mask = flawed_layer_mask(module, x.shape[-2], k.shape[-2], flaws)
    scores = reference.apply_mask(reference.attention_scores(q, flawed_repeat_kv(k, repeats, flaws)), attn_mask)
    weights = torch.softmax(scores, dim=-1) if flaws.empty_rows_nan else reference.masked_softmax(scores)
    return module.o_proj(reference.merge_heads(weights @ flawed_repeat_kv(v, repeats, flaws)))


def flawed_cached_outputs(module: reference.GroupedQueryAttention, x: torch.Tensor, positions: torch.Tensor,
                          prefix: int, flaws: DecoderFlaws) -> torch.Tensor:
    """The outputs of ``module`` on ``x`` ``(B, T, d_model)`` run as a decoder runs it with a KV
    cache: the first ``prefix`` tokens, then one token per call, each at the position a student's
    code gives it (``cache_positions_from_zero``: 0, as if nothing were cached)."""
    outputs, cache = [], None
    for start, stop in [(0, prefix)] + [(t, t + 1) for t in range(prefix, x.shape[-2])]:
        where = positions[..., start:stop]
        if flaws.cache_positions_from_zero and start:
            where = where - where[..., :1]
        out, cache = module(x[:, start:stop], where, None, cache)
        outputs.append(out)
    return torch.cat(outputs, dim=-2)


def flawed_padded_inputs(flaws: DecoderFlaws):
    """:func:`transformer_lm.instructor.reference.padded_inputs` as a student might write it: positions counted
    from the padding, pads left unmasked, or the positions after the cache starting at 0."""
    def inputs(attention_mask: torch.Tensor, query_len: int):
        total = attention_mask.shape[-1]
        positions, mask = flawed_padding(attention_mask, query_len, flaws)
        positions = positions[:, -query_len:]
        if flaws.cache_positions_from_zero and query_len < total:   # a call after the cache
            positions = torch.arange(query_len).expand(attention_mask.shape[0], -1)
        return positions, mask
    return inputs


@torch.no_grad()
def generate_padded_without_cache(model: torch.nn.Module, prompts: list[list[int]], max_new_tokens: int,
                                  pad_id: int = 0) -> list[list[int]]:
    """Greedy generation of a left-padded batch that runs the whole batch again at every step, with
    no cache: what each step computes again is every earlier token."""
    sequences = [list(prompt) for prompt in prompts]
    for _ in range(max_new_tokens):
        longest = max(len(sequence) for sequence in sequences)
        idx = torch.tensor([[pad_id] * (longest - len(s)) + s for s in sequences])                 # (B, T)
        attention_mask = torch.tensor([[0] * (longest - len(s)) + [1] * len(s) for s in sequences])   # (B, T)
        positions, mask = reference.padded_inputs(attention_mask, longest)
        logits, _ = model(idx, positions, mask)                                                       # (B, T, vocab)
        for sequence, token in zip(sequences, logits[:, -1].argmax(dim=-1).tolist()):
            sequence.append(token)
    return sequences


def flawed_generate_padded(model: torch.nn.Module, prompts: list[list[int]], max_new_tokens: int,
                           flaws: DecoderFlaws) -> list[list[int]]:
    """:func:`transformer_lm.instructor.reference.generate_padded` as a student might write it: its
    positions and masks made with ``flaws``, or (``reruns_sequence``) the whole batch run again at
    every step."""
    if flaws.reruns_sequence:
        return generate_padded_without_cache(model, prompts, max_new_tokens)
    return reference.generate_padded(model, prompts, max_new_tokens, inputs=flawed_padded_inputs(flaws))
