"""Hidden checks of assignment 03 (attention in PyTorch, from a function to a Transformer layer).

Shapes differ from the notebook's: queries over more or fewer keys, a single query and key,
2-D inputs, batches and batches of heads, masks that broadcast over the batch, a single head
and single-token sequences, both orders of the LayerNorms, and dropout switched on with the
layer in eval mode. Every check compares gradients too. Inputs come from the course's secret
seed; no mask ever blocks a whole row (the notebook does not ask for that case).

A case wrapped in ``Also`` is one more case of the check before it (the same purpose on other
inputs), so that each item's checks are what some catalogued mistake fails alone (the audit
holds this): the attention's values on several tokens, without a mask, with a boolean one and
with a float one, which a mask filled with 0 or a float mask ignored fails alone; the sizes of
one (one token, one query over one key, heads of width 1), where a ``.squeeze()`` loses a
dimension; and for the decoder layer each order of the LayerNorms, with dropout off and with
dropout in eval mode, which ``F.dropout`` left on in that order fails alone.
"""

import torch

from autograder.reading.spec import Also, Item
from transformer_lm.instructor import adapters, reference
from transformer_lm.instructor.cases import AttentionCase, BlockCase
from transformer_lm.forbidding import LIBRARY_ATTENTION
from transformer_lm.instructor.kinds import (AttentionCheck, CallCheck, DecoderLoadCheck, MultiheadLoadCheck)
from transformer_lm.instructor.mistakes import ATTENTION_FUNCTION_MISTAKES


def reference_attention(q, k, v, attn_mask=None):
    return reference.scaled_dot_product_attention(q, k, v, attn_mask).output


def attention_inputs(lead, len_q, len_k, d, d_v, mask=None, mask_lead=()):
    """``inputs`` for :class:`CallCheck`: q, k, v with leading dims ``lead`` and, with
    ``mask`` "bool" or "float", a mask of shape ``(*mask_lead, len_q, len_k)`` that keeps at
    least one key for every query (the float one also carries finite biases)."""
    def make(generator):
        inputs = {"q": torch.randn(*lead, len_q, d, generator=generator),
                  "k": torch.randn(*lead, len_k, d, generator=generator),
                  "v": torch.randn(*lead, len_k, d_v, generator=generator)}
        if mask is not None:
            shape = (*mask_lead, len_q, len_k)
            keep = torch.rand(shape, generator=generator) < 0.6
            rows = keep.view(-1, len_k)
            rows[torch.arange(rows.shape[0]), torch.randint(len_k, (rows.shape[0],), generator=generator)] = True
            if mask == "bool":
                inputs["attn_mask"] = keep
            else:
                inputs["attn_mask"] = torch.randn(shape, generator=generator).masked_fill(~keep, float("-inf"))
        return inputs
    return make


def attention_function(lead, len_q, len_k, d, d_v, mask=None, mask_lead=()):
    return CallCheck("my_attention", reference_attention, attention_inputs(lead, len_q, len_k, d, d_v, mask, mask_lead),
                     mistakes=ATTENTION_FUNCTION_MISTAKES)


def head(batch, seq, model_dim, qk_dim, mask=None):
    return AttentionCheck("SelfAttentionHead", adapters.SELF_ATTENTION_HEAD,
                          AttentionCase(batch=batch, seq=seq, d_in=model_dim, d_out=qk_dim, d_value=model_dim,
                                        mask=mask))


def multihead(batch, seq, model_dim, num_heads, mask=None):
    return MultiheadLoadCheck("MultiheadedSelfAttention", adapters.MULTIHEADED_SELF_ATTENTION,
                              AttentionCase(batch=batch, seq=seq, d_in=model_dim, d_out=model_dim, num_heads=num_heads,
                                            bias=True, out_proj=True, mask=mask))


def decoder(batch, seq, model_dim, num_heads, ff_dim, norm_first, dropout=0.0):
    init = {"model_dim": model_dim, "num_heads": num_heads, "ff_dim": ff_dim, "dropout": dropout,
            "norm_first": norm_first}
    return DecoderLoadCheck("TransformerDecoderLayer", init,
                            BlockCase(batch=batch, seq=seq, model_dim=model_dim, num_heads=num_heads, ff_dim=ff_dim,
                                      norm_first=norm_first))


ITEMS = [
    Item("my_attention", points=3, checks=(
        attention_function((), 5, 8, 4, 3),                                   # 2-D, more keys than queries
        Also(attention_function((3,), 6, 6, 8, 5, mask="bool")),               # a batch, one mask for all
        Also(attention_function((2, 3), 4, 7, 3, 6, mask="float")),            # a batch of heads, biases and -inf
        Also(attention_function((), 7, 3, 5, 4, mask="float")),                # 2-D, fewer keys than queries
        Also(attention_function((2,), 3, 5, 4, 2, mask="bool", mask_lead=(2,))),     # a mask per batch entry
        Also(attention_function((2, 2), 6, 4, 6, 3, mask="bool", mask_lead=(2, 1))),  # a mask per sequence
        attention_function((), 1, 1, 2, 1, mask="bool"),                       # one query, one key, values of width 1
    ), forbids=LIBRARY_ATTENTION, defines=("my_attention",)),
    Item("self_attention_head", points=2, checks=(
        head(3, 6, 8, 4),                          # qk_dim narrower than model_dim
        Also(head(2, 5, 6, 6, mask="bool")),
        Also(head(None, 4, 5, 7, mask="float")),   # one sequence, qk_dim wider than model_dim
        head(2, 1, 4, 2, mask="bool"),             # a single token
    ), forbids=LIBRARY_ATTENTION, builds_on=("my_attention",)),
    Item("multiheaded_self_attention", points=3, checks=(
        multihead(2, 7, 12, 3),
        Also(multihead(3, 5, 8, 2, mask="bool")),
        Also(multihead(2, 6, 6, 1, mask="float")),   # a single head
        multihead(1, 1, 8, 4, mask="bool"),          # a single token
        Also(multihead(2, 4, 8, 8)),                 # heads of width 1
    ), forbids=LIBRARY_ATTENTION, defines=("MultiheadedSelfAttention",), builds_on=("my_attention",)),
    Item("transformer_decoder_layer", points=2, checks=(
        decoder(2, 6, 12, 3, 20, norm_first=False),
        Also(decoder(2, 4, 6, 2, 10, norm_first=False, dropout=0.2)),   # dropout must do nothing in eval mode
        decoder(3, 5, 8, 2, 16, norm_first=True),
        Also(decoder(2, 7, 8, 1, 12, norm_first=True, dropout=0.2)),
        decoder(1, 1, 8, 1, 8, norm_first=False),                       # a single token, a single head
    ), forbids=LIBRARY_ATTENTION, builds_on=("multiheaded_self_attention",)),
]
