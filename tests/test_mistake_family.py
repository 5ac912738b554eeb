"""The public kinds API for a new concept: a MistakeFamily registers its mistakes, the generic
CallCheck and ModuleCheck configured with it name a wrong answer's mistake and pass right ones, and
a stored check carries a family's words to a kernel whose catalogue lacks them."""

import pytest
import torch

from transformer_lm import catalog, checks, stored
from transformer_lm.catalog import Mistake
from transformer_lm.instructor.kinds import CallCheck, ModuleCheck, judge_here
from transformer_lm.instructor.mistake_family import MistakeFamily

CUBE_SQUARED = Mistake("test_cube_squared", "squared instead of cubed", "x ** 3, not x ** 2.")
LINEAR_WITHOUT_BIAS = Mistake("test_linear_without_bias", "bias left out", "Add self.bias after the product.")

CUBE_MISTAKES = MistakeFamily({CUBE_SQUARED: lambda x: x ** 2,
                               Mistake("test_cube_of_positive", "negative inputs dropped", "Keep every input."):
                                   lambda x: None if bool((x >= 0).all()) else x.clamp(min=0) ** 3})
LINEAR_MISTAKES = MistakeFamily({LINEAR_WITHOUT_BIAS: lambda module, x: x @ module.weight.T})


def vector(generator):
    return {"x": torch.randn(6, generator=generator)}


def rows(generator):
    return {"x": torch.randn(4, 3, generator=generator)}


class Linear(torch.nn.Module):
    """A student's linear layer: the parameters named as torch.nn.Linear's."""

    def __init__(self, d_in, d_out, bias_used=True):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(d_out, d_in))
        self.bias = torch.nn.Parameter(torch.zeros(d_out))
        self.bias_used = bias_used

    def forward(self, x):
        return x @ self.weight.T + (self.bias if self.bias_used else 0)


class LinearWithoutBias(Linear):
    def __init__(self, d_in, d_out):
        super().__init__(d_in, d_out, bias_used=False)


def verdict(check, **namespace):
    return judge_here(check, namespace, torch.Generator().manual_seed(0))


def test_a_family_registers_its_mistakes_once_and_refuses_a_second_mistake_of_the_same_name():
    assert catalog.BY_NAME["test_cube_squared"] is CUBE_SQUARED
    MistakeFamily({CUBE_SQUARED: lambda x: x ** 2})  # the same mistake again: harmless
    with pytest.raises(ValueError, match="two different mistakes are named 'test_cube_squared'"):
        MistakeFamily({Mistake("test_cube_squared", "another title", "another hint"): lambda x: x})


def test_a_call_check_names_the_familys_mistake_and_passes_right_answers():
    check = CallCheck("cube", lambda x: x ** 3, vector, mistakes=CUBE_MISTAKES)
    assert verdict(check, cube=lambda x: x * x * x).status == "passed"
    assert verdict(check, cube=lambda x: torch.pow(x, 3)).status == "passed"
    wrong = verdict(check, cube=lambda x: x * x)
    assert wrong.status == "failed" and wrong.mistake is CUBE_SQUARED
    clamped = verdict(check, cube=lambda x: x.clamp(min=0) ** 3)
    assert clamped.status == "failed" and clamped.mistake.name == "test_cube_of_positive"


def test_a_twin_that_cannot_show_on_the_inputs_is_left_out():
    positive = CUBE_MISTAKES.records(torch.tensor([1.0, 2.0]))
    assert [mistake.name for mistake in positive] == ["test_cube_squared"]


def test_a_module_check_names_the_familys_mistake_and_passes_a_right_class():
    check = ModuleCheck("Linear", {"d_in": 3, "d_out": 2}, lambda: torch.nn.Linear(3, 2), rows,
                        mistakes=LINEAR_MISTAKES)
    assert verdict(check, Linear=Linear).status == "passed"
    wrong = verdict(check, Linear=LinearWithoutBias)
    assert wrong.status == "failed" and wrong.mistake is LINEAR_WITHOUT_BIAS


def test_a_stored_check_names_a_family_mistake_where_the_students_catalogue_lacks_it(tmp_path, monkeypatch):
    prepared = CallCheck("cube", lambda x: x ** 3, vector, mistakes=CUBE_MISTAKES).prepare(
        torch.Generator().manual_seed(0))
    stored.save({"cube": prepared}, tmp_path / "checks.safetensors", made_by="this test")
    monkeypatch.delitem(catalog.BY_NAME, "test_cube_squared")  # a student's kernel: the concept is not imported
    loaded = stored.load(tmp_path / "checks.safetensors")["cube"]
    named = loaded.judge_result(loaded.call.run_here({"cube": lambda x: x * x}), True)
    assert named.status == "failed" and named.mistake.title == "squared instead of cubed"
    assert "x ** 3, not x ** 2." in named.hint


ROWS_ONLY = Mistake("test_cube_of_rows_only", "written for rows only", "Index the last dimension with -1.")
ROWS_MISTAKES = MistakeFamily({ROWS_ONLY: lambda x: x[:, -1:] ** 3})


def test_a_twin_that_raises_names_its_mistake_by_the_error_a_stored_visible_check_meets_too(tmp_path):
    """On a vector, the twin of code written for rows raises an IndexError: it has no record, and
    a call that raises an IndexError there is named with its mistake, by the visible check read
    back from its stored file as by the check prepared here; other errors name nothing."""
    assert ROWS_MISTAKES.records(torch.ones(3)) == {}
    assert ROWS_MISTAKES.raised(torch.ones(3)) == {"IndexError": ROWS_ONLY}
    prepared = CallCheck("cube", lambda x: x ** 3, vector, mistakes=ROWS_MISTAKES).prepare(
        torch.Generator().manual_seed(0))
    stored.save({"cube": prepared}, tmp_path / "checks.safetensors", made_by="this test")
    loaded = stored.load(tmp_path / "checks.safetensors")["cube"]
    assert loaded.raised == {"IndexError": ROWS_ONLY}
    with pytest.raises(checks.CheckFailed) as named:
        checks.run("cube", loaded, {"cube": lambda x: x[:, -1:] ** 3})
    assert named.value.mistake is ROWS_ONLY and "Likely mistake: written for rows only." in str(named.value)
    with pytest.raises(checks.CheckFailed) as unnamed:
        checks.run("cube", loaded, {"cube": lambda x: x.view(2, 2) ** 3})
    assert unnamed.value.mistake is None and "raised RuntimeError" in str(unnamed.value)
