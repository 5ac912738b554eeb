"""Hidden checks of assignment 02 (self-attention and multi-head attention, seed 003).

The notebook's public values use 3 sequences of 5 tokens, input_size 7, hidden 9 and 3 heads;
these use other sizes: single-token sequences, a batch of one, one head and many, hidden
equal to input_size and not. Every attention check compares the output, the gradients of the
input and of every layer and, for ``MultiHeadSelfAttention``, the probabilities it returns in
the ``(batch * num_heads, seq, seq)`` layout (the adapter's ``weights_layout``). Inputs come
from the course's secret seed.

Three items grade the one ``MultiHeadSelfAttention`` answer cell, each its own step as seed
003's rubric splits them: the scores item judges the attention weights without a mask, the mask
item the weights under the causal mask, and the output item the output and every gradient (with
dropout in eval mode) plus the ``ValueError``. A mistake in the weights that the output shows too
is charged once, to the item of its step (:mod:`autograder.reading.spec`). The PEP 8
deduction of each task comes off its first ``forward`` item: ``self_attention_forward`` and
``mha_scores``. The written answers q1 to q5 are graded by hand and have no hidden checks.
``self_attention_forward`` builds on ``self_attention_init``: when the layers are wrong (the
check of the layers names ``nn.Linear`` given its sizes the other way round, and layers made
without their biases), ``forward`` is graded with the course's layers in the student's class
(the stand-in), so that the constructor's mistake costs its point alone.

A case wrapped in ``Also`` is one more case of the check before it: the same purpose on other
sizes. Each item's checks are then what some catalogued mistake fails alone (the audit holds
this): the values on several tokens, which the softmax's dimension and the scaling fail (and,
for ``SelfAttention``, a scale by the input's width, where hidden != input_size); the sizes of
one, where a ``.squeeze()`` loses a dimension; the ``ValueError``, which a constructor that does
not check the head count leaves out. The mask item is one check: no mistake of the mask fails
its single token alone.
"""

from autograder.reading.spec import Also, Item
from transformer_lm.instructor import adapters
from transformer_lm.instructor.cases import AttentionCase, linear_shapes
from transformer_lm.forbidding import LIBRARY_ATTENTION
from transformer_lm.instructor.kinds import AttentionCheck, ParametersCheck, RaisesCheck

SA = adapters.SELF_ATTENTION
MHA = adapters.MULTI_HEAD_SELF_ATTENTION


def layers_of(input_size, hidden):
    """The check of ``SelfAttention``'s layers ``q``, ``k`` and ``v`` for these sizes, with the
    shapes that each catalogued mistake of the constructor makes, so that a failure is named."""
    return ParametersCheck("SelfAttention", {"input_size": input_size, "hidden": hidden},
                           linear_shapes("qkv", input_size, hidden),
                           {"linear_sizes_swapped": linear_shapes("qkv", hidden, input_size),
                            "layers_without_bias": linear_shapes("qkv", input_size, hidden, bias=False)})


def mha(batch, seq, d_in, hidden, num_heads, judges=(), **switches):
    """A ``MultiHeadSelfAttention`` case: ``mix`` is the output projection."""
    return AttentionCheck("MultiHeadSelfAttention", MHA,
                          AttentionCase(batch=batch, seq=seq, d_in=d_in, d_out=hidden, num_heads=num_heads,
                                        out_proj=True, **switches),
                          judges)


def weights_of(batch, seq, d_in, hidden, num_heads, **switches):
    """A case that judges only the attention weights: the step of the scores and mask items."""
    return mha(batch, seq, d_in, hidden, num_heads, judges=("weights",), **switches)


ITEMS = [
    Item("self_attention_init", points=1, checks=(
        layers_of(5, 12),
        Also(layers_of(16, 4)),
    ), forbids=LIBRARY_ATTENTION, answer="self_attention", defines=("SelfAttention",)),
    Item("self_attention_forward", points=3, checks=(
        # the values: several sequences of several tokens, hidden != input_size
        AttentionCheck("SelfAttention", SA, AttentionCase(batch=4, seq=6, d_in=5, d_out=8)),
        # wide: unscaled scores saturate
        Also(AttentionCheck("SelfAttention", SA, AttentionCase(batch=2, seq=4, d_in=3, d_out=32))),
        # sizes of one: a single token, then a batch of one with hidden == input_size
        AttentionCheck("SelfAttention", SA, AttentionCase(batch=3, seq=1, d_in=4, d_out=6)),
        Also(AttentionCheck("SelfAttention", SA, AttentionCase(batch=1, seq=9, d_in=6, d_out=6))),
    ), forbids=LIBRARY_ATTENTION, answer="self_attention", style_deduction=1, builds_on=("self_attention_init",)),
    Item("mha_scores", points=3, checks=(
        # the weights of several tokens
        weights_of(2, 6, 5, 8, 4),
        Also(weights_of(3, 4, 6, 6, 1)),     # one head: head_size == hidden
        Also(weights_of(1, 7, 4, 12, 6)),    # a batch of one, many small heads
        weights_of(2, 1, 3, 6, 3),           # a single token
    ), forbids=LIBRARY_ATTENTION, answer="multihead_self_attention", style_deduction=1),
    Item("mha_causal_mask", points=1, checks=(
        weights_of(2, 6, 5, 8, 2, causal=True),
        Also(weights_of(3, 1, 4, 6, 3, causal=True)),    # a single token sees only itself
        Also(weights_of(1, 7, 3, 4, 1, causal=True)),
    ), forbids=LIBRARY_ATTENTION, answer="multihead_self_attention"),
    Item("mha_output", points=2, checks=(
        mha(2, 5, 4, 6, 3, dropout=0.5),               # eval mode: dropout must change nothing
        Also(mha(2, 6, 3, 8, 2, causal=True, dropout=0.5)),
        RaisesCheck("MultiHeadSelfAttention", {"input_size": 4, "hidden": 10, "num_heads": 4},
                    mistake="heads_not_checked"),
        Also(RaisesCheck("MultiHeadSelfAttention", {"input_size": 3, "hidden": 6, "num_heads": 4, "causal": True},
                         mistake="heads_not_checked")),
    ), forbids=LIBRARY_ATTENTION, answer="multihead_self_attention"),
]
