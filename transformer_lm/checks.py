"""The checks behind the notebooks' visible test cells.

Each visible check prepares a check kind of :mod:`transformer_lm.kinds` from a fixed seed, calls
the student's object through its probe in this kernel, and judges the result with the same
judge the grader uses on hidden inputs (:mod:`transformer_lm.judging`); only here, a failure
shows expected values and the likely mistake. A check raises :class:`CheckFailed` with a
message written for the student, or prints what passed.
"""

from __future__ import annotations

from dataclasses import asdict

import torch

from transformer_lm import catalog, mistakes
from transformer_lm import reference
from transformer_lm.cases import AttentionAPI, AttentionCase, BlockCase, randomize  # noqa: F401 - randomize: notebooks
from transformer_lm.forbidding import LIBRARY_ATTENTION, SOFTMAX, forbidding  # noqa: F401 - for the test cells
from transformer_lm.decoder_kinds import (CacheBytesCheck, GroupedQueryCheck, PaddedGenerationCheck, PaddingCheck,
                                          RopeCheck, WindowMaskCheck)
from transformer_lm.judging import ATOL, RTOL, CheckFailed, Verdict, difference
from transformer_lm.kinds import (AttentionCheck, CachedForwardCheck, DecoderLoadCheck, GenerateCheck, LossCheck,
                                  ModuleCheck, MultiheadLoadCheck, ParametersCheck, Prepared, TransferCheck,
                                  attention_function_candidates, function_check, sampling_check)
from transformer_lm.reference import AttentionWeights
from transformer_lm.sandboxed import probes
from transformer_lm.tiled_kinds import (CausalWorkCheck, FlashForwardCheck, FlashFunctionCheck, MergeStatsCheck,
                                        OnlineSoftmaxCheck, TileCase)

def check_shape(got: torch.Tensor, expected_shape, name: str = "output") -> None:
    """Raises :class:`CheckFailed` unless ``got`` has ``expected_shape``."""
    if not isinstance(got, torch.Tensor):
        raise CheckFailed(f"{name} should be a torch.Tensor, got {type(got).__name__}.")
    if tuple(got.shape) != tuple(expected_shape):
        raise CheckFailed(f"{name} has shape {tuple(got.shape)}, expected {tuple(expected_shape)}.")


def check_close(got: torch.Tensor, expected: torch.Tensor, name: str = "output",
                rtol: float = RTOL, atol: float = ATOL) -> None:
    """Raises :class:`CheckFailed` with expected, got and the largest error unless they match."""
    check_shape(got, expected.shape, name)
    problem = difference(name, got, expected, rtol, atol)
    if problem:
        raise CheckFailed(problem)


def call_student(name: str, function, *args, **kwargs):
    """Calls student code (through a probe) in this kernel, turning whatever goes wrong into
    a :class:`CheckFailed` that says what to do. The original error stays chained, so the
    traceback still shows the line of the answer that raised it."""
    try:
        return function(*args, **kwargs)
    except NotImplementedError:
        raise CheckFailed(f"TODO: {name} is not written yet (it raises NotImplementedError). "
                          "Fill in the cell marked YOUR CODE HERE above, run it, then run this check again.") from None
    except probes.ProbeError as error:
        raise CheckFailed(f"{name}: {error}") from None
    except Exception as error:  # noqa: BLE001 - any error of the answer is reported to the student
        raise CheckFailed(f"{name} raised {type(error).__name__}: {error}") from error


def _report(name: str, verdict: Verdict) -> Verdict:
    verdict.raise_if_failed()
    print(f"{name}: {verdict.message}")
    return verdict


def _run(name: str, prepared: Prepared, objects: dict) -> Verdict:
    """Calls the prepared probe on ``objects`` in this kernel and judges it, showing values."""
    result = call_student(name, prepared.call.run_here, objects)
    return _report(name, prepared.judge_result(result, values=True))


def _seeded(check, seed: int) -> Prepared:
    return check.prepare(torch.Generator().manual_seed(seed))


def check_parameters(cls, init: dict, expected: dict[str, tuple[int, ...]]) -> Verdict:
    """Visible check of an ``__init__``: the parameters' names and shapes."""
    return _run(cls.__name__, _seeded(ParametersCheck(cls.__name__, init, expected), 0), {cls.__name__: cls})


def check_attention_module(cls, api: AttentionAPI, case: AttentionCase, seed: int = 0) -> Verdict:
    """Visible check of an attention class: probe it here and judge it against the reference."""
    return _run(cls.__name__, _seeded(AttentionCheck(cls.__name__, api, case), seed), {cls.__name__: cls})


def check_function(fn, expected_fn, inputs: dict[str, torch.Tensor], *, grad_output: torch.Tensor | None = None,
                   candidates: dict | None = None) -> Verdict:
    """Visible check of a function of tensors against ``expected_fn`` (from the reference)."""
    prepared = function_check(fn.__name__, expected_fn, inputs, grad_output, candidates)
    return _run(fn.__name__, prepared, {fn.__name__: fn})


def check_attention_function(fn, inputs: dict[str, torch.Tensor], grad_output: torch.Tensor | None = None) -> Verdict:
    """Visible check of an attention function ``fn(q, k, v[, mask])`` against the reference,
    naming the catalogued mistakes it matches."""
    def expected(q, k, v, mask=None):
        return reference.scaled_dot_product_attention(q, k, v, mask).output
    return check_function(fn, expected, inputs, grad_output=grad_output,
                          candidates=attention_function_candidates(inputs))


def check_transfer(fn, source_cls, source_api: AttentionAPI, target_cls, target_api: AttentionAPI,
                   case: AttentionCase, seed: int = 0) -> Verdict:
    """Visible check of a weight transfer ``fn(source, target)`` between two attention classes."""
    check = TransferCheck(fn.__name__, source_cls.__name__, source_api, target_cls.__name__, target_api, case)
    objects = {fn.__name__: fn, source_cls.__name__: source_cls, target_cls.__name__: target_cls}
    return _run(fn.__name__, _seeded(check, seed), objects)


def check_multihead_load(cls, api: AttentionAPI, case: AttentionCase, seed: int = 0) -> Verdict:
    """Visible check of ``cls(...).load_from_torch(nn.MultiheadAttention)`` and its forward."""
    return _run(cls.__name__, _seeded(MultiheadLoadCheck(cls.__name__, api, case), seed), {cls.__name__: cls})


def check_decoder_load(cls, init: dict, case: BlockCase, seed: int = 0) -> Verdict:
    """Visible check of ``cls(**init).load_from_torch(nn.TransformerEncoderLayer)`` and its forward."""
    return _run(cls.__name__, _seeded(DecoderLoadCheck(cls.__name__, init, case), seed), {cls.__name__: cls})


def check_module(cls, init: dict, reference_module: torch.nn.Module, inputs: dict[str, torch.Tensor],
                 seed: int = 0) -> Verdict:
    """Visible check of a class with the same parameter names as ``reference_module``: the
    reference's (randomized) weights are loaded into it; outputs and gradients must match."""
    check = ModuleCheck(cls.__name__, init, lambda: reference_module, lambda generator: inputs)
    return _run(cls.__name__, _seeded(check, seed), {cls.__name__: cls})


def check_loss(cls, config: reference.GPTConfig, *, batch: int = 3, seq: int = 6, seed: int = 0) -> Verdict:
    """Visible check of ``forward(idx, targets)``: the logits, and the mean cross-entropy over the
    positions whose target is not -1, for the reference's random weights loaded by name."""
    check = LossCheck(cls.__name__, asdict(config), batch, seq)
    return _run(cls.__name__, _seeded(check, seed), {cls.__name__: cls})


def check_generate(cls, config: reference.GPTConfig, *, batch: int = 2, prompt: int = 3, max_new_tokens: int = 6,
                   seed: int = 0, **call_kwargs) -> Verdict:
    """Visible check of ``generate``: greedy tokens (``top_k=1``) equal the reference's and, with
    ``use_cache=True``, the model runs on the tokens per step that a cache runs on."""
    check = GenerateCheck(cls.__name__, asdict(config), batch, prompt, max_new_tokens, call_kwargs)
    return _run(f"{cls.__name__}.generate", _seeded(check, seed), {cls.__name__: cls})


def check_cached_forward(cls, config: reference.GPTConfig, *, batch: int = 2, seq: int = 5, prefix: int = 2,
                         seed: int = 0) -> Verdict:
    """Visible check of ``forward(idx, kv_cache=...)``: the first ``prefix`` tokens, then one token
    per call with the cache, give the logits of the whole sequence run at once."""
    check = CachedForwardCheck(cls.__name__, asdict(config), batch, seq, prefix)
    return _run(f"{cls.__name__}.forward with a KV cache", _seeded(check, seed), {cls.__name__: cls})


def check_sampling(fn, logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                   draws: int = 4000) -> Verdict:
    """Visible check of a sampler ``fn(logits, temperature, top_k)``: ``draws`` tokens from each
    row of ``logits`` ``(rows, vocab)`` follow softmax(logits / temperature) over the top_k."""
    prepared = sampling_check(fn.__name__, logits, temperature, top_k, draws)
    return _run(fn.__name__, prepared, {fn.__name__: fn})


# --------------------------------------------------------------------------------------
# The gradient fingerprint of the original minGPT attention exercise (assignment 04)
# --------------------------------------------------------------------------------------

SEED_000_FINGERPRINT = [161, 13, 294, 0, 37187, 432]
SEED_000_CONFIG = reference.GPTConfig(vocab_size=11, block_size=5, n_head=4, n_embd=12)


def seed_000_input() -> torch.Tensor:
    """The exercise's input: 5 tokens of 12 features, the first 1,1,1,2,2,2,3,3,3,4,4,4, the rest ones."""
    x = torch.ones(1, 5, 12)
    x[0, 0] = torch.tensor([1.0, 2.0, 3.0, 4.0]).repeat_interleave(3)
    return x


def mingpt_fingerprint(module: torch.nn.Module, x: torch.Tensor | None = None) -> list[int]:
    """The exercise's check: every parameter at 0.1, ``y.sum()`` backpropagated, then
    ``int(sum(grad**2))`` for query, key and value weights and biases."""
    for parameter in module.parameters():
        torch.nn.init.constant_(parameter, 0.1)
    module.zero_grad(set_to_none=True)
    output = module(seed_000_input() if x is None else x)
    output = output[0] if isinstance(output, tuple) else output
    output.sum().backward()
    return reference.gradient_fingerprint(AttentionWeights(
        module.query.weight.grad, module.key.weight.grad, module.value.weight.grad,
        module.query.bias.grad, module.key.bias.grad, module.value.bias.grad))


def flawed_fingerprint(flaws: catalog.Flaws) -> list[int]:
    """The fingerprint that minGPT attention with ``flaws`` gives on the exercise's input."""
    width = SEED_000_CONFIG.n_embd
    weights = AttentionWeights(*(torch.full((width, width), 0.1) for _ in range(3)),
                               *(torch.full((width,), 0.1) for _ in range(3)),
                               torch.full((width, width), 0.1), torch.full((width,), 0.1))
    weights = weights.map(lambda t: t.requires_grad_(True))
    output, _ = mistakes.flawed_multi_head_attention(seed_000_input(), weights, SEED_000_CONFIG.n_head, flaws,
                                                    causal=True)
    output.sum().backward()
    return reference.gradient_fingerprint(weights.map(lambda t: t.grad))


def diagnose_fingerprint(fingerprint: list[int]) -> Verdict:
    """Judges a fingerprint of the minGPT exercise and names the catalogued mistake it comes from."""
    if list(fingerprint) == SEED_000_FINGERPRINT:
        return Verdict("passed", f"Gradient fingerprint {SEED_000_FINGERPRINT}: correct.")
    message = f"Gradient fingerprint {list(fingerprint)}, expected {SEED_000_FINGERPRINT}."
    features = {"heads", "causal", "projection"}
    for mistake in catalog.revealed_by(features):
        if flawed_fingerprint(mistake.flaws) == list(fingerprint):
            return Verdict("failed", message, mistake)
    if fingerprint and fingerprint[-1] == SEED_000_FINGERPRINT[-1]:
        return Verdict("failed", message + " The value gradients are right, so the weights reach the values "
                       "correctly; look at the mask fill value (-inf) and the softmax.",
                       catalog.BY_NAME["mask_filled_with_zero"])
    return Verdict("failed", message)


# --------------------------------------------------------------------------------------
# Attention that fits in memory (assignment 05): values, memory and work, on visible sizes
# --------------------------------------------------------------------------------------

TILED_VALUE_CASES = (
    TileCase(2, 3, 37, 37, 8, 6, 8, 5),                  # T not a multiple of either block
    TileCase(2, 3, 37, 37, 8, 6, 8, 5, causal=True),
    TileCase(1, 2, 19, 45, 4, 7, 16, 16),                # fewer queries than keys, one query block
)
TILED_SPREAD_CASE = TileCase(2, 2, 29, 29, 8, 6, 8, 4, causal=True, spread=True)
"""Rows whose scores lie hundreds apart: one maximum shared by all rows underflows. (Only for the
forward: float32 gradients of scores in the hundreds stray past the course's tolerance.)"""
TILED_MEMORY_CASE = TileCase(1, 2, 160, 160, 8, 8, 16, 16, causal=True)
"""The visible checks' sizes: at T=160 the (T, T) score matrix is 25,600 numbers, a 16 x 16 tile
of one batch and head 256, and the output of every head 2,560."""


def check_merge_stats(fn, seed: int = 0) -> Verdict:
    """Visible check of ``fn(max_a, sum_a, max_b, sum_b) -> (maximum, total)``."""
    return _run(fn.__name__, _seeded(MergeStatsCheck(fn.__name__), seed), {fn.__name__: fn})


def check_online_softmax(fn, seed: int = 0) -> Verdict:
    """Visible check of ``fn(scores, block)``: the softmax of each row, at most ``block`` scores
    at a time, on ordinary rows and on rows whose scores lie far apart."""
    for check in (OnlineSoftmaxCheck(fn.__name__, 6, 21, 4, spread=True), OnlineSoftmaxCheck(fn.__name__, 4, 50, 8)):
        verdict = _run(fn.__name__, _seeded(check, seed), {fn.__name__: fn})
    return verdict


def check_flash_forward(fn, seed: int = 0) -> Verdict:
    """Visible check of ``fn(q, k, v, causal, block_q, block_k) -> (output, lse)`` against exact
    attention: T not a multiple of the blocks, the causal mask, fewer queries than keys, rows far apart."""
    for case in (*TILED_VALUE_CASES, TILED_SPREAD_CASE):
        verdict = _run(fn.__name__, _seeded(FlashForwardCheck(fn.__name__, case), seed), {fn.__name__: fn})
    return verdict


def check_flash_memory(fn, seed: int = 0) -> Verdict:
    """Visible check that ``fn`` works tile by tile at T=160: no tensor of T x T numbers, no max or
    sum over a whole row of keys."""
    return _run(fn.__name__, _seeded(FlashForwardCheck(fn.__name__, TILED_MEMORY_CASE, "memory"), seed),
                {fn.__name__: fn})


def check_causal_skipping(fn, seed: int = 0) -> Verdict:
    """Visible check that ``fn(..., causal=True)`` computes only the key blocks that are not wholly
    in a query block's future, counted by the exponentials it computes."""
    return _run(fn.__name__, _seeded(CausalWorkCheck(fn.__name__, TILED_MEMORY_CASE), seed), {fn.__name__: fn})


def check_flash_backward(cls, seed: int = 0) -> Verdict:
    """Visible check of the gradients of ``cls.apply(q, k, v, causal, block_q, block_k)``."""
    for case in TILED_VALUE_CASES:
        verdict = _run(f"{cls.__name__}.backward", _seeded(FlashFunctionCheck(cls.__name__, case), seed),
                       {cls.__name__: cls})
    return verdict


def check_backward_memory(cls, seed: int = 0) -> Verdict:
    """Visible check that ``cls``'s forward keeps only q, k, v, the output and the log-sum-exp, and
    that its backward works tile by tile and skips the tiles in the future under the causal mask
    (T=160)."""
    _run(cls.__name__, _seeded(FlashFunctionCheck(cls.__name__, TILED_MEMORY_CASE, "memory"), seed), {cls.__name__: cls})
    check = CausalWorkCheck(cls.__name__, TILED_MEMORY_CASE, backward=True)
    return _run(f"{cls.__name__}.backward", _seeded(check, seed), {cls.__name__: cls})


# --------------------------------------------------------------------------------------
# Attention in today's decoders (assignment 06), on visible sizes
# --------------------------------------------------------------------------------------


def check_rope(fn, seed: int = 0) -> Verdict:
    """Visible check of ``fn(x, positions, base)`` (Llama's half-split convention): positions from
    0, positions that start later (as after a cache) and one row of positions per sequence (as
    with left padding), two bases."""
    for check in (RopeCheck(fn.__name__, 1, 2, 5, 8), RopeCheck(fn.__name__, 2, 3, 6, 16, start=7),
                  RopeCheck(fn.__name__, 3, 2, 4, 8, start=2, per_sequence=True, base=500000.0)):
        verdict = _run(fn.__name__, _seeded(check, seed), {fn.__name__: fn})
    # The property rotary embeddings exist for, shown on the student's own function (the values
    # above already imply it; the tolerance is loose so that it never refuses what they passed).
    q, k = torch.randn(2, 1, 1, 1, 16, generator=torch.Generator().manual_seed(seed)).unbind(0)
    pairs = ((3, 0), (53, 50), (303, 300))
    scores = [float((call_student(fn.__name__, fn, q, torch.tensor([m])) *
                     call_student(fn.__name__, fn, k, torch.tensor([n]))).sum()) for m, n in pairs]
    if max(scores) - min(scores) > 1e-2 * float(q.norm() * k.norm()):
        raise CheckFailed(f"{fn.__name__}: a query at m and a key at n score {scores} at {list(pairs)}: the score "
                          "must depend on m - n only.")
    print(f"{fn.__name__}: a query at m and a key at n = m - 3 score {scores[0]:+.5f} at m = 3, 53 and 303: "
          "the score depends on m - n only.")
    return verdict


def check_grouped_query_attention(cls, seed: int = 0) -> Verdict:
    """Visible check of ``cls(d_model, n_heads, n_kv_heads, rope_base, window)``: multi-query,
    grouped and multi-head, at positions that do not start at 0, with a sliding window, and on a
    left-padded batch whose pad queries see no key."""
    for check in (GroupedQueryCheck(cls.__name__, 16, 4, 1, 2, 5), GroupedQueryCheck(cls.__name__, 16, 4, 2, 2, 6, 3),
                  GroupedQueryCheck(cls.__name__, 12, 3, 3, 1, 4, 9, base=100.0),
                  GroupedQueryCheck(cls.__name__, 16, 4, 2, 2, 7, window=3),
                  GroupedQueryCheck(cls.__name__, 16, 4, 2, 2, 5, padded=(2, 5))):   # pad queries see no key
        verdict = _run(cls.__name__, _seeded(check, seed), {cls.__name__: cls})
    return verdict


def check_sliding_window_mask(fn, seed: int = 0) -> Verdict:
    """Visible check of ``fn(query_len, key_len, window)``: square, and the last queries of a cache."""
    for sizes in ((6, 6, 3), (6, 6, 1), (2, 7, 4), (5, 5, 9)):
        verdict = _run(fn.__name__, _seeded(WindowMaskCheck(fn.__name__, *sizes), seed), {fn.__name__: fn})
    return verdict


def check_kv_cache_bytes(fn, seed: int = 0) -> Verdict:
    """Visible check of ``fn(n_layers, n_kv_heads, head_dim, seq_len, batch, dtype)``."""
    for sizes in ((32, 8, 128, 8192, 1, "bfloat16"), (2, 3, 16, 100, 4, "float32")):
        verdict = _run(fn.__name__, _seeded(CacheBytesCheck(fn.__name__, *sizes), seed), {fn.__name__: fn})
    return verdict


def check_padding(positions_fn, mask_fn, seed: int = 0) -> Verdict:
    """Visible check of ``positions_fn(attention_mask)`` and ``mask_fn(attention_mask, query_len)``
    for left-padded prompts: the whole prompts, and the last token (a step after the cache)."""
    objects = {positions_fn.__name__: positions_fn, mask_fn.__name__: mask_fn}
    for lengths, query_len in (((3, 5, 1), None), ((2, 4), 1)):
        check = PaddingCheck(positions_fn.__name__, mask_fn.__name__, lengths, query_len)
        verdict = _run(mask_fn.__name__, _seeded(check, seed), objects)
    return verdict


def check_padded_generation(generate_fn, attention_cls, seed: int = 0) -> Verdict:
    """Visible check of ``generate_fn(model, prompts, max_new_tokens)`` on a TinyDecoder built on
    ``attention_cls``: the padded batch gives each prompt the tokens it gets alone."""
    config = (("vocab_size", 13), ("d_model", 16), ("n_layers", 2), ("n_heads", 4), ("n_kv_heads", 2),
              ("ff_dim", 24))
    check = PaddedGenerationCheck(generate_fn.__name__, attention_cls.__name__, config, (3, 6, 1), 5)
    return _run(generate_fn.__name__, _seeded(check, seed),
                {generate_fn.__name__: generate_fn, attention_cls.__name__: attention_cls})
