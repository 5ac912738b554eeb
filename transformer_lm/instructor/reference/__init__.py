"""The course's one correct implementation of every concept it teaches.

Checks, hints, hidden grading and the mistake catalog all compute their expected values
here, so a fix in this package fixes every place that grades against it. The code favours
plain tensor operations that a student can read line by line over speed.

Conventions, the same as PyTorch's own ``F.scaled_dot_product_attention``:

* tensors are ``(..., seq, features)``; heads sit just before ``seq``: ``(..., heads, seq, head_dim)``;
* a boolean ``attn_mask`` is True where a query *may* attend to a key;
* a float ``attn_mask`` is *added* to the scores (``-inf`` blocks, ``0`` keeps);
* linear weights use ``nn.Linear``'s layout ``(out_features, in_features)``: ``y = x @ W.T + b``.

A query row whose keys are all masked gets zero weights and a zero output, never NaN (such rows
appear with left padding), as ``F.scaled_dot_product_attention`` of torch 2.13 gives on the CPU;
a softmax written as ``exp / sum`` gives NaN there.

One module per concept, each building only on those before it:

* :mod:`~transformer_lm.instructor.reference.attention`: masks, scores, the masked softmax, scaled dot-product
  and multi-head attention;
* :mod:`~transformer_lm.instructor.reference.gpt`: minGPT, its attention module, block and model, and sampling;
* :mod:`~transformer_lm.instructor.reference.tiled`: the online softmax and tiled (Flash) attention;
* :mod:`~transformer_lm.instructor.reference.decoder`: today's decoders: rotary positions, grouped-query
  attention, sliding windows, left-padded batches.

Every name is used as ``reference.X`` (``from transformer_lm import reference``), never by its
module. A late run of the grader gets the parts of these modules its stand-ins use as one text
(:func:`autograder.reading.course_code.reference_source`), so a top-level name is defined in one module
only, and a module takes another's names with ``from transformer_lm.instructor.reference.<module> import ...``.
"""

from transformer_lm.instructor.reference.attention import (Attention, AttentionWeights, apply_mask, attention_scores,
                                                           causal_mask, combine_masks, masked_softmax, merge_heads,
                                                           multi_head_attention, scaled_dot_product_attention,
                                                           split_heads)
from transformer_lm.instructor.reference.decoder import (GroupedQueryAttention, apply_rope, generate_padded,
                                                         kv_cache_bytes, left_pad, left_padded_positions,
                                                         padded_causal_mask, padded_inputs, repeat_kv, rope_cos_sin,
                                                         rope_inverse_frequencies, rotate_half, sliding_window_mask)
from transformer_lm.instructor.reference.gpt import (GPT, Block, GPTConfig, MultiHeadSelfAttention, sample_next_token,
                                                     sampling_probabilities)
from transformer_lm.instructor.reference.tiled import (FlashAttention, SoftmaxStats, flash_backward, flash_forward,
                                                       key_blocks, merge_softmax_stats, online_softmax, rescale,
                                                       softmax_stats, streamed_stats, tile_scores)

__all__ = [
    # attention
    "causal_mask", "attention_scores", "apply_mask", "masked_softmax", "Attention", "scaled_dot_product_attention",
    "combine_masks", "split_heads", "merge_heads", "AttentionWeights", "multi_head_attention",
    # gpt
    "GPTConfig", "MultiHeadSelfAttention", "Block", "GPT", "sampling_probabilities", "sample_next_token",
    # tiled
    "SoftmaxStats", "softmax_stats", "rescale", "merge_softmax_stats", "streamed_stats", "online_softmax", "key_blocks",
    "tile_scores",
    "flash_forward", "flash_backward", "FlashAttention",
    # decoder
    "rope_inverse_frequencies", "rotate_half", "rope_cos_sin", "apply_rope", "repeat_kv", "sliding_window_mask",
    "left_padded_positions", "padded_causal_mask", "GroupedQueryAttention", "kv_cache_bytes", "left_pad",
    "padded_inputs", "generate_padded",
]
