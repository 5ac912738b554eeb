"""The course's ``my_attention`` and ``MultiheadedSelfAttention`` of assignment 03, in the
assignment's API, built on the reference: the later items that build on them are graded with
these in place of a wrong answer, so that one mistake costs points once (see
:mod:`autograder.running.harness`)."""

import torch
from torch import nn

from transformer_lm.instructor import reference


def my_attention(q, k, v, attn_mask=None):
    return reference.scaled_dot_product_attention(q, k, v, attn_mask).output


class MultiheadedSelfAttention(nn.Module):
    def __init__(self, model_dim, num_heads):
        super().__init__()
        if model_dim % num_heads != 0:
            raise ValueError(f"model_dim={model_dim} is not divisible by num_heads={num_heads}")
        self.model_dim, self.num_heads, self.head_dim = model_dim, num_heads, model_dim // num_heads
        self.q_proj = nn.Linear(model_dim, model_dim)
        self.k_proj = nn.Linear(model_dim, model_dim)
        self.v_proj = nn.Linear(model_dim, model_dim)
        self.out_proj = nn.Linear(model_dim, model_dim)

    def forward(self, input, attn_mask=None):
        weights = reference.AttentionWeights(self.q_proj.weight, self.k_proj.weight, self.v_proj.weight,
                                             self.q_proj.bias, self.k_proj.bias, self.v_proj.bias,
                                             self.out_proj.weight, self.out_proj.bias)
        return reference.multi_head_attention(input, weights, self.num_heads, attn_mask=attn_mask).output

    def load_from_torch(self, mha):
        weights = mha.in_proj_weight.chunk(3, dim=0)
        biases = mha.in_proj_bias.chunk(3, dim=0)
        with torch.no_grad():
            for layer, weight, bias in zip((self.q_proj, self.k_proj, self.v_proj), weights, biases):
                layer.weight.copy_(weight)
                layer.bias.copy_(bias)
            self.out_proj.weight.copy_(mha.out_proj.weight)
            self.out_proj.bias.copy_(mha.out_proj.bias)
