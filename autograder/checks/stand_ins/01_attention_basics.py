"""The course's classes of assignment 01, in the assignment's API, built on the reference.

When an answer is wrong, an item that only builds on it (the wrapper on ``CausalAttention``,
the weight transfer on both ``SelfAttention`` classes) is graded with these in its place, so
that one mistake costs points once. They run in the sandbox, after every check of the
student's own code, and only there (see :mod:`autograder.running.harness`).
"""

import torch
from torch import nn

from transformer_lm.instructor import reference


def _attend(q, k, v, allowed, dropout: nn.Dropout):
    """The reference's attention, with the module's dropout on the weights in training mode."""
    rate = dropout.p if dropout.training else 0.0
    return reference.scaled_dot_product_attention(q, k, v, allowed, dropout_p=rate).output


class SelfAttention_v1(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.d_out = d_out
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        return reference.scaled_dot_product_attention(x @ self.W_query, x @ self.W_key, x @ self.W_value).output


class SelfAttention_v2(nn.Module):
    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.d_out = d_out
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):
        return reference.scaled_dot_product_attention(self.W_query(x), self.W_key(x), self.W_value(x)).output


class CausalAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.d_out = d_out
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", ~reference.causal_mask(context_length))

    def forward(self, x):
        tokens = x.shape[1]
        allowed = ~self.mask[:tokens, :tokens]
        return _attend(self.W_query(x), self.W_key(x), self.W_value(x), allowed, self.dropout)


class MultiHeadAttentionWrapper(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList(
            [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for _ in range(num_heads)])

    def forward(self, x):
        return torch.cat([head(x) for head in self.heads], dim=-1)
