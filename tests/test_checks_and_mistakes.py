"""Every catalogued mistake is caught by the checks and named; the seed 000 fingerprints hold."""

import nbformat
import pytest
import torch
import torch.nn as nn
from safetensors import safe_open
from safetensors.torch import load_file

import notebook_tools as tools
from float_tolerance import ACROSS_MACHINES, PUBLIC_VALUES, assert_same
from live_checks import check_here
from transformer_lm import catalog, checks
from transformer_lm.instructor import adapters, make_test_values, mistakes, reference, visible_checks
from transformer_lm.instructor.cases import AttentionCase, make_case_tensors
from transformer_lm.flaws import DecoderFlaws, Flaws, GenerationFlaws
from transformer_lm.instructor.gpt_kinds import sampling_check
from transformer_lm.instructor.kinds import AttentionCheck, RaisesCheck

# A case that can reveal every mistake: several heads, a causal mask, an output projection.
REVEALING = AttentionCase(batch=2, seq=5, d_in=6, d_out=8, num_heads=2, causal=True, out_proj=True)


class Flawed(nn.Module):
    """A student-like multi-head attention with A02's API whose forward has one mistake."""

    flaws = Flaws()

    def __init__(self, input_size, hidden, num_heads, causal=False, dropout=0.0):
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(input_size, hidden) for _ in range(3))
        self.mix = nn.Linear(hidden, hidden)
        self.num_heads, self.causal = num_heads, causal

    def forward(self, x, return_attention=False):
        weights = reference.AttentionWeights(self.q.weight, self.k.weight, self.v.weight, self.q.bias,
                                             self.k.bias, self.v.bias, self.mix.weight, self.mix.bias)
        out, probs = mistakes.flawed_multi_head_attention(x, weights, self.num_heads, self.flaws, causal=self.causal)
        return (out, probs.flatten(0, 1)) if return_attention else out


def with_flaws(flaws):
    return type("Flawed", (Flawed,), {"flaws": flaws})


def test_no_flaws_is_exactly_the_reference():
    case = REVEALING
    tensors = make_case_tensors(case, torch.Generator().manual_seed(0))
    ours, probs = mistakes.flawed_multi_head_attention(tensors.x, tensors.weights, 2, causal=True)
    att = reference.multi_head_attention(tensors.x, tensors.weights, 2, causal=True)
    assert_same(ours, att.output, "output")
    assert_same(probs, att.weights, "weights")


def test_correct_answer_passes():
    verdict = check_here(AttentionCheck("Flawed", adapters.MULTI_HEAD_SELF_ATTENTION, REVEALING),
                         {"Flawed": with_flaws(Flaws())})
    assert verdict.passed


@pytest.mark.parametrize("mistake", [m for m in catalog.ATTENTION if m.name != "dropout_in_eval"], ids=lambda m: m.name)
def test_every_mistake_is_caught_and_named(mistake):
    with pytest.raises(checks.CheckFailed) as failure:
        check_here(AttentionCheck("Flawed", adapters.MULTI_HEAD_SELF_ATTENTION, REVEALING), {"Flawed": with_flaws(mistake.flaws)})
    assert mistake.title in str(failure.value), str(failure.value)


@pytest.mark.parametrize("mistake", [m for m in catalog.BASICS_ATTENTION if m.name != "heads_concatenated_on_tokens"],
                         ids=lambda m: m.name)
def test_every_mistake_of_assignment_01_is_caught_and_named(mistake):
    """Assignment 01's own attention mistakes, on a batch of one (where a squeeze shows) with biases
    and more tokens than a head's width. (The heads concatenated along the tokens need heads
    without an output projection, which this class always has: the audit of 01 holds that one.)"""
    case = AttentionCase(batch=1, seq=5, d_in=6, d_out=8, num_heads=2, causal=True, out_proj=True)
    with pytest.raises(checks.CheckFailed) as failure:
        check_here(AttentionCheck("Flawed", adapters.MULTI_HEAD_SELF_ATTENTION, case),
                   {"Flawed": with_flaws(mistake.flaws)})
    assert mistake.title in str(failure.value), str(failure.value)


def test_dropout_left_on_in_eval_is_caught_and_named():
    class LeakyDropout(Flawed):
        def forward(self, x, return_attention=False):
            out = super().forward(x)
            return torch.nn.functional.dropout(out, p=0.5, training=True)

    case = AttentionCase(batch=2, seq=4, d_in=6, d_out=6, num_heads=3, out_proj=True, dropout=0.5)
    with pytest.raises(checks.CheckFailed) as failure:
        check_here(AttentionCheck("LeakyDropout", adapters.MULTI_HEAD_SELF_ATTENTION, case), {"LeakyDropout": LeakyDropout})
    assert catalog.BY_NAME["dropout_in_eval"].title in str(failure.value)


@pytest.mark.parametrize("case", [AttentionCase(batch=3, seq=1, d_in=4, d_out=6, num_heads=2, out_proj=True),
                                  AttentionCase(batch=1, seq=4, d_in=4, d_out=6, num_heads=2, out_proj=True)],
                         ids=["one token", "a batch of one"])
def test_a_result_squeezed_where_a_size_is_one_is_caught_and_named(case):
    """What the class returns, squeezed, loses the dimension of a single token or a single sequence:
    its shape is wrong there, and the check names the squeeze from the shapes alone."""
    class Squeezed(Flawed):
        def forward(self, x, return_attention=False):
            out, probs = super().forward(x, return_attention=True)
            return out.squeeze(), probs.squeeze()

    with pytest.raises(checks.CheckFailed) as failure:
        check_here(AttentionCheck("Squeezed", adapters.MULTI_HEAD_SELF_ATTENTION, case), {"Squeezed": Squeezed})
    assert catalog.BY_NAME["squeezed_size_one"].title in str(failure.value), str(failure.value)
    assert check_here(AttentionCheck("Squeezed", adapters.MULTI_HEAD_SELF_ATTENTION, REVEALING),
                      {"Squeezed": Squeezed}).passed, "with no size of one, the squeeze changes nothing"


def test_a_constructor_that_accepts_a_width_the_heads_cannot_share_is_named():
    """A check of the ValueError names the missing check of the sizes; a class that raises it passes."""
    unchecked = RaisesCheck("Flawed", {"input_size": 4, "hidden": 10, "num_heads": 4}, mistake="heads_not_checked")
    with pytest.raises(checks.CheckFailed) as failure:
        check_here(unchecked, {"Flawed": Flawed})
    assert "raised nothing" in str(failure.value)
    assert catalog.BY_NAME["heads_not_checked"].title in str(failure.value), str(failure.value)

    class Checked(Flawed):
        def __init__(self, input_size, hidden, num_heads, causal=False, dropout=0):
            if hidden % num_heads:
                raise ValueError(f"{num_heads} heads cannot share {hidden} features")
            super().__init__(input_size, hidden, num_heads, causal)

    assert check_here(unchecked, {"Flawed": Checked}).passed


def test_an_input_that_no_gradient_reaches_is_told_so():
    """A forward that detaches its input still trains its layers (the output needs a gradient),
    but the gradient of x is zero: the message says that nothing reaches x, and why it may be."""
    case = AttentionCase(batch=2, seq=3, d_in=4, d_out=4)

    class Detached(nn.Module):   # assignment 02's SelfAttention, its input detached
        def __init__(self, input_size, hidden):
            super().__init__()
            self.q, self.k, self.v = (nn.Linear(input_size, hidden) for _ in range(3))

        def forward(self, x):
            x = x.detach()
            scores = self.q(x) @ self.k(x).transpose(-2, -1) / self.q.out_features ** 0.5
            return torch.softmax(scores, dim=-1) @ self.v(x)

    with pytest.raises(checks.CheckFailed) as failure:
        check_here(AttentionCheck("Detached", adapters.SELF_ATTENTION, case), {"Detached": Detached})
    assert "the gradient of x has the right shape" in str(failure.value)
    assert "It is zero: no gradient reaches x through autograd" in str(failure.value)


def test_failure_message_shows_expected_got_and_largest_error():
    message = checks.difference("output", torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.5]))
    assert "largest error is 0.5" in message and "expected 2.5" in message and "got 2" in message
    assert checks.difference("output", torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0 + 1e-6])) is None
    assert "shape (2,)" in checks.difference("output", torch.zeros(2), torch.zeros(3))


def test_unfinished_answer_reports_todo():
    class Todo(nn.Module):
        def __init__(self, input_size, hidden):
            super().__init__()
            self.q, self.k, self.v = (nn.Linear(input_size, hidden) for _ in range(3))

        def forward(self, x):
            raise NotImplementedError()

    with pytest.raises(checks.CheckFailed, match="TODO: Todo is not written yet"):
        check_here(AttentionCheck("Todo", adapters.SELF_ATTENTION, AttentionCase(batch=1, seq=2, d_in=3, d_out=4)),
                   {"Todo": Todo})


def test_wrong_parameter_names_are_reported_by_name():
    class Renamed(nn.Module):
        def __init__(self, input_size, hidden):
            super().__init__()
            self.query = nn.Linear(input_size, hidden)

    with pytest.raises(checks.CheckFailed, match="has no parameter .*q.weight.* It has: query.weight"):
        check_here(AttentionCheck("Renamed", adapters.SELF_ATTENTION, AttentionCase(batch=1, seq=2, d_in=3, d_out=4)),
                   {"Renamed": Renamed})


def test_probe_messages_name_no_type_or_exception_the_students_code_chose():
    """A probe names a value's type only when it is Python's or torch's own, an exception by the
    nearest built-in type it derives from; a message about a hidden run never quotes a class name
    that code made (``type(...)`` can make any), and names the student chose (their parameters) go
    to the detail that only the visible checks show."""
    from transformer_lm.judging import RaisesJudge
    from transformer_lm.sandboxed import student_objects

    made = type("Shape3x7Error", (ValueError,), {})
    assert student_objects.builtin_exception(made()) == "ValueError"
    assert student_objects.builtin_exception(type("Anything", (Exception,), {})()) == "Exception"
    assert student_objects.kind_of(torch.zeros(1)) == "torch.Tensor" and student_objects.kind_of(None) == "None"
    assert student_objects.kind_of(type("Shape3x7", (), {})()) == "an object of a class of your own"
    with pytest.raises(student_objects.ProbeError) as raised:
        student_objects.load_parameters(nn.Linear(2, 3), {"W_query": torch.zeros(3, 2)})
    assert "weight" not in raised.value.args[0] and "It has: weight (3, 2), bias (3,)." in str(raised.value)
    judge = RaisesJudge("MultiHeadAttention", {"d_out": 5, "num_heads": 2})
    assert judge(None, "ValueError", True).status == "passed"
    assert "Shape3x7" not in judge(None, "Shape3x7Error", True).message


def test_seed_000_fingerprint_from_the_reference_and_its_diagnostics():
    attention = reference.MultiHeadSelfAttention(visible_checks.SEED_000_CONFIG)
    assert checks.mingpt_fingerprint(attention) == [161, 13, 294, 0, 37187, 432]
    assert visible_checks.flawed_fingerprint(Flaws()) == [161, 13, 294, 0, 37187, 432]
    assert visible_checks.flawed_fingerprint(catalog.BY_NAME["no_scaling"].flaws) == [1, 0, 2, 0, 38787, 432]
    assert checks.diagnose_fingerprint([161, 13, 294, 0, 37187, 432]).passed
    assert checks.diagnose_fingerprint([1, 0, 2, 0, 38787, 432]).mistake.name == "no_scaling"
    fill_zero = visible_checks.flawed_fingerprint(catalog.BY_NAME["mask_filled_with_zero"].flaws)
    assert fill_zero[-1] == 432  # seed 000: a wrong mask fill keeps 432 last
    assert checks.diagnose_fingerprint(fill_zero).mistake.name == "mask_filled_with_zero"



def test_fingerprint_holds_on_a_cpu_that_rounds_the_other_way():
    """432 is a whole number in exact arithmetic (12 value-bias gradients of 6): a CPU, or a correct
    order of sums, that gives 431.99997 keeps the exercise's fingerprint, and a mistake's sums that
    round one apart are still named."""
    just_below = torch.full((12,), 6.0) * (1 - 4e-8)       # 12 * 36 * (1 - 8e-8), a few ulps under 432
    assert (just_below ** 2).sum().item() < 432 and int((just_below ** 2).sum().item()) == 431
    assert checks.fingerprint([just_below]) == [432]
    assert checks.fingerprint([torch.full((1,), 37187.586).sqrt()]) == [37187]   # not whole: cut as int() cuts
    stored = checks.stored_checks()["fingerprints"]
    rounded_apart = [[n - 1 if n > 0 else n for n in theirs] for theirs in stored["mistakes"].values()]
    assert [checks.diagnose_fingerprint(f).mistake for f in rounded_apart] == list(stored["mistakes"])
    every = [stored["expected"], *stored["mistakes"].values()]
    for i, one in enumerate(every):   # no two within 1 of each other: the naming cannot mix them up
        assert all(max(abs(a - b) for a, b in zip(one, other)) > 1 for other in every[i + 1:])

def test_stored_values_are_what_the_script_makes(tmp_path):
    """Both files, made again here, hold the same values at the stated tolerance, and the same
    checks; together they stay under the size the course allows, and any user may read them (mode
    0644: a container's grader is seldom the user who made them)."""
    make_test_values.write(tmp_path / "test_values.safetensors", tmp_path / "visible_checks.safetensors")
    names = ("test_values.safetensors", "visible_checks.safetensors")
    assert [(tmp_path / name).stat().st_mode & 0o777 for name in names] == [0o644, 0o644]
    for kept, made, tolerance in ((make_test_values.PATH, tmp_path / "test_values.safetensors", PUBLIC_VALUES),
                                  (checks.STORED, tmp_path / "visible_checks.safetensors", ACROSS_MACHINES)):
        kept_tensors, made_tensors = load_file(str(kept)), load_file(str(made))
        assert kept_tensors.keys() == made_tensors.keys(), kept
        for name in made_tensors:
            assert_same(kept_tensors[name], made_tensors[name], name, tolerance)
        assert safe_open(str(kept), "pt").metadata() == safe_open(str(made), "pt").metadata(), kept
    assert make_test_values.PATH.stat().st_size + checks.STORED.stat().st_size <= make_test_values.LIMIT


def test_test_values_have_seed_003_names_and_shapes():
    from transformer_lm.sandboxed.test_values import MultiHeadAttentionTestValues as M
    from transformer_lm.sandboxed.test_values import SelfAttentionTestValues as S

    assert S.x.shape == (3, 5, 7) and S.q_weight.shape == (9, 7) and S.output.shape == (3, 5, 9)
    assert M.mix_weight.shape == (9, 9) and M.output.shape == M.output_causal.shape == (3, 5, 9)
    assert not torch.allclose(M.output, M.output_causal)


def test_generation_twins_with_no_flaws_are_the_reference():
    logits = torch.randn(4, 9, generator=torch.Generator().manual_seed(0))
    for temperature, top_k in ((1.0, None), (0.7, 3)):
        assert_same(mistakes.flawed_sampling_probabilities(logits, temperature, top_k, GenerationFlaws()),
                    reference.sampling_probabilities(logits, temperature, top_k))
    model = reference.GPT(reference.GPTConfig(vocab_size=9, block_size=5, n_layer=2, n_head=2, n_embd=8)).eval()
    idx = torch.randint(9, (2, 3), generator=torch.Generator().manual_seed(1))
    for use_cache in (False, True):
        assert torch.equal(mistakes.flawed_greedy_tokens(model, idx, 6, use_cache, GenerationFlaws()),
                           model.generate(idx, 6, top_k=1, use_cache=use_cache))


@pytest.mark.parametrize("mistake", catalog.generation_mistakes("sampling"), ids=lambda m: m.name)
def test_every_sampling_mistake_is_caught_and_named(mistake):
    def sample_next_token(logits, temperature=1.0, top_k=None):
        probs = mistakes.flawed_sampling_probabilities(logits, temperature, top_k, mistake.flaws)
        return torch.multinomial(probs, num_samples=1)

    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, 0.5], [-0.5, 1.5, 0.0, 1.0, -2.0]])
    with pytest.raises(checks.CheckFailed) as failure:
        checks.run("sample_next_token", sampling_check("sample_next_token", logits, 0.5, 3, 4000),
                   {"sample_next_token": sample_next_token})
    assert mistake.title in str(failure.value), str(failure.value)


def test_a_right_sampler_written_another_way_passes():
    def sample_next_token(logits, temperature=1.0, top_k=None):   # the Gumbel-max trick
        scaled = logits / temperature
        if top_k is not None:
            kth = torch.topk(scaled, top_k).values[:, [-1]]
            scaled = scaled.masked_fill(scaled < kth, float("-inf"))
        gumbel = -torch.log(-torch.log(torch.rand_like(scaled)))
        return (scaled + gumbel).argmax(dim=-1, keepdim=True)

    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, 0.5], [-0.5, 1.5, 0.0, 1.0, -2.0]])
    for temperature, top_k in ((1.0, None), (0.5, 3), (2.0, 2)):
        assert checks.run("sample_next_token", sampling_check("sample_next_token", logits, temperature, top_k, 4000),
                          {"sample_next_token": sample_next_token}).passed


def test_in_a_kernel_a_failed_check_is_one_message_and_forbidden_calls_are_found_as_the_grader_finds_them():
    """In Jupyter, a failed visible check is one clear message; when the student's code raised,
    the student's own lines follow, and none of the course package's. checks.forbidding scans
    what the grader scans (the whole cell) and sees what ran (a getattr string)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("def attention(x):\n    return x @ x.T @ x.T   # a shape mistake"),
                nbformat.v4.new_code_cell("import torch\nfrom transformer_lm import checks\n"
                                          "checks.call_student('attention', attention, torch.ones(2, 3))"),
                nbformat.v4.new_code_cell("checks.check_close(torch.zeros(2), torch.ones(2))"),
                nbformat.v4.new_code_cell("import torch.nn.functional as F\n\n\ndef unused(q, k, v):\n"
                                          "    return F.scaled_dot_product_attention(q, k, v)\n\n\n"
                                          "def attend(q, k, v):\n    return torch.softmax(q @ k.mT, dim=-1) @ v"),
                nbformat.v4.new_code_cell("with checks.forbidding(attend, checks.LIBRARY_ATTENTION):\n    pass"),
                nbformat.v4.new_code_cell("def hidden(q, k, v):\n"
                                          "    return getattr(F, 'scaled_dot_' + 'product_attention')(q, k, v)\n\n\n"
                                          "with checks.forbidding(hidden, checks.LIBRARY_ATTENTION):\n"
                                          "    hidden(*torch.ones(3, 2, 4))")]
    ran = tools.execute(nb, allow_errors=True)
    raised, wrong = (tools.strip_ansi("\n".join(ran.cells[i].outputs[0].traceback)) for i in (1, 2))
    # the same scope as the grader's: the whole cell (an unused helper beside the answer), and what ran
    assert tools.errors(ran.cells[4]) == [("CheckFailed", "attend uses scaled_dot_product_attention: this exercise "
                                           "asks you to write it yourself, and the grader gives no points for an "
                                           "answer that calls it.")]
    assert tools.errors(ran.cells[5])[0][1].startswith("hidden ran scaled_dot_product_attention while it was checked")
    assert raised.startswith("CheckFailed: attention raised RuntimeError")
    assert "Where your code raised it:" in raised and "return x @ x.T @ x.T" in raised
    assert "transformer_lm" not in raised and "site-packages" not in raised, raised
    assert wrong.startswith("CheckFailed: output has the right shape"), wrong
    assert wrong.split() == f"CheckFailed: {tools.errors(ran.cells[2])[0][1]}".split(), wrong   # the message alone


def test_decoder_twins_without_flaws_are_the_reference_and_each_flaw_changes_what_it_concerns():
    """Assignment 06's catalogue: every twin with no flaw is the reference, and every catalogued
    mistake changes the output of the piece it concerns (on inputs that can show it)."""
    none = DecoderFlaws()
    x, positions = torch.randn(2, 4, 7, 8, dtype=torch.float64), torch.stack([torch.arange(7), torch.arange(3, 10)])
    torch.testing.assert_close(mistakes.flawed_apply_rope(x, positions, 100.0, none), reference.apply_rope(x, positions, 100.0))
    kv = torch.randn(2, 2, 5, 4)
    assert torch.equal(mistakes.flawed_repeat_kv(kv, 2, none), reference.repeat_kv(kv, 2))
    assert torch.equal(mistakes.flawed_sliding_window_mask(6, 6, 3, none), reference.sliding_window_mask(6, window=3))
    attention_mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    positions_ok, mask_ok = mistakes.flawed_padding(attention_mask, None, none)
    assert torch.equal(positions_ok, reference.left_padded_positions(attention_mask))
    assert torch.equal(mask_ok, reference.padded_causal_mask(attention_mask))
    gqa = reference.GroupedQueryAttention(16, 4, 2).double()
    hidden, steps = torch.randn(2, 6, 16, dtype=torch.float64), torch.arange(2, 8)
    torch.testing.assert_close(mistakes.flawed_grouped_query_attention(gqa, hidden, steps, None, none), gqa(hidden, steps)[0])
    torch.testing.assert_close(mistakes.flawed_cached_outputs(gqa, hidden, steps, 3, none), gqa(hidden, steps)[0])
    sizes = {"n_layers": 3, "n_kv_heads": 2, "head_dim": 8, "seq_len": 10, "batch": 2}
    assert mistakes.flawed_kv_cache_bytes(sizes, torch.float16, none) == reference.kv_cache_bytes(**sizes,
                                                                                                  dtype=torch.float16)
    for mistake in catalog.DECODER:
        flaws = mistake.flaws
        if mistake.shows_with & {"rope", "gqa"} and mistake.name != "kv_heads_repeated_not_interleaved":
            assert not torch.allclose(mistakes.flawed_apply_rope(x, positions, 100.0, flaws),
                                      reference.apply_rope(x, positions, 100.0)), mistake.name
        if "gqa" in mistake.shows_with:
            assert not torch.allclose(mistakes.flawed_grouped_query_attention(gqa, hidden, steps, None, flaws),
                                      gqa(hidden, steps)[0]), mistake.name
        if "window" in mistake.shows_with:
            assert not torch.equal(mistakes.flawed_sliding_window_mask(6, 6, 3, flaws),
                                   reference.sliding_window_mask(6, window=3)), mistake.name
        if "cache" in mistake.shows_with:
            assert not torch.allclose(mistakes.flawed_cached_outputs(gqa, hidden, steps, 3, flaws),
                                      gqa(hidden, steps)[0]), mistake.name
        if "padding" in mistake.shows_with:
            got = mistakes.flawed_padding(attention_mask, None, flaws)
            assert not (torch.equal(got[0], positions_ok) and torch.equal(got[1], mask_ok)), mistake.name
        if "bytes" in mistake.shows_with:
            assert mistakes.flawed_kv_cache_bytes(sizes, torch.float16, flaws) != reference.kv_cache_bytes(
                **sizes, dtype=torch.float16), mistake.name
