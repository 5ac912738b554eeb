"""Assignment 06's check kinds (transformer_lm/instructor/decoder_kinds.py): the course's own code passes
every visible check, and each catalogued mistake of rotary embeddings, grouped-query attention
and sliding windows is caught and named by the visible check that concerns it."""

import runpy

import pytest
import torch

import notebook_tools as tools
from live_checks import visible
from transformer_lm import catalog, checks
from transformer_lm.instructor import mistakes, reference
from transformer_lm.instructor.decoder_kinds import RopeCheck
from transformer_lm.instructor.kinds import function_records
from transformer_lm.flaws import DecoderFlaws
from transformer_lm.judging import CheckFailed


class GroupedQueryAttention(reference.GroupedQueryAttention):
    """The reference in the notebook's API, with ``flaws`` in its forward when a test gives some."""

    flaws = DecoderFlaws()

    def __init__(self, d_model, n_heads, n_kv_heads, rope_base=10000.0, window=None):
        super().__init__(d_model, n_heads, n_kv_heads, rope_base=rope_base, window=window)

    def forward(self, x, positions, attn_mask=None, cache=None):
        if self.flaws == DecoderFlaws():
            return super().forward(x, positions, attn_mask, cache)
        returned_cache = super().forward(x, positions, attn_mask, cache)[1]   # the flaws are in the output only
        return mistakes.flawed_grouped_query_attention(self, x, positions, attn_mask, self.flaws, cache), returned_cache


def with_flaws(flaws):
    return type("GroupedQueryAttention", (GroupedQueryAttention,), {"flaws": flaws})


def apply_rope(x, positions, base=10000.0):
    return reference.apply_rope(x, positions, base)


def sliding_window_mask(query_len, key_len, window):
    return reference.sliding_window_mask(query_len, key_len, window=window)


def kv_cache_bytes(n_layers, n_kv_heads, head_dim, seq_len, batch=1, dtype=torch.bfloat16):
    return reference.kv_cache_bytes(n_layers, n_kv_heads, head_dim, seq_len, batch, dtype)


def test_the_course_code_passes_every_visible_check():
    assert checks.check_rope(apply_rope).passed
    assert visible("grouped_query_attention", "GroupedQueryAttention")(GroupedQueryAttention).passed
    assert visible("sliding_window_mask", "sliding_window_mask")(sliding_window_mask).passed
    assert visible("kv_cache_bytes", "kv_cache_bytes")(kv_cache_bytes).passed


@pytest.mark.parametrize("mistake", catalog.decoder_mistakes("rope"), ids=lambda m: m.name)
def test_every_rope_mistake_is_caught_and_named(mistake):
    def apply_rope(x, positions, base=10000.0):
        return mistakes.flawed_apply_rope(x, positions, base, mistake.flaws)

    with pytest.raises(CheckFailed) as failure:
        checks.check_rope(apply_rope)
    assert mistake.title in str(failure.value), str(failure.value)


def bank_rope(name: str):
    """The ``apply_rope`` of the audit bank's correct alternative ``name`` (its source there)."""
    bank = runpy.run_path(str(tools.REPO_ROOT / "autograder" / "checks" / "audit" / "06_modern_attention.py"))
    namespace = {"torch": torch}
    exec(bank[name], namespace)
    return namespace["apply_rope"]


def slipped_rope(x, positions, base=10000.0):
    """Rotary embeddings at positions off by a hundredth of a step: wrong, though close."""
    return reference.apply_rope(x, positions.double() * (1 + 0.01 / positions.max().clamp(min=1)), base)


def judged(check: RopeCheck, answer, secret: int):
    """The hidden judge's verdict on ``answer`` for ``check`` drawn from ``secret``."""
    prepared = check.prepare(torch.Generator().manual_seed(secret))
    tensors = prepared.call.tensors
    inputs = {"x": tensors["inputs/x"], "positions": tensors["inputs/positions"]}
    record = function_records(lambda x, positions: answer(x, positions, check.base), inputs, tensors["grad_output"])
    return prepared.judge(record, None, values=False)


def test_rope_with_float32_angles_passes_every_hidden_check_on_every_secret():
    """At position 300 a float32 angle is off by about 2e-5 rad; with the plain tolerance it lost
    its points on about one secret in 200."""
    float32_rope = bank_rope("HALVES")   # angles in float32, as Llama's code in Hugging Face transformers
    for check in tools.hidden_cases("06_modern_attention", "apply_rope"):
        failed = [secret for secret in range(400) if not judged(check, float32_rope, secret).passed]
        assert not failed, (check, failed)


def test_rope_at_positions_a_hundredth_of_a_step_off_fails_the_late_hidden_check():
    late = max(tools.hidden_cases("06_modern_attention", "apply_rope"), key=lambda check: check.start)
    assert late.start >= 300
    assert not any(judged(late, slipped_rope, secret).passed for secret in range(20))


@pytest.mark.parametrize("mistake", catalog.decoder_mistakes("gqa") + catalog.decoder_mistakes("window")
                         + catalog.decoder_mistakes("cached_causal") + catalog.decoder_mistakes("cached_window"),
                         ids=lambda m: m.name)
def test_every_mistake_of_the_attention_layer_is_caught_and_named(mistake):
    with pytest.raises(CheckFailed) as failure:
        visible("grouped_query_attention", "GroupedQueryAttention")(with_flaws(mistake.flaws))
    assert mistake.title in str(failure.value), str(failure.value)


@pytest.mark.parametrize("step", [1, -1])
def test_a_window_off_by_one_either_way_is_named(step):
    def sliding_window_mask(query_len, key_len, window):
        return reference.sliding_window_mask(query_len, key_len, window=window + step)

    with pytest.raises(CheckFailed, match="the sliding window off by one"):
        visible("sliding_window_mask", "sliding_window_mask")(sliding_window_mask)


def test_a_cache_size_without_the_values_is_told_to_count_them_and_named():
    def kv_cache_bytes(n_layers, n_kv_heads, head_dim, seq_len, batch=1, dtype=torch.bfloat16):
        return n_layers * n_kv_heads * head_dim * seq_len * batch * torch.empty((), dtype=dtype).element_size()

    with pytest.raises(CheckFailed, match="only the keys or only the values are counted") as failed:
        visible("kv_cache_bytes", "kv_cache_bytes")(kv_cache_bytes)
    assert catalog.BY_NAME["cache_keys_only"].title in str(failed.value)


def test_a_cache_size_off_some_other_way_names_no_mistake():
    def kv_cache_bytes(n_layers, n_kv_heads, head_dim, seq_len, batch=1, dtype=torch.bfloat16):
        return 8 * reference.kv_cache_bytes(n_layers, n_kv_heads, head_dim, seq_len, batch, dtype)

    with pytest.raises(CheckFailed, match="bits, not bytes") as failed:
        visible("kv_cache_bytes", "kv_cache_bytes")(kv_cache_bytes)
    assert catalog.BY_NAME["cache_keys_only"].title not in str(failed.value)


def padded_positions(attention_mask):
    return reference.left_padded_positions(attention_mask)


def padded_attention_mask(attention_mask, query_len):
    return reference.padded_causal_mask(attention_mask, query_len)


def generate_padded(model, prompts, max_new_tokens, pad_id=0):
    return reference.generate_padded(model, prompts, max_new_tokens, pad_id)


def test_the_course_code_pads_and_generates_as_the_visible_checks_require():
    assert checks.check("padding", padded_positions, padded_attention_mask).passed
    assert checks.check("padded_generation", generate_padded, GroupedQueryAttention).passed


@pytest.mark.parametrize("mistake", catalog.decoder_mistakes("padding"), ids=lambda m: m.name)
def test_every_padding_mistake_is_caught_and_named(mistake):
    def padded_positions(attention_mask):
        return mistakes.flawed_padding(attention_mask, None, mistake.flaws)[0]

    def padded_attention_mask(attention_mask, query_len):
        return mistakes.flawed_padding(attention_mask, query_len, mistake.flaws)[1]

    with pytest.raises(CheckFailed) as failure:
        checks.check("padding", padded_positions, padded_attention_mask)
    assert mistake.title in str(failure.value), str(failure.value)


@pytest.mark.parametrize("name", ["pads_attended", "cache_positions_not_offset_rope"])
def test_generation_that_attends_to_pads_or_restarts_positions_after_the_cache_is_caught_and_named(name):
    mistake = catalog.BY_NAME[name]

    def generate_padded(model, prompts, max_new_tokens, pad_id=0):
        return reference.generate_padded(model, prompts, max_new_tokens, pad_id,
                                         inputs=mistakes.flawed_padded_inputs(mistake.flaws))

    with pytest.raises(CheckFailed) as failure:
        checks.check("padded_generation", generate_padded, GroupedQueryAttention)
    assert mistake.title in str(failure.value), str(failure.value)


def test_under_rope_positions_counted_from_the_padding_change_no_token():
    """Rotary scores depend on distances only, so shifting all of a prompt's positions by its
    padding leaves generation as it was: the mistake shows in the positions themselves, which
    the stored "padding" checks compare (above)."""
    from transformer_lm.sandboxed.decoder import DecoderConfig, TinyDecoder

    torch.manual_seed(0)
    model = TinyDecoder(DecoderConfig(), reference.GroupedQueryAttention).eval()
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8], [9]]
    shifted = mistakes.flawed_padded_inputs(catalog.BY_NAME["positions_from_padding"].flaws)
    assert reference.generate_padded(model, prompts, 5, inputs=shifted) == reference.generate_padded(model, prompts, 5)


def test_a_layer_that_gives_nan_for_a_query_with_no_key_is_caught_and_named():
    mistake = catalog.BY_NAME["empty_rows_nan"]
    with pytest.raises(CheckFailed) as failure:
        visible("grouped_query_attention", "GroupedQueryAttention")(with_flaws(mistake.flaws))
    assert mistake.title in str(failure.value), str(failure.value)


def test_generation_that_runs_the_whole_batch_again_is_refused_and_named():
    def generate_padded(model, prompts, max_new_tokens, pad_id=0):
        return mistakes.generate_padded_without_cache(model, prompts, max_new_tokens, pad_id)

    with pytest.raises(CheckFailed, match="the model refused a call without the caches after the prompt") as failure:
        checks.check("padded_generation", generate_padded, GroupedQueryAttention)
    assert catalog.BY_NAME["generation_reruns_sequence"].title in str(failure.value), str(failure.value)


def plain_copy(model):
    """A TinyDecoder with ``model``'s weights, which refuses nothing and marks no call."""
    from transformer_lm.sandboxed.decoder import TinyDecoder

    copy = TinyDecoder(model.config, type(model.blocks[0].attention))
    copy.load_state_dict(model.state_dict(), strict=False)
    return copy.eval()


def reset_before_each_call(model):
    """``model`` with its count of calls set back to 0 before each call: nothing is refused."""
    forward = model.forward

    def again(*args, **kwargs):
        model.calls = model.step = 0
        return forward(*args, **kwargs)
    model.forward = again
    return model


@pytest.mark.parametrize("around", [plain_copy, reset_before_each_call], ids=lambda f: f.__name__)
def test_generation_that_steps_around_the_refusal_and_runs_the_batch_again_gets_other_tokens(around):
    """The refusal is only a message: code can step around it, and then the tokens, judged against
    the reference, fail it (the model marks the tokens of each call after the prompt)."""
    def generate_padded(model, prompts, max_new_tokens, pad_id=0):
        return mistakes.generate_padded_without_cache(around(model), prompts, max_new_tokens, pad_id)

    with pytest.raises(CheckFailed, match="continues differently in the batch than alone") as failure:
        checks.check("padded_generation", generate_padded, GroupedQueryAttention)
    assert catalog.BY_NAME["generation_reruns_sequence"].title in str(failure.value), str(failure.value)


def cache_only_decoder(steps=2):
    from transformer_lm.sandboxed.decoder import CacheOnlyDecoder, DecoderConfig

    return CacheOnlyDecoder(DecoderConfig(), reference.GroupedQueryAttention, steps=steps).eval()


@torch.no_grad()
def test_the_model_of_the_generation_check_runs_the_prompts_once_then_one_token_a_call():
    from transformer_lm.sandboxed.decoder import Refused

    model, positions = cache_only_decoder(), torch.arange(4)
    _, caches = model(torch.ones(2, 4, dtype=torch.long), positions)
    with pytest.raises(Refused) as again:
        model(torch.ones(2, 5, dtype=torch.long), torch.arange(5))
    with pytest.raises(Refused) as several:
        model(torch.ones(2, 2, dtype=torch.long), torch.arange(4, 6), None, caches)
    for step in (4, 5):   # as many calls after the prompt as new tokens: the last one's logits are not needed
        _, caches = model(torch.ones(2, 1, dtype=torch.long), torch.tensor([step]), None, caches)
    with pytest.raises(Refused) as more:
        model(torch.ones(2, 1, dtype=torch.long), torch.tensor([6]), None, caches)
    assert (again.value.reason, several.value.reason, more.value.reason) == ("again", "positions", "steps")
