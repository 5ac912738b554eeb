"""A prepared visible check, stored as values and loaded again, judges every answer as the check
prepared with the reference does: the right one passes, and a catalogued mistake fails with the
same message and the same name (transformer_lm/stored.py)."""

import torch

from transformer_lm import catalog, mistakes, reference, stored
from transformer_lm.kinds import AttentionCheck, attention_function_candidates, function_check
from transformer_lm.adapters import SELF_ATTENTION_V1
from transformer_lm.cases import AttentionCase


def attention(q, k, v, mask=None):
    return reference.scaled_dot_product_attention(q, k, v, mask).output


def attention_over_the_wrong_dimension(q, k, v, mask=None):
    return mistakes.flawed_attention(q, k, v, mask, catalog.BY_NAME["softmax_wrong_dim"].flaws)[0]


class SelfAttention_v1(torch.nn.Module):  # noqa: N801 - the notebook's name
    """Assignment 01's first attention class, as its answer writes it; ``dim`` is the softmax's."""

    dim = -1

    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query, self.W_key, self.W_value = (torch.nn.Parameter(torch.rand(d_in, d_out)) for _ in range(3))

    def forward(self, x):
        queries, keys, values = x @ self.W_query, x @ self.W_key, x @ self.W_value   # (T, d_out) each
        return torch.softmax(queries @ keys.T / keys.shape[-1] ** 0.5, dim=self.dim) @ values


class OverTheWrongDimension(SelfAttention_v1):
    dim = 0


def verdicts(prepared, namespace):
    verdict = prepared.judge_result(prepared.call.run_here(namespace), values=True)
    return verdict.status, verdict.message, verdict.mistake and verdict.mistake.name, verdict.hint


def test_a_stored_check_judges_as_the_prepared_one(tmp_path):
    generator = torch.Generator().manual_seed(0)
    inputs = {"q": torch.randn(2, 4, 3, generator=generator), "k": torch.randn(2, 5, 3, generator=generator),
              "v": torch.randn(2, 5, 6, generator=generator)}
    checks = {"attention": function_check("attention", attention, inputs, torch.randn(2, 4, 6, generator=generator),
                                          attention_function_candidates(inputs)),
              "self_attention_v1": AttentionCheck("SelfAttention_v1", SELF_ATTENTION_V1,
                                                  AttentionCase(batch=None, seq=4, d_in=3, d_out=2, bias=False)).prepare(generator)}
    stored.save(checks, tmp_path / "checks.safetensors")
    loaded = stored.load(tmp_path / "checks.safetensors")
    assert set(loaded) == set(checks)
    for answer in (attention, attention_over_the_wrong_dimension):
        live, kept = (verdicts(c["attention"], {"attention": answer}) for c in (checks, loaded))
        assert live == kept, (live, kept)
    for answer in (SelfAttention_v1, OverTheWrongDimension):
        live, kept = (verdicts(c["self_attention_v1"], {"SelfAttention_v1": answer}) for c in (checks, loaded))
        assert live == kept, (live, kept)
    assert verdicts(loaded["self_attention_v1"], {"SelfAttention_v1": SelfAttention_v1})[0] == "passed"
    assert verdicts(loaded["self_attention_v1"], {"SelfAttention_v1": OverTheWrongDimension})[2] == "softmax_wrong_dim"
    assert verdicts(loaded["attention"], {"attention": attention})[0] == "passed"
    assert verdicts(loaded["attention"], {"attention": attention_over_the_wrong_dimension})[2] == "softmax_wrong_dim"
