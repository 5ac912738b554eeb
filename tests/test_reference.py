"""The reference agrees with PyTorch's own attention, layers and conventions."""

import random

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from transformer_lm import adapters, checks, reference
from transformer_lm.reference import AttentionWeights

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
    from transformer_lm.sandboxed import probes

    q, k, v = (torch.randn(1, 2, 64, 8, requires_grad=True) for _ in "qkv")
    with probes.trace_tensors() as plain:
        reference.scaled_dot_product_attention(q, k, v).output.sum().backward()
    with probes.trace_tensors() as tiled:
        out = reference.FlashAttention.apply(q, k, v, False, 16, 16)
    assert plain.largest[-2:] == (64, 64) and (1, 2, 64, 64) in plain.saved and plain.widest >= 64
    assert probes._numel(tiled.largest) < 64 * 64 and tiled.widest == 16
    assert sorted(tiled.saved) == sorted([(1, 2, 64, 8)] * 4 + [(1, 2, 64)])   # q, k, v, output, lse
    assert tiled.live_bytes == 4 * (out.numel() + 2 * 64)   # the output and the log-sum-exp stay alive


def test_the_tensor_trace_counts_exponentials_and_a_causal_tiled_forward_computes_fewer():
    from transformer_lm.sandboxed import probes

    q, k, v = (torch.randn(1, 1, 64, 8) for _ in "qkv")
    with probes.trace_tensors() as full:
        reference.flash_forward(q, k, v, False, 16, 16)
    with probes.trace_tensors() as causal:
        reference.flash_forward(q, k, v, True, 16, 16)
    assert causal.exponentials / full.exponentials == 10 / 16   # 10 of 16 tiles, and their rescaling
