"""A prepared visible check, stored as values and loaded again, judges every answer as the check
prepared with the reference does: the right one passes, and a catalogued mistake fails with the
same message and the same name (transformer_lm/stored.py); a judge that is not data is refused."""

import pytest
import torch

from transformer_lm import catalog, stored
from transformer_lm.instructor import mistakes, reference
from transformer_lm.instructor.adapters import SELF_ATTENTION_V1
from transformer_lm.instructor.cases import AttentionCase
from transformer_lm.instructor.kinds import AttentionCheck, FactoryCheck, ParametersCheck, RaisesCheck, function_check
from transformer_lm.instructor.mistakes import ATTENTION_FUNCTION_MISTAKES


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


class Unchecked(SelfAttention_v1):
    """Builds with any sizes, where the check wants a ValueError for a d_out of 0."""

    def __init__(self, d_in, d_out):
        super().__init__(d_in, d_out)


class Checked(SelfAttention_v1):
    def __init__(self, d_in, d_out):
        if d_out < 1:
            raise ValueError(f"d_out={d_out} must be at least 1")
        super().__init__(d_in, d_out)


def verdicts(prepared, namespace):
    verdict = prepared.judge_result(prepared.call.run_here(namespace), values=True)
    return verdict.status, verdict.message, verdict.mistake and verdict.mistake.name, verdict.hint


def test_a_stored_check_judges_as_the_prepared_one(tmp_path):
    generator = torch.Generator().manual_seed(0)
    inputs = {"q": torch.randn(2, 4, 3, generator=generator), "k": torch.randn(2, 5, 3, generator=generator),
              "v": torch.randn(2, 5, 6, generator=generator)}
    checks = {"attention": function_check("attention", attention, inputs, torch.randn(2, 4, 6, generator=generator),
                                          ATTENTION_FUNCTION_MISTAKES.records(*inputs.values())),
              "self_attention_v1": AttentionCheck("SelfAttention_v1", SELF_ATTENTION_V1,
                                                  AttentionCase(batch=None, seq=4, d_in=3, d_out=2,
                                                                bias=False)).prepare(generator),
              "parameters": ParametersCheck("SelfAttention_v1", {"d_in": 3, "d_out": 2},
                                            {"W_query": (3, 2), "W_key": (3, 2), "W_value": (3, 2)}).prepare(generator),
              "raises": RaisesCheck("SelfAttention_v1", {"d_in": 3, "d_out": 0}).prepare(generator)}
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
    for name, answer, status in (("parameters", SelfAttention_v1, "passed"), ("parameters", Unchecked, "passed"),
                                 ("raises", Checked, "passed"), ("raises", Unchecked, "failed")):
        live, kept = (verdicts(c[name], {"SelfAttention_v1": answer}) for c in (checks, loaded))
        assert live == kept and kept[0] == status, (name, live, kept)
    assert verdicts(loaded["attention"], {"attention": attention})[0] == "passed"
    assert verdicts(loaded["attention"], {"attention": attention_over_the_wrong_dimension})[2] == "softmax_wrong_dim"


def test_a_judge_that_is_code_is_not_stored(tmp_path):
    check = FactoryCheck("make", {}, input_shape=(1, 2, 3),
                         judge_record=lambda record: None).prepare(torch.Generator().manual_seed(0))
    with pytest.raises(TypeError, match="cannot be stored"):
        stored.save({"factory": check}, tmp_path / "checks.safetensors")
