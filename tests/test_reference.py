"""The reference agrees with PyTorch's own attention, layers and conventions."""

import random

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from transformer_lm import checks
from transformer_lm.instructor import adapters, reference
from transformer_lm.instructor.reference import AttentionWeights

COMBINATIONS = 60


def close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def random_mask(rng: random.Random, shape, kind):
    """A boolean or additive mask in which every query keeps at least one key."""
    keep = torch.rand(shape) < 0.6
    keep[..., 0] = True
    if kind == "bool":
        return keep
    return torch.randn(shape).masked_fill(~keep, float("-inf"))


@pytest.mark.parametrize("seed", range(COMBINATIONS))
def test_sdpa_matches_pytorch_outputs_and_gradients(seed):
    rng = random.Random(seed)
    torch.manual_seed(seed)
    lead = rng.choice([(), (rng.randint(1, 3),), (rng.randint(1, 3), rng.randint(1, 4))])
    lq, lk, d, dv = rng.randint(1, 9), rng.randint(1, 9), rng.randint(1, 16), rng.randint(1, 16)
    q = torch.randn(*lead, lq, d, dtype=torch.float64, requires_grad=True)
    k = torch.randn(*lead, lk, d, dtype=torch.float64, requires_grad=True)
    v = torch.randn(*lead, lk, dv, dtype=torch.float64, requires_grad=True)
    kind = rng.choice([None, "bool", "float"])
    mask = None if kind is None else random_mask(rng, (lq, lk), kind).to(torch.float64 if kind == "float" else torch.bool)
    upstream = torch.randn(*lead, lq, dv, dtype=torch.float64)

    ours = reference.scaled_dot_product_attention(q, k, v, mask).output
    grads_ours = torch.autograd.grad(ours, (q, k, v), upstream)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    grads_theirs = torch.autograd.grad(theirs, (q, k, v), upstream)
    close(ours, theirs)
    for a, b in zip(grads_ours, grads_theirs):
        close(a, b)


@pytest.mark.parametrize("seed", range(COMBINATIONS))
def test_multi_head_attention_matches_nn_multihead_attention(seed):
    rng = random.Random(1000 + seed)
    torch.manual_seed(seed)
    heads = rng.choice([1, 2, 3, 4])
    width = heads * rng.randint(1, 6)
    batch, seq = rng.randint(1, 3), rng.randint(1, 8)
    causal = rng.random() < 0.5
    torch_mha = nn.MultiheadAttention(width, heads, batch_first=True).double()
    for p in torch_mha.parameters():  # biases are zero at init; make them count
        nn.init.normal_(p, std=0.3)
    q_w, k_w, v_w = torch_mha.in_proj_weight.chunk(3)
    q_b, k_b, v_b = torch_mha.in_proj_bias.chunk(3)
    weights = AttentionWeights(q_w, k_w, v_w, q_b, k_b, v_b, torch_mha.out_proj.weight, torch_mha.out_proj.bias)
    x = torch.randn(batch, seq, width, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(batch, seq, width, dtype=torch.float64)

    ours = reference.multi_head_attention(x, weights, heads, causal=causal)
    blocked = ~reference.causal_mask(seq) if causal else None  # nn.MultiheadAttention: True blocks
    theirs, their_weights = torch_mha(x, x, x, attn_mask=blocked, need_weights=True, average_attn_weights=False)
    close(ours.output, theirs)
    close(ours.weights, their_weights)
    params = [x, torch_mha.in_proj_weight, torch_mha.out_proj.weight]
    for a, b in zip(torch.autograd.grad(ours.output, params, upstream), torch.autograd.grad(theirs, params, upstream)):
        close(a, b)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_block_matches_transformer_encoder_layer_with_causal_mask(seed, norm_first):
    rng = random.Random(seed)
    torch.manual_seed(seed)
    heads = rng.choice([1, 2, 4])
    width, ff, seq, batch = heads * rng.randint(2, 5), rng.randint(4, 32), rng.randint(1, 8), rng.randint(1, 3)
    layer = nn.TransformerEncoderLayer(width, heads, ff, dropout=0.0, batch_first=True, norm_first=norm_first).double()
    config = reference.GPTConfig(n_embd=width, n_head=heads, block_size=seq, ff_dim=ff, activation="relu",
                                 norm_first=norm_first)
    block = checks.randomize(reference.Block(config), torch.Generator().manual_seed(seed)).double()
    layer.load_state_dict(adapters.encoder_layer_state(block))
    layer.eval()
    block.eval()
    x = torch.randn(batch, seq, width, dtype=torch.float64, requires_grad=True)
    mask = nn.Transformer.generate_square_subsequent_mask(seq, dtype=torch.float64)
    theirs = layer(x, src_mask=mask, is_causal=True)
    ours, _ = block(x)
    close(ours, theirs)
    upstream = torch.randn_like(ours)
    close(torch.autograd.grad(ours, x, upstream)[0], torch.autograd.grad(theirs, x, upstream)[0])


def test_causal_mask_sees_past_and_self_never_future():
    mask = reference.causal_mask(4)
    assert mask.dtype == torch.bool
    assert torch.equal(mask, torch.tril(torch.ones(4, 4, dtype=torch.bool)))
    # With a cache, the 2 new queries line up with the newest of 5 keys.
    assert reference.causal_mask(2, 5).tolist() == [[True, True, True, True, False], [True] * 5]


def test_fully_masked_rows_are_zero_not_nan_in_values_and_gradients():
    q = torch.randn(2, 3, 4, requires_grad=True)
    k, v = torch.randn(2, 5, 4, requires_grad=True), torch.randn(2, 5, 6, requires_grad=True)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1] = False
    for m in (mask, torch.zeros(3, 5).masked_fill(~mask, float("-inf"))):
        att = reference.scaled_dot_product_attention(q, k, v, m)
        assert torch.equal(att.output[:, 1], torch.zeros(2, 6))
        assert torch.equal(att.weights[:, 1], torch.zeros(2, 5))
        grads = torch.autograd.grad(att.output.sum(), (q, k, v))
        assert not any(torch.isnan(g).any() for g in grads)


def test_split_and_merge_heads_are_inverse_and_keep_tokens_apart():
    x = torch.arange(2 * 3 * 8.0).view(2, 3, 8)
    heads = reference.split_heads(x, 4)
    assert heads.shape == (2, 4, 3, 2)
    assert torch.equal(heads[0, 1, 2], x[0, 2, 2:4])  # head 1 of token 2 holds token 2's features 2..3
    assert torch.equal(reference.merge_heads(heads), x)


def test_gpt_loss_generate_and_kv_cache_agree():
    torch.manual_seed(0)
    config = reference.GPTConfig(vocab_size=13, block_size=6, n_layer=2, n_head=2, n_embd=8)
    model = reference.GPT(config).eval()
    idx = torch.randint(13, (3, 4))
    logits, loss = model(idx, idx)
    assert logits.shape == (3, 4, 13) and loss.ndim == 0
    greedy = model.generate(idx, 9, top_k=1)
    assert greedy.shape == (3, 13) and torch.equal(greedy[:, :4], idx)
    assert torch.equal(model.generate(idx, 9, top_k=1, use_cache=True), greedy)
    # One step of the cache gives the logits of a full forward pass.
    cache: list = []
    model(idx[:, :3], cache=cache)
    step, _ = model(idx[:, 3:4], cache=cache)
    close(step[:, -1], logits[:, 3])


def test_sampling_respects_top_k():
    torch.manual_seed(0)
    logits = torch.tensor([[0.0, 5.0, 4.0, -1.0]]).repeat(200, 1)
    tokens = reference.sample_next_token(logits, temperature=1.0, top_k=2)
    assert set(tokens.flatten().tolist()) <= {1, 2}
    assert torch.equal(reference.sample_next_token(logits, top_k=1), torch.full((200, 1), 1))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq, block_q, block_k", [(13, 4, 5), (7, 16, 16), (20, 8, 3), (9, 1, 1)])
def test_tiled_attention_equals_attention_with_its_log_sum_exp_and_gradients(causal, seq, block_q, block_k):
    """FlashAttention's forward (output and log-sum-exp) and its backward by recomputation equal
    plain attention and autograd, in float64, for sequences the blocks do not divide."""
    generator = torch.Generator().manual_seed(seq)
    q, k = (torch.randn(2, 3, seq, 6, generator=generator, dtype=torch.float64, requires_grad=True) for _ in "qk")
    v = torch.randn(2, 3, seq, 5, generator=generator, dtype=torch.float64, requires_grad=True)
    mask = reference.causal_mask(seq) if causal else None
    expected = reference.scaled_dot_product_attention(q, k, v, mask).output
    grad_out = torch.randn(expected.shape, generator=generator, dtype=torch.float64)
    out = reference.FlashAttention.apply(q, k, v, causal, block_q, block_k)
    for got, want in zip(torch.autograd.grad(out, (q, k, v), grad_out),
                         torch.autograd.grad(expected, (q, k, v), grad_out)):
        torch.testing.assert_close(got, want)
    scores = reference.apply_mask(reference.attention_scores(q, k), mask)
    _, lse = reference.flash_forward(q, k, v, causal, block_q, block_k)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(lse, torch.logsumexp(scores, dim=-1))


def test_online_softmax_and_the_merge_of_partial_stats():
    x = torch.randn(4, 23, generator=torch.Generator().manual_seed(0))
    close(reference.online_softmax(x, 5), torch.softmax(x, dim=-1))
    left, right = reference.softmax_stats(x[:, :9]), reference.softmax_stats(x[:, 9:])
    merged = reference.merge_softmax_stats(left, right)
    close(merged.maximum + torch.log(merged.total), torch.logsumexp(x, dim=-1))
    empty = reference.softmax_stats(torch.full((4, 3), float("-inf")))   # a fully masked block merges as nothing
    close(reference.merge_softmax_stats(empty, left).total, left.total)


def test_causal_tiles_skip_the_key_blocks_in_the_future():
    visited = [list(reference.key_blocks(qs, qs + 4, 16, 4, causal=True)) for qs in range(0, 16, 4)]
    assert visited == [[0], [0, 4], [0, 4, 8], [0, 4, 8, 12]]   # 10 of 16 tiles
    assert list(reference.key_blocks(0, 4, 16, 4, causal=False)) == [0, 4, 8, 12]


def test_the_tensor_trace_sees_the_full_score_matrix_of_plain_attention_and_not_of_the_tiled_one():
    """What the memory checks of tiled attention judge: the largest tensor created, the widest
    reduction, what autograd saves and what stays alive, whatever code made them."""
    from transformer_lm.sandboxed import tensor_trace

    q, k, v = (torch.randn(1, 2, 64, 8, requires_grad=True) for _ in "qkv")
    with tensor_trace.trace_tensors() as plain:
        reference.scaled_dot_product_attention(q, k, v).output.sum().backward()
    with tensor_trace.trace_tensors() as tiled:
        out = reference.FlashAttention.apply(q, k, v, False, 16, 16)
    assert plain.largest[-2:] == (64, 64) and (1, 2, 64, 64) in plain.saved and plain.widest >= 64
    assert tensor_trace._numel(tiled.largest) < 64 * 64 and tiled.widest == 16
    assert sorted(tiled.saved) == sorted([(1, 2, 64, 8)] * 4 + [(1, 2, 64)])   # q, k, v, output, lse
    assert tiled.live_bytes == 4 * (out.numel() + 2 * 64)   # the output and the log-sum-exp stay alive


def test_the_tensor_trace_counts_exponentials_and_a_causal_tiled_forward_computes_fewer():
    from transformer_lm.sandboxed import tensor_trace

    q, k, v = (torch.randn(1, 1, 64, 8) for _ in "qkv")
    with tensor_trace.trace_tensors() as full:
        reference.flash_forward(q, k, v, False, 16, 16)
    with tensor_trace.trace_tensors() as causal:
        reference.flash_forward(q, k, v, True, 16, 16)
    assert causal.exponentials / full.exponentials == 10 / 16   # 10 of 16 tiles, and their rescaling


# --------------------------------------------------------------------------------------
# Attention in today's decoders (assignment 06)
# --------------------------------------------------------------------------------------


def test_rope_scores_depend_on_the_distance_between_query_and_key_only():
    q, k = torch.randn(2, 16, dtype=torch.float64).unbind(0)

    def score(m, n):
        rotated_q = reference.apply_rope(q.view(1, 16), torch.tensor([m]))
        rotated_k = reference.apply_rope(k.view(1, 16), torch.tensor([n]))
        return (rotated_q @ rotated_k.T).item()

    assert score(5, 2) == pytest.approx(score(105, 102), rel=1e-12) == pytest.approx(score(3, 0), rel=1e-12)
    assert score(5, 2) != pytest.approx(score(5, 3), rel=1e-3)
    assert torch.equal(reference.apply_rope(q.view(1, 16), torch.tensor([0])), q.view(1, 16))   # position 0: no turn


def test_rope_is_llamas_rotary_embedding_in_transformers():
    """Held to a widely used implementation: Llama's rotary embedding and its application in
    Hugging Face transformers (which compute in float32), with Llama 3's base and per-sequence
    positions that do not start at 0, as with left padding or a cache."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    base = 500000.0
    config = LlamaConfig(hidden_size=96, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         rope_parameters={"rope_type": "default", "rope_theta": base})
    q, k = torch.randn(2, 4, 9, 24), torch.randn(2, 2, 9, 24)
    positions = torch.stack([torch.arange(3, 12), torch.arange(1000, 1009)])
    cos, sin = LlamaRotaryEmbedding(config)(q, positions)
    theirs_q, theirs_k = apply_rotary_pos_emb(q, k, cos, sin)
    # transformers takes its angles in float32, which at position ~1000 are off by ~1000 * 2**-24
    # radians; the reference's are float64. A wrong convention would be off by about 1.
    torch.testing.assert_close(reference.apply_rope(q, positions, base), theirs_q, rtol=0, atol=5e-4)
    torch.testing.assert_close(reference.apply_rope(k, positions, base), theirs_k, rtol=0, atol=5e-4)
    near = positions[:1]   # positions 3..11: float32 angles are exact to ~1e-6 there
    torch.testing.assert_close(reference.apply_rope(q[:1], near, base), theirs_q[:1], rtol=0, atol=2e-5)


def test_grouped_query_attention_with_as_many_key_value_heads_is_multi_head_attention():
    gqa = reference.GroupedQueryAttention(24, 4, 4).double()
    x, positions = torch.randn(2, 7, 24, dtype=torch.float64), torch.arange(7)
    out, _ = gqa(x, positions)
    q = reference.apply_rope(reference.split_heads(gqa.q_proj(x), 4), positions)
    k = reference.apply_rope(reference.split_heads(gqa.k_proj(x), 4), positions)
    v = reference.split_heads(gqa.v_proj(x), 4)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, gqa.o_proj(reference.merge_heads(expected)))


def test_grouped_query_heads_share_their_key_value_head_and_a_cache_changes_nothing():
    gqa = reference.GroupedQueryAttention(16, 4, 2, rope_base=100.0).double()   # query heads 0, 1 share head 0
    x, positions = torch.randn(3, 6, 16, dtype=torch.float64), torch.arange(10, 16)
    whole, (keys, values) = gqa(x, positions)
    assert keys.shape == values.shape == (3, 2, 6, 4)
    first, cache = gqa(x[:, :4], positions[:4])
    rest, _ = gqa(x[:, 4:], positions[4:], cache=cache)
    torch.testing.assert_close(torch.cat([first, rest], dim=1), whole)
    expanded = reference.repeat_kv(keys, 2)
    assert torch.equal(expanded[:, 0], expanded[:, 1]) and torch.equal(expanded[:, 2], keys[:, 1])
    mqa = reference.GroupedQueryAttention(16, 4, 1)
    assert mqa.k_proj.weight.shape == (4, 16) and mqa(x.float(), positions)[0].shape == (3, 6, 16)


def test_a_sliding_window_sees_at_most_window_keys_itself_included():
    mask = reference.sliding_window_mask(6, window=3)
    assert mask.sum(dim=-1).tolist() == [1, 2, 3, 3, 3, 3]
    assert mask[5].tolist() == [False, False, False, True, True, True]
    cached = reference.sliding_window_mask(2, 6, window=3)   # the last two queries of six keys
    assert torch.equal(cached, mask[4:])
    assert torch.equal(reference.sliding_window_mask(5, window=5), reference.causal_mask(5))


def test_left_padded_prompts_count_positions_from_their_first_token_and_never_see_padding():
    attention_mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert reference.left_padded_positions(attention_mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]
    allowed = reference.padded_causal_mask(attention_mask)
    assert allowed.shape == (2, 1, 5, 5) and not allowed[0, 0, :, :2].any()
    assert torch.equal(allowed[1, 0], reference.causal_mask(5))
    # A padded prompt gives the outputs of the same prompt alone, at its real positions.
    gqa = reference.GroupedQueryAttention(8, 2, 1).double()
    x = torch.randn(1, 3, 8, dtype=torch.float64)
    alone, _ = gqa(x, torch.arange(3))
    padded = torch.cat([torch.randn(1, 2, 8, dtype=torch.float64), x], dim=1)
    out, _ = gqa(padded, reference.left_padded_positions(attention_mask[:1]), reference.padded_causal_mask(attention_mask[:1]))
    torch.testing.assert_close(out[:, 2:], alone)


def test_the_kv_cache_of_a_llama_3_8b_shaped_model():
    """32 layers, 8 key/value heads of 128 in bf16: 128 KiB per token, 1 GiB at 8192 tokens;
    with 32 key/value heads (multi-head) four times that, with one (multi-query) an eighth."""
    per_token = reference.kv_cache_bytes(32, 8, 128, 1)
    assert per_token == 128 * 2**10
    assert reference.kv_cache_bytes(32, 8, 128, 8192) == 2**30
    assert reference.kv_cache_bytes(32, 32, 128, 8192) == 4 * 2**30
    assert reference.kv_cache_bytes(32, 1, 128, 8192, batch=4, dtype=torch.float32) == 2**30
