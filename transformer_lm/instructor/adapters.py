"""How each assignment's classes map onto the reference.

Every assignment keeps the API of the material it comes from: its own constructor
arguments, parameter names and layouts. An :class:`~transformer_lm.checks.AttentionAPI`
here says, for one class, how to build it for a test case, which of its parameters holds
which reference weight, and how to call it. Visible checks (in the notebooks) and hidden
checks (in ``autograder/checks``) both use these, so the two can never disagree on an API.
"""

from __future__ import annotations

import torch

from transformer_lm.instructor.cases import AttentionAPI, AttentionCase
from transformer_lm.instructor.reference import AttentionWeights


def _linear(prefix: str, weight: torch.Tensor | None, bias: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """An ``nn.Linear``'s parameters under ``prefix``."""
    if weight is None:
        raise ValueError(f"this class has a layer {prefix!r}; test it with AttentionCase(..., out_proj=True)")
    state = {f"{prefix}.weight": weight}
    if bias is not None:
        state[f"{prefix}.bias"] = bias
    return state


def _projections(w: AttentionWeights, names: tuple[str, str, str]) -> dict[str, torch.Tensor]:
    """Query, key and value ``nn.Linear`` layers under the given names."""
    query, key, value = names
    return {**_linear(query, w.w_query, w.b_query), **_linear(key, w.w_key, w.b_key),
            **_linear(value, w.w_value, w.b_value)}


def _head_slices(w: AttentionWeights, case: AttentionCase) -> dict[str, torch.Tensor]:
    """One ``CausalAttention`` per head, in ``heads.<i>``, each holding its slice of the weights."""
    size = case.d_out // case.num_heads
    state = {}
    for head in range(case.num_heads):
        part = w.map(lambda t, h=head: t[h * size:(h + 1) * size])
        state.update({f"heads.{head}.{name}": t
                      for name, t in _projections(part, ("W_query", "W_key", "W_value")).items()})
    return state


def _context(case: AttentionCase) -> int:
    return case.context_length or case.seq


# Assignment 01 (Raschka, chapter 3): from dot products to multi-head attention ------------------

NAMES_01 = {"batch": "b", "seq": "num_tokens", "d_out": "d_out", "num_heads": "num_heads", "head_dim": "head_dim"}

SELF_ATTENTION_V1 = AttentionAPI(
    init=lambda c: {"d_in": c.d_in, "d_out": c.d_out},
    state=lambda w, c: {"W_query": w.w_query.T, "W_key": w.w_key.T, "W_value": w.w_value.T},
    names=NAMES_01,
)

SELF_ATTENTION_V2 = AttentionAPI(
    init=lambda c: {"d_in": c.d_in, "d_out": c.d_out, "qkv_bias": c.bias},
    state=lambda w, c: _projections(w, ("W_query", "W_key", "W_value")),
    names=NAMES_01,
)

CAUSAL_ATTENTION = AttentionAPI(
    init=lambda c: {"d_in": c.d_in, "d_out": c.d_out, "context_length": _context(c), "dropout": c.dropout,
                    "qkv_bias": c.bias},
    state=lambda w, c: _projections(w, ("W_query", "W_key", "W_value")),
    names=NAMES_01,
)

MULTI_HEAD_ATTENTION_WRAPPER = AttentionAPI(
    init=lambda c: {"d_in": c.d_in, "d_out": c.d_out // c.num_heads, "context_length": _context(c),
                    "dropout": c.dropout, "num_heads": c.num_heads, "qkv_bias": c.bias},
    state=_head_slices,
    names=NAMES_01,
)

MULTI_HEAD_ATTENTION = AttentionAPI(
    init=lambda c: {"d_in": c.d_in, "d_out": c.d_out, "context_length": _context(c), "dropout": c.dropout,
                    "num_heads": c.num_heads, "qkv_bias": c.bias},
    state=lambda w, c: {**_projections(w, ("W_query", "W_key", "W_value")),
                        **_linear("out_proj", w.w_out, w.b_out)},
    names=NAMES_01,
)

# Assignment 02 (the UMass Lowell homework): SelfAttention and MultiHeadSelfAttention ------------------

NAMES_02 = {"batch": "bs", "seq": "seq", "d_out": "hidden", "num_heads": "self.num_heads", "head_dim": "self.head_size"}

SELF_ATTENTION = AttentionAPI(
    init=lambda c: {"input_size": c.d_in, "hidden": c.d_out},
    state=lambda w, c: _projections(w, ("q", "k", "v")),
    names=NAMES_02,
)

MULTI_HEAD_SELF_ATTENTION = AttentionAPI(
    init=lambda c: {"input_size": c.d_in, "hidden": c.d_out, "num_heads": c.num_heads, "causal": c.causal,
                    "dropout": c.dropout},
    state=lambda w, c: {**_projections(w, ("q", "k", "v")), **_linear("mix", w.w_out, w.b_out)},
    call_kwargs=lambda c: {"return_attention": True},
    weights_layout=lambda probs, c: probs.flatten(0, 1),
    names=NAMES_02,
)


# Assignment 03 (the in-class activity): PyTorch's own layers, whose weights students load ---------

NAMES_03 = {"batch": "batch", "seq": "seq", "d_out": "self.model_dim", "num_heads": "self.num_heads",
            "head_dim": "self.head_dim"}

SELF_ATTENTION_HEAD = AttentionAPI(
    # Q, K: model_dim -> qk_dim; V: model_dim -> model_dim. Cases set d_in = d_value = model_dim, d_out = qk_dim.
    init=lambda c: {"model_dim": c.d_in, "qk_dim": c.d_out},
    state=lambda w, c: _projections(w, ("Q", "K", "V")),
    mask_arg="mask",
    names=NAMES_03,
)

MULTIHEADED_SELF_ATTENTION = AttentionAPI(
    # forward(input, attn_mask=None), the mask in F.scaled_dot_product_attention's convention.
    init=lambda c: {"model_dim": c.d_out, "num_heads": c.num_heads},
    mask_arg="attn_mask",
    names=NAMES_03,
)


def multihead_attention_state(w: AttentionWeights) -> dict[str, torch.Tensor]:
    """``nn.MultiheadAttention``'s state for reference weights: one ``in_proj`` for q, k, v."""
    return {"in_proj_weight": torch.cat([w.w_query, w.w_key, w.w_value]),
            "in_proj_bias": torch.cat([w.b_query, w.b_key, w.b_value]),
            "out_proj.weight": w.w_out, "out_proj.bias": w.b_out}


def encoder_layer_state(block) -> dict[str, torch.Tensor]:
    """``nn.TransformerEncoderLayer``'s state for a reference :class:`~transformer_lm.instructor.reference.Block`
    (the same computation: self-attention, feed-forward, two LayerNorms)."""
    attn = block.attn
    return {
        **{f"self_attn.{k}": v for k, v in multihead_attention_state(attn.attention_weights()).items()},
        "linear1.weight": block.mlp[0].weight, "linear1.bias": block.mlp[0].bias,
        "linear2.weight": block.mlp[2].weight, "linear2.bias": block.mlp[2].bias,
        "norm1.weight": block.ln1.weight, "norm1.bias": block.ln1.bias,
        "norm2.weight": block.ln2.weight, "norm2.bias": block.ln2.bias,
    }


# Assignment 04: minGPT ---------------------------------------------------------

def mingpt_config(case: AttentionCase) -> dict:
    """minGPT's config (as a dict; the probe makes it an object) for an attention case."""
    return {"n_embd": case.d_out, "n_head": case.num_heads, "block_size": _context(case), "vocab_size": 11,
            "n_layer": 1, "attn_pdrop": case.dropout, "resid_pdrop": case.dropout}


MINGPT_ATTENTION = AttentionAPI(
    init=lambda c: {"config": mingpt_config(c)},
    state=lambda w, c: {**_projections(w, ("query", "key", "value")), **_linear("proj", w.w_out, w.b_out)},
    names={"batch": "B", "seq": "T", "d_out": "C", "num_heads": "self.n_head", "head_dim": "hs"},
)
