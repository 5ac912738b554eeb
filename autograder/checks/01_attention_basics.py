"""Hidden checks of assignment 01 (attention basics).

Shapes differ from the notebook's six tokens of width 3: longer and single-token
sequences, one head and several, with and without biases, dropout switched on but the
module in eval mode. Inputs come from the course's secret seed. The softmax has two checks:
ordinary scores with the gradient (a matrix, and a vector, which a softmax written for 2-D
scores only fails), and scores in the hundreds, where the naive exponential overflows.
"""

import torch

from autograder.reading.spec import Also, Item
from transformer_lm import catalog
from transformer_lm.instructor import adapters
from transformer_lm.instructor.mistakes import CONTEXT_VECTOR_MISTAKES, SOFTMAX_MISTAKES
from transformer_lm.instructor.cases import AttentionCase
from transformer_lm.forbidding import LIBRARY_ATTENTION, SOFTMAX
from transformer_lm.judging import Verdict
from transformer_lm.verdict_texts import render
from transformer_lm.instructor.kinds import (AttentionCheck, CallCheck, FactoryCheck, RaisesCheck, TransferCheck)


def scores_vectors(generator, rows, width, scale=1.0):
    return {"x": torch.randn(rows, width, generator=generator) * scale}


TEXTS = {
    "heads": "The wrapper has {heads:number} heads in .heads; the exercise keeps num_heads=2.",
    "width": "The outputs are {width:number}-dimensional; with 2 heads, each head's d_out must be 1.",
    "passed": "Two heads of width 1: 2-dimensional outputs.",
}
"""What the check of exercise 3.2 says (:mod:`transformer_lm.verdict_texts`)."""


def two_dimensional(record) -> Verdict:
    """Exercise 3.2: two heads whose concatenated outputs are 2-dimensional."""
    heads = sorted({name.split(".")[2] for name in record if name.startswith("shape.heads.")})
    width = record["output"].shape[-1]
    if len(heads) != 2:
        return Verdict("failed", render(TEXTS["heads"], heads=len(heads)))
    if width != 2:   # 2 heads of 2 features: d_out taken for the output's width, not each head's
        return Verdict("failed", render(TEXTS["width"], width=width),
                       catalog.BY_NAME["wrapper_width_not_per_head"] if width == 4 else None)
    return Verdict("passed", TEXTS["passed"])


ITEMS = [
    Item("softmax_stable", points=1, checks=(
        # ordinary scores, with the gradient: a matrix, then a vector (a softmax written for 2-D only)
        CallCheck("softmax_stable", lambda x: torch.softmax(x, dim=-1),
                  lambda g: scores_vectors(g, 4, 9), mistakes=SOFTMAX_MISTAKES),
        Also(CallCheck("softmax_stable", lambda x: torch.softmax(x, dim=-1),
                       lambda g: {"x": torch.randn(7, generator=g)}, mistakes=SOFTMAX_MISTAKES)),
        # scores in the hundreds: the naive exp overflows here
        CallCheck("softmax_stable", lambda x: torch.softmax(x, dim=-1),
                  lambda g: scores_vectors(g, 3, 5, scale=500.0), grad=False, mistakes=SOFTMAX_MISTAKES),
    ), forbids=SOFTMAX),
    Item("context_vectors", points=1, checks=(
        CallCheck("context_vectors", lambda x: torch.softmax(x @ x.T, dim=-1) @ x,
                  lambda g: scores_vectors(g, 8, 5), mistakes=CONTEXT_VECTOR_MISTAKES),
        CallCheck("context_vectors", lambda x: torch.softmax(x @ x.T, dim=-1) @ x,
                  lambda g: scores_vectors(g, 1, 4), mistakes=CONTEXT_VECTOR_MISTAKES),
    ), forbids=LIBRARY_ATTENTION),
    Item("self_attention_v1", points=1, checks=(
        AttentionCheck("SelfAttention_v1", adapters.SELF_ATTENTION_V1, AttentionCase(batch=None, seq=7, d_in=5,
                                                                                     d_out=4, bias=False)),
        AttentionCheck("SelfAttention_v1", adapters.SELF_ATTENTION_V1, AttentionCase(batch=None, seq=1, d_in=3,
                                                                                     d_out=2, bias=False)),
    ), forbids=LIBRARY_ATTENTION, defines=("SelfAttention_v1",)),
    Item("self_attention_v2", points=1, checks=(
        AttentionCheck("SelfAttention_v2", adapters.SELF_ATTENTION_V2, AttentionCase(batch=None, seq=7, d_in=5,
                                                                                     d_out=4, bias=False)),
        AttentionCheck("SelfAttention_v2", adapters.SELF_ATTENTION_V2, AttentionCase(batch=None, seq=3, d_in=6,
                                                                                     d_out=3, bias=True)),
        AttentionCheck("SelfAttention_v2", adapters.SELF_ATTENTION_V2, AttentionCase(batch=None, seq=1, d_in=2,
                                                                                     d_out=5, bias=False)),
    ), forbids=LIBRARY_ATTENTION, defines=("SelfAttention_v2",)),
    Item("transfer_weights", points=1, checks=(
        TransferCheck("transfer_weights", "SelfAttention_v2", adapters.SELF_ATTENTION_V2,
                      "SelfAttention_v1", adapters.SELF_ATTENTION_V1, AttentionCase(batch=None, seq=6, d_in=4, d_out=4,
                                                                                    bias=False)),
    ), builds_on=("self_attention_v1", "self_attention_v2")),
    Item("causal_attention", points=1, checks=(
        AttentionCheck("CausalAttention", adapters.CAUSAL_ATTENTION,
                       AttentionCase(batch=3, seq=7, d_in=5, d_out=4, causal=True, bias=False, context_length=9)),
        AttentionCheck("CausalAttention", adapters.CAUSAL_ATTENTION,
                       AttentionCase(batch=2, seq=1, d_in=3, d_out=2, causal=True, bias=True)),
        AttentionCheck("CausalAttention", adapters.CAUSAL_ATTENTION,
                       AttentionCase(batch=2, seq=5, d_in=4, d_out=5, causal=True, bias=False, dropout=0.5)),
    ), forbids=LIBRARY_ATTENTION, defines=("CausalAttention",)),
    Item("multihead_wrapper", points=1, checks=(
        AttentionCheck("MultiHeadAttentionWrapper", adapters.MULTI_HEAD_ATTENTION_WRAPPER,
                       AttentionCase(batch=2, seq=6, d_in=5, d_out=6, num_heads=3, causal=True, bias=False,
                                     context_length=8)),
        AttentionCheck("MultiHeadAttentionWrapper", adapters.MULTI_HEAD_ATTENTION_WRAPPER,
                       AttentionCase(batch=1, seq=4, d_in=3, d_out=2, num_heads=1, causal=True, bias=True)),
    ), forbids=LIBRARY_ATTENTION, defines=("MultiHeadAttentionWrapper",), builds_on=("causal_attention",)),
    Item("two_dim_wrapper", points=1, checks=(
        FactoryCheck("two_dim_wrapper", {"d_in": 5, "context_length": 7}, input_shape=(2, 7, 5),
                     judge_record=two_dimensional),
    ), builds_on=("multihead_wrapper",)),
    Item("multihead_attention", points=2, checks=(
        AttentionCheck("MultiHeadAttention", adapters.MULTI_HEAD_ATTENTION,
                       AttentionCase(batch=2, seq=6, d_in=5, d_out=8, num_heads=4, causal=True, bias=False,
                                     out_proj=True,
                                     context_length=10)),
        AttentionCheck("MultiHeadAttention", adapters.MULTI_HEAD_ATTENTION,
                       AttentionCase(batch=3, seq=5, d_in=4, d_out=6, num_heads=1, causal=True, bias=True,
                                     out_proj=True)),
        AttentionCheck("MultiHeadAttention", adapters.MULTI_HEAD_ATTENTION,
                       AttentionCase(batch=1, seq=1, d_in=3, d_out=6, num_heads=3, causal=True, bias=False,
                                     out_proj=True)),
        AttentionCheck("MultiHeadAttention", adapters.MULTI_HEAD_ATTENTION,
                       AttentionCase(batch=2, seq=4, d_in=3, d_out=4, num_heads=1, causal=True, bias=False,
                                     out_proj=True, dropout=0.5)),
        RaisesCheck("MultiHeadAttention", {"d_in": 3, "d_out": 7, "context_length": 4, "dropout": 0.0,
                                           "num_heads": 2}, mistake="heads_not_checked"),
    ), forbids=LIBRARY_ATTENTION),
]
