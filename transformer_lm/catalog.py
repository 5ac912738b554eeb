"""The catalogue of typical mistakes, in words: each one's name, its title, the hint a student
reads, and the flaws that make it (which step goes wrong, as a flag).

This is the part of the catalogue that names mistakes: visible checks and the grader name a
mistake with it. What each mistake computes, the deliberately breakable twins of the reference
that the flaws switch on, is in :mod:`transformer_lm.instructor.mistakes`, on the instructor's side with the
reference.

The five families of mistakes below are the course's own (today's decoders' in
:mod:`transformer_lm.decoder_catalog`). A concept added later writes its
mistakes beside its reference, in a :class:`transformer_lm.instructor.mistake_family.MistakeFamily`, which
:func:`register` adds to :data:`BY_NAME` when the concept's module is imported; such a mistake
has no flaws, since its family computes it with functions of its own. On the instructor's side,
:func:`transformer_lm.instructor.concepts.modules` imports every concept module it finds, so the audit and
the visible checks know every concept's mistakes without an import of each (this module, which
students receive, never imports the instructor's side).
"""

from __future__ import annotations

from transformer_lm.basics_catalog import BASICS_ATTENTION, BASICS_NAMED
from transformer_lm.decoder_catalog import DECODER
from transformer_lm.flaws import Flaws, GenerationFlaws, TilingFlaws
from transformer_lm.mistake import NAMES, Mistake  # noqa: F401 - named by the checks as catalog.Mistake

def revealed_by(features: set[str] | frozenset[str]) -> list[Mistake]:
    """The catalogued mistakes that a test with ``features`` can tell apart by what it outputs
    (dropout left on in eval mode shows by two calls giving two outputs instead)."""
    return [mistake for mistake in ATTENTION + PYTORCH_ATTENTION + SHAPES + BASICS_ATTENTION
            if mistake.visible_in(features) and mistake.name != "dropout_in_eval"]


def tiling_mistakes(shows_with: str) -> list[Mistake]:
    """The catalogued mistakes of tiled attention that show in ``"merge"``, ``"online"`` (the
    online softmax's values), ``"forward"`` and ``"causal"`` (the tiled forward's), ``"backward"``
    (its gradients), ``"work"`` (the tiles a causal forward computes) or ``"memory"``."""
    return [mistake for mistake in TILING if shows_with in mistake.shows_with]


def decoder_mistakes(shows_with: str) -> list[Mistake]:
    """The catalogued mistakes of today's decoders that show in ``"rope"``, ``"gqa"``,
    ``"padded_gqa"`` (a layer given a left-padded batch's mask), ``"window"``, ``"cached_causal"`` and
    ``"cached_window"`` (a layer given a cache and no mask, without and with a window), ``"padding"``,
    ``"cache"`` (the positions of generation with a KV cache), ``"generation"`` (how it calls the
    model) or ``"bytes"`` (the size of a KV cache)."""
    return [mistake for mistake in DECODER if shows_with in mistake.shows_with]


def generation_mistakes(shows_with: str) -> list[Mistake]:
    """The catalogued mistakes of sampling and generation that show in ``"sampling"``, in
    ``"generation"`` (greedy tokens without a cache), in ``"cache"`` (with a KV cache) or in ``"cache_steps"``
    (the right tokens, with the model run on other numbers of tokens per step)."""
    return [mistake for mistake in GENERATION if shows_with in mistake.shows_with]


ATTENTION: tuple[Mistake, ...] = (
    Mistake(
        "softmax_wrong_dim", "softmax over the wrong dimension",
        "Each query's weights over the keys must sum to 1, so apply the softmax over the last "
        "dimension (dim=-1). On batched scores (batch, queries, keys), dim=1 normalises over the "
        "queries instead.",
        Flaws(softmax_dim=-2),
    ),
    Mistake(
        "no_scaling", "scores not scaled by 1/sqrt(d_k)",
        "Divide the scores q @ k^T by sqrt(d_k), the width of one head's keys, before the softmax; "
        "unscaled scores grow with the width and saturate the softmax.",
        Flaws(scale="none"),
    ),
    Mistake(
        "scaled_by_model_width", "scores scaled by the model width instead of the head width",
        "With several heads, d_k is the width of one head ({d_out} // {num_heads}), not {d_out}: "
        "scale by 1/sqrt({head_dim}).",
        Flaws(scale="model"), frozenset({"heads"}),
    ),
    Mistake(
        "mask_filled_with_zero", "masked scores filled with 0 instead of -inf",
        "A masked score of 0 still gets weight after the softmax (e^0 = 1). Fill the masked scores "
        "with float('-inf') so that their weight is exactly 0.",
        Flaws(masked_fill=0.0), frozenset({"mask", "causal"}),
    ),
    Mistake(
        "mask_hides_diagonal", "the causal mask also hides the current token",
        "A token may attend to itself and to the past, only the future is hidden: block "
        "torch.triu(..., diagonal=1), or keep torch.tril(...) with its diagonal.",
        Flaws(causal_diagonal=-1), frozenset({"causal"}),
    ),
    Mistake(
        "mask_leaks_next_token", "the causal mask lets each token see the next one",
        "The mask is off by one: it must block every key after the query, starting with the very next one. "
        "Query i's future begins at key i + 1, one place above the diagonal; a mask whose band starts one "
        "place further out still lets each token see the token after it.",
        Flaws(causal_diagonal=1), frozenset({"causal"}),
    ),
    Mistake(
        "mask_after_softmax", "the mask applied after the softmax, without renormalising",
        "Mask the scores before the softmax (fill them with -inf), so that each row's weights over the "
        "allowed keys sum to 1. Weights zeroed after the softmax no longer sum to 1, unless each row is "
        "divided by its new sum.",
        Flaws(mask_after_softmax=True), frozenset({"mask", "causal"}),
    ),
    Mistake(
        "inverted_mask", "the boolean mask is inverted",
        "Here, as in F.scaled_dot_product_attention, True means 'may attend'. masked_fill fills "
        "where its condition is True, so fill where the mask is False (~mask). "
        "(nn.MultiheadAttention uses the opposite convention: True blocks.)",
        Flaws(invert_mask=True), frozenset({"mask", "causal"}),
    ),
    Mistake(
        "split_heads_without_transpose", "heads split with view but no transpose",
        "Split ({batch}, {seq}, {d_out}) with .view({batch}, {seq}, {num_heads}, {head_dim}) and then "
        ".transpose(1, 2). A direct .view({batch}, {num_heads}, {seq}, {head_dim}) has the right shape "
        "but mixes tokens into the wrong heads.",
        Flaws(split_without_transpose=True), frozenset({"heads"}),
    ),
    Mistake(
        "merge_heads_without_transpose", "heads merged with view but no transpose",
        "Before merging, .transpose(1, 2) back to ({batch}, {seq}, {num_heads}, {head_dim}), then "
        ".contiguous().view({batch}, {seq}, {d_out}). A direct view interleaves tokens and heads.",
        Flaws(merge_without_transpose=True), frozenset({"heads"}),
    ),
    Mistake(
        "missing_output_projection", "no output projection after merging the heads",
        "After the heads are merged, apply the output projection layer (out_proj, mix or proj) "
        "so that the heads' outputs are mixed.",
        Flaws(skip_output_projection=True), frozenset({"projection"}),
    ),
    Mistake(
        "dropout_in_eval", "dropout still active in eval mode",
        "Dropout must only act in training. Use the nn.Dropout module stored on self, which "
        "model.eval() switches off; F.dropout(x, p) without training=self.training is always on.",
        Flaws(dropout_in_eval=0.5), frozenset({"dropout"}),
    ),
    Mistake(
        "scaled_by_input_width", "scores scaled by the input's width instead of the keys' width",
        "d_k is the width of the keys that each query is compared with, the width that the key layer "
        "outputs (for several heads, one head's share of it). The input x, which the layers take in, "
        "has a width of its own: scale the scores by 1/sqrt(d_k), not by 1/sqrt of x's last dimension.",
        Flaws(scale="input"), frozenset({"input_width"}),
    ),
)

PYTORCH_ATTENTION: tuple[Mistake, ...] = (
    Mistake(
        "float_mask_ignored", "a float mask left out of the scores",
        "A float attn_mask is added to the scores before the softmax, as in F.scaled_dot_product_attention: "
        "0 keeps a score, -inf blocks it, and any other number shifts it. Code that applies only a boolean mask "
        "must handle a float one too, by adding it to the scores.",
        Flaws(float_mask_ignored=True), frozenset({"float_mask"}),
    ),
)
"""Mistakes of attention written as PyTorch's functions and layers take it (assignment 03): a float
mask."""

SHAPES: tuple[Mistake, ...] = (
    Mistake(
        "squeezed_size_one", "dimensions of size 1 squeezed out of the result",
        ".squeeze() without an argument removes every dimension of size 1, so a batch of one sequence, a "
        "sequence of one token or a single head loses its dimension as well, and the result comes out with "
        "too few dimensions. Keep every dimension of the result, whatever its size: leave the .squeeze() out, "
        "or name the one dimension to remove (.squeeze(-1) removes the last one, and only if its size is 1).",
        Flaws(squeezed=True), frozenset({"size_one"}),
    ),
)
"""Mistakes in the shape of what an attention function, class or layer returns, named by its record as
the mistakes of :data:`ATTENTION` are; the twin's record is the reference's, reshaped as the mistake
reshapes it."""

CONSTRUCTOR: tuple[Mistake, ...] = (
    Mistake(
        "heads_not_checked", "no ValueError for a width that the heads cannot share",
        "When num_heads does not divide the width to share (d_out, or hidden), the heads cannot have the same "
        "width: the constructor must raise a ValueError that names both numbers, before it builds a layer. Without that check, the integer "
        "division drops the remainder and the heads cover only part of the features: forward then fails far "
        "from the cause, or quietly leaves the rest out. An assert raises an AssertionError instead, and "
        "python -O skips it.",
    ),
    Mistake(
        "linear_sizes_swapped", "nn.Linear given the output's width before the input's",
        "nn.Linear(in_features, out_features) takes the width of what comes in first: nn.Linear(input_size, "
        "hidden) maps input_size features to hidden. Its weight is stored the other way round, with shape "
        "(out_features, in_features), (hidden, input_size) here, which makes the two easy to swap.",
    ),
    Mistake(
        "layers_without_bias", "the layers made without their biases (bias=False)",
        "nn.Linear adds a bias unless it is made with bias=False, as assignment 01's qkv_bias=False makes it. "
        "The layers q, k and v each need their bias: leave bias at its default, True.",
    ),
)
"""Mistakes of an attention class's constructor that a check of what it raises, or of its layers'
shapes, names."""

GENERATION: tuple[Mistake, ...] = (
    Mistake(
        "sampling_greedy", "the most likely token every time instead of a draw",
        "sample_next_token draws a token at random from the distribution (the softmax of the tempered logits over "
        "the top_k), by its probabilities, as torch.multinomial does, instead of taking the most likely one every "
        "time. argmax is the special case top_k=1, not the rule.",
        GenerationFlaws(greedy=True), frozenset({"sampling"}),
    ),
    Mistake(
        "temperature_multiplied", "the logits multiplied by the temperature instead of divided",
        "Divide the logits by the temperature: a temperature below 1 sharpens the distribution, above 1 "
        "flattens it. Multiplying does the opposite.",
        GenerationFlaws(temperature="multiply"), frozenset({"sampling"}),
    ),
    Mistake(
        "temperature_ignored", "the temperature changes nothing",
        "Divide the logits by the temperature before the softmax. Dividing the probabilities after it "
        "changes nothing: torch.multinomial renormalises them.",
        GenerationFlaws(temperature="ignore"), frozenset({"sampling"}),
    ),
    Mistake(
        "top_k_index_not_mapped", "the position among the top k returned as the token",
        "torch.topk returns (values, indices): a draw among the top k values gives a position 0..k-1; "
        "map it back to the token id with indices.gather(-1, position), or mask the other logits with -inf "
        "and draw from the whole vocabulary.",
        GenerationFlaws(top_k_unmapped=True), frozenset({"sampling", "generation", "cache"}),
    ),
    Mistake(
        "context_cropped_to_first_tokens", "the context cropped to its first block_size tokens",
        "When the sequence outgrows block_size, the model must read its most recent block_size tokens, the ones "
        "just before the token to predict. Keeping the first block_size tokens keeps the oldest ones, and the "
        "model predicts from a context that stopped growing.",
        GenerationFlaws(crop_first=True), frozenset({"generation", "cache"}),
    ),
    Mistake(
        "cache_positions_not_offset", "positions start at 0 again for the tokens after the cache",
        "With a KV cache, the new tokens come after the cached ones: their position embeddings start at the "
        "number of tokens already in the cache, not at position 0 again.",
        GenerationFlaws(positions_from_zero=True), frozenset({"cache"}),
    ),
    Mistake(
        "cache_restarted_early", "the KV cache restarted while it still had room for one token",
        "The cache holds up to block_size tokens. Feed one new token per step while the cache holds fewer than "
        "block_size, and restart it from the last block_size tokens only once it is full. Restarting one step "
        "sooner gives the same tokens, but runs the model on the whole context more often than it needs to.",
        GenerationFlaws(restart_early=True), frozenset({"cache_steps"}),
    ),
    Mistake(
        "loss_summed", "the loss summed over the positions instead of averaged",
        "The loss is the mean cross-entropy over the positions that count, F.cross_entropy's default "
        "(reduction='mean'). A sum grows with the batch and the sequence length, and so does the size of every "
        "gradient step.",
        None, frozenset({"loss"}),
    ),
    Mistake(
        "loss_mean_over_ignored", "the positions whose target is -1 counted in the mean",
        "A position whose target is -1 must not count at all: zeroing its loss still divides the sum by every "
        "position, which makes the loss too small. Divide by the number of positions that count, "
        "(targets != -1).sum(), or pass ignore_index=-1 to F.cross_entropy, which does both.",
        None, frozenset({"loss"}),
    ),
)
"""Mistakes of minGPT (assignment 04): of sampling, of generation with and without a KV cache, and of
the loss, which :class:`transformer_lm.gpt_judges.LossJudge` names."""

TILING: tuple[Mistake, ...] = (
    Mistake(
        "total_not_rescaled", "the running sum not rescaled when the maximum grows",
        "Every exponential summed so far was taken against the old maximum m. When a block raises a row's "
        "maximum to m_new, multiply the running sum by exp(m - m_new) before adding the block's own sum.",
        TilingFlaws(total_not_rescaled=True), frozenset({"merge", "online", "forward", "causal"}),
    ),
    Mistake(
        "empty_merge_nan", "two empty parts merged into NaN",
        "When both parts of a row are still empty (maximum -inf, sum 0), the new maximum is -inf too, and the "
        "factor that rescales a part is the exp of -inf minus -inf: NaN, which spreads into the sum and the "
        "output. An empty part has nothing to rescale: guard the case where its maximum is -inf and give it the "
        "factor 0, so that the merged row stays empty, -inf and 0.",
        TilingFlaws(unguarded_rescale=True), frozenset({"merge"}),
    ),
    Mistake(
        "output_not_rescaled", "the running output not rescaled when the maximum grows",
        "The running output is a sum of exp(s - m) * v taken against the old maximum m. When a tile raises "
        "the maximum to m_new, multiply it by exp(m - m_new) before adding the tile's exp(s - m_new) @ v, "
        "as you do for the running sum.",
        TilingFlaws(output_not_rescaled=True), frozenset({"forward", "causal"}),
    ),
    Mistake(
        "global_maximum", "one maximum for all rows instead of each row's running maximum",
        "Any number subtracted before exp gives the same softmax in exact arithmetic, but in float32 "
        "exp(-104) is already 0: a row whose scores lie far below another row's maximum becomes 0 / 0 = NaN. "
        "Keep one running maximum per query row, taken over the keys only (amax(dim=-1)).",
        TilingFlaws(global_maximum=True), frozenset({"online", "forward", "causal"}),
    ),
    Mistake(
        "lse_without_max", "the log-sum-exp without the maximum",
        "The running sum l adds exp(s - m), so log(l) is the log-sum-exp minus the maximum: return m + log(l).",
        TilingFlaws(lse_without_max=True), frozenset({"forward", "causal"}),
    ),
    Mistake(
        "causal_skip_misses_diagonal", "causal skipping stops one key block too early",
        "The last query of a block may see every key up to its own position, so the key block on the "
        "diagonal must be computed, with the mask inside it: visit the key blocks that start before the "
        "query block ends (key_start < query_stop), not before it starts.",
        TilingFlaws(causal_blocks="miss_diagonal"), frozenset({"causal", "work"}),
    ),
    Mistake(
        "future_blocks_computed", "key blocks wholly in the future computed under the causal mask",
        "With causal=True, the key blocks that start at or after the query block's end are all masked: "
        "skip them (range(0, min(T_k, query_stop), block_k)) instead of computing them and masking every score.",
        TilingFlaws(causal_blocks="all"), frozenset({"work"}),
    ),
    Mistake(
        "delta_from_tile", "D computed from one tile instead of rowsum(dO * O)",
        "D_i = sum_j P_ij dP_ij runs over every key of row i, which no single tile holds; it equals "
        "rowsum(dO * O) over the output's features. Compute it once per row, before the loop over tiles.",
        TilingFlaws(delta_from_tile=True), frozenset({"backward"}),
    ),
    Mistake(
        "delta_left_out", "D left out of the scores' gradient",
        "A row's weights sum to 1, so raising one lowers the others: the softmax's gradient takes from each dP "
        "the row's mean of dP weighted by the weights, D (which equals the row sum of dO times O), before it "
        "multiplies by the weights. Without D, dq and dk come out wrong (dv does not need it). Compute D once "
        "per query row, before the loop over tiles.",
        TilingFlaws(delta_left_out=True), frozenset({"backward"}),
    ),
    Mistake(
        "dk_unscaled", "dk without the scale of the scores",
        "The scores were q k^T multiplied by the scale 1 / sqrt(d), so the chain rule carries that factor into "
        "the gradients of both of their factors: dk needs the scale as much as dq does.",
        TilingFlaws(dk_unscaled=True), frozenset({"backward"}),
    ),
    Mistake(
        "full_score_matrix", "the whole (T_q, T_k) score matrix built",
        "A tiled attention never holds more than one (block_q, block_k) tile of scores per batch and head: "
        "compute each tile's scores inside the loop over key blocks, fold them into the running maximum, sum "
        "and output, and let them go. Even a boolean (T_q, T_k) mask grows with T^2: build each tile's mask "
        "from the positions of its rows and columns.",
        TilingFlaws(full_scores=True), frozenset({"memory"}),
    ),
    Mistake(
        "full_row_reduction", "a max or sum over a whole row of keys at once",
        "Take the maximum and the sum over one tile's keys (block_k of them) at a time and merge them into "
        "the running statistics; a reduction over every key of a row needs that whole row in memory.",
        TilingFlaws(full_row=True), frozenset({"memory"}),
    ),
    Mistake(
        "backward_full_matrix", "the backward rebuilds the whole (T_q, T_k) weight matrix",
        "Recompute the weights one tile at a time, P = exp(S_tile - lse), inside the loop over tiles, and "
        "add each tile's share to dq, dk and dv; the whole matrix is what the log-sum-exp lets you avoid.",
        TilingFlaws(backward_full=True), frozenset({"backward_memory"}),
    ),
    Mistake(
        "saves_more_than_needed", "the forward keeps more than q, k, v, the output and the log-sum-exp",
        "Save exactly q, k, v, the output and the log-sum-exp with ctx.save_for_backward, and keep nothing "
        "else that grows with T (no tiles of weights on ctx or in a list): the backward recomputes the rest.",
        TilingFlaws(saves_weights=True), frozenset({"backward_memory"}),
    ),
    Mistake(
        "tile_mask_hides_diagonal", "the causal mask inside the tiles also hides each query's own key",
        "Query i sees keys 0 to i, its own key included: inside a tile that crosses the diagonal, hide only the "
        "keys whose position is larger than the query's. Hiding the equal position too leaves query 0 no key at "
        "all (its row comes out NaN) and takes every other query's own key out of its average. The backward "
        "recomputes the same tiles, so its mask must be the forward's.",
        TilingFlaws(tile_diagonal=-1), frozenset({"causal", "backward"}),
    ),
    Mistake(
        "tile_mask_leaks_next_token", "the causal mask inside the tiles lets each query see the next key",
        "The mask inside a tile is off by one: query i may see keys 0 to i, so hide every key whose position is "
        "larger than the query's. Hiding only those beyond i + 1 lets a query see the token after it, the very "
        "one it should predict. The backward recomputes the same tiles, so its mask must be the forward's.",
        TilingFlaws(tile_diagonal=1), frozenset({"causal", "backward"}),
    ),
    Mistake(
        "tile_no_scaling", "the scores of the tiles not scaled by 1/sqrt(d)",
        "Each tile's scores are q k^T times 1 / sqrt(d), d the width of q and k, taken before the maximum and the "
        "exponentials; unscaled, the weights and the log-sum-exp are those of a sharper softmax. The backward "
        "recomputes the weights exp(S - lse) from the same scaled scores S, and multiplies dq and dk by the scale "
        "as well.",
        TilingFlaws(scores_unscaled=True), frozenset({"forward", "causal", "backward"}),
    ),
)

CATALOG: tuple[Mistake, ...] = (ATTENTION + PYTORCH_ATTENTION + SHAPES + CONSTRUCTOR + GENERATION + TILING + DECODER
                                 + BASICS_ATTENTION + BASICS_NAMED)

BY_NAME: dict[str, Mistake] = {mistake.name: mistake for mistake in CATALOG}
"""Every mistake by name: the catalogue's own, and those a concept's family registered."""


def register(mistakes) -> None:
    """Adds ``mistakes`` to :data:`BY_NAME`, so that reports, the audit and stored checks can name
    them. Registering a mistake again is harmless; a second, different mistake under a name
    already taken is refused, since a report could then name the wrong one."""
    for mistake in mistakes:
        known = BY_NAME.setdefault(mistake.name, mistake)
        if known != mistake:
            raise ValueError(f"two different mistakes are named {mistake.name!r}: {known.title!r} and "
                             f"{mistake.title!r}; give the new one another name")
