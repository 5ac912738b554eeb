"""Hidden checks of assignment 04 (minGPT, seed 000).

The notebook checks the attention layer with seed 000's gradient fingerprint (every parameter
0.1, ``y.sum()`` backpropagated); here every case has random weights and a random upstream
gradient, and every gradient is compared element by element, which is stronger: a merge of the
heads without transpose, for one, keeps the fingerprint but not the gradients. Sizes differ
from the notebook's: other widths, one head and several, a single token, sequences shorter than
``block_size``, dropout switched on with the module in eval mode.

Blocks and models get the reference's randomized weights by parameter name; the loss is
checked with targets of -1 among them. Generation is greedy (``top_k=1``) against the
reference, with prompts longer than ``block_size`` (cropping) and generations that outgrow it
(the cache must restart), under weights whose greedy tokens depend on the context (see
:class:`Generation`). Inputs come from the course's secret seed.
"""

from dataclasses import asdict, dataclass, field

import torch

from autograder.spec import AttentionCheck, Item, ModuleCheck, Prepared, ProbeCall, _flatten
from transformer_lm import adapters, checks, reference
from transformer_lm.checks import AttentionCase, Verdict

LIBRARY_ATTENTION = ("torch.nn.functional.scaled_dot_product_attention", "torch.nn.MultiheadAttention.forward",
                     "torch.nn.functional.multi_head_attention_forward")


def config(**sizes) -> dict:
    """Every field of the reference's GPTConfig: the probe turns the dict into the object with
    attributes that minGPT's classes take, so a missing field would be a missing attribute."""
    return asdict(reference.GPTConfig(**sizes))


def attention(batch, seq, width, heads, **extra) -> AttentionCheck:
    case = AttentionCase(batch, seq, width, width, num_heads=heads, causal=True, out_proj=True, **extra)
    return AttentionCheck("MultiHeadSelfAttention", adapters.MINGPT_ATTENTION, case)


def block(sizes: dict, batch: int, seq: int) -> ModuleCheck:
    cfg = reference.GPTConfig(**sizes)
    return ModuleCheck("Block", {"config": asdict(cfg)}, lambda: reference.Block(cfg),
                       lambda g: {"x": torch.randn(batch, seq, cfg.n_embd, generator=g)})


def gpt(sizes: dict, batch: int, seq: int) -> ModuleCheck:
    cfg = reference.GPTConfig(**sizes)
    return ModuleCheck("GPT", {"config": asdict(cfg)}, lambda: reference.GPT(cfg),
                       lambda g: {"idx": torch.randint(cfg.vocab_size, (batch, seq), generator=g)})


@dataclass(frozen=True)
class LossCheck:
    """``GPT.forward(idx, targets)`` returns ``(logits, loss)``: the logits and the mean
    cross-entropy over the positions whose target is not -1 must be the reference's, for the
    reference's randomized weights loaded by name. (``ModuleCheck`` compares the first output
    only; the probe records the second one as ``weights``, which this check judges as the loss.)"""

    object: str
    config: dict
    batch: int
    seq: int

    def prepare(self, generator: torch.Generator) -> Prepared:
        cfg = reference.GPTConfig(**self.config)
        model = checks.randomize(reference.GPT(cfg), generator).eval()
        idx = torch.randint(cfg.vocab_size, (self.batch, self.seq), generator=generator)
        targets = torch.randint(cfg.vocab_size, (self.batch, self.seq), generator=generator)
        targets[torch.rand(targets.shape, generator=generator) < 0.4] = -1
        targets[0, 0], targets[-1, -1] = -1, 0   # at least one position left out, one that counts
        with torch.no_grad():
            logits, loss = model(idx, targets)
            flat_logits, flat_targets = logits.flatten(0, 1), targets.flatten()
            summed = torch.nn.functional.cross_entropy(flat_logits, flat_targets, ignore_index=-1, reduction="sum")
            counted = flat_targets != -1
            every_position = torch.nn.functional.cross_entropy(
                flat_logits, flat_targets.clamp(min=0), reduction="none").masked_fill(~counted, 0.0).mean()
        state = {n: p.detach().clone() for n, p in model.named_parameters()}
        plain, flat = _flatten({"init": {"config": self.config}, "state": state,
                                "inputs": {"idx": idx, "targets": targets}})

        def judge(record, value) -> Verdict:
            if "output" not in record:
                return Verdict("failed", "forward(idx, targets) produced no logits.")
            problem = checks.difference("the logits of forward(idx, targets)", record["output"], logits, values=False)
            if problem:
                return Verdict("failed", problem)
            if "weights" not in record:
                return Verdict("failed", "forward(idx, targets) returned loss=None; with targets it must return "
                                         "(logits, loss).")
            got = record["weights"]
            if got.numel() != 1:
                return Verdict("failed", f"the loss has shape {tuple(got.shape)}; expected a single number, the "
                                         "mean over the positions that count.")
            got = got.reshape(())
            problem = checks.difference("the loss", got, loss, values=False)
            if problem is None:
                return Verdict("passed", "Correct: the logits and the loss match the reference.")
            if checks.difference("the loss", got, summed) is None:
                problem += " It is the sum over the positions; the loss is their mean (F.cross_entropy's default)."
            elif checks.difference("the loss", got, every_position) is None:
                problem += (" The positions whose target is -1 still count in the mean: pass ignore_index=-1 to "
                            "F.cross_entropy.")
            return Verdict("failed", problem)

        return Prepared(ProbeCall("probe_module", {"cls": self.object}, plain, flat), judge)


@dataclass(frozen=True)
class Generation:
    """Greedy generation (``top_k=1``, plus ``call_kwargs``) from the student's GPT with a
    randomized reference model's weights must give the reference's tokens (made without a
    cache). Like :class:`autograder.spec.GenerateCheck`, with two differences:

    * the LayerNorms start as the identity (weight 1, bias 0). With random LayerNorm biases, as
      in GenerateCheck, ``ln_f``'s bias alone adds one fixed vector to the logits at every
      position, greedy decoding mostly writes one token whatever the context, and a ``generate``
      that reads the wrong context or the wrong position passes;
    * a failure says where the tokens part from the reference's: the shape, the prompt, or the
      first new token that differs, and whether the context had outgrown ``block_size`` by then.
    """

    object: str
    config: dict
    batch: int
    prompt: int
    max_new_tokens: int
    call_kwargs: dict = field(default_factory=dict)

    def prepare(self, generator: torch.Generator) -> Prepared:
        cfg = reference.GPTConfig(**self.config)
        model = checks.randomize(reference.GPT(cfg), generator, scale=0.5).eval()
        with torch.no_grad():
            for module in model.modules():
                if isinstance(module, torch.nn.LayerNorm):
                    module.weight.fill_(1.0)
                    module.bias.zero_()
        idx = torch.randint(cfg.vocab_size, (self.batch, self.prompt), generator=generator)
        expected = model.generate(idx, self.max_new_tokens, top_k=1)
        state = {n: p.detach().clone() for n, p in model.named_parameters()}
        plain, flat = _flatten({"init": {"config": self.config}, "state": state, "idx": idx,
                                "max_new_tokens": self.max_new_tokens,
                                "call_kwargs": {"top_k": 1, **self.call_kwargs}})
        call = "generate(idx, max_new_tokens, top_k=1" + "".join(
            f", {k}={v!r}" for k, v in self.call_kwargs.items()) + ")"
        new = self.max_new_tokens

        def judge(record, value) -> Verdict:
            got = record.get("output")
            if got is None or tuple(got.shape) != tuple(expected.shape):
                shape = "nothing" if got is None else f"shape {tuple(got.shape)}"
                return Verdict("failed", f"{call} on a prompt of shape {tuple(idx.shape)} with max_new_tokens={new} "
                                         f"returned {shape}; expected {tuple(expected.shape)}: the prompt followed "
                                         f"by the new tokens.")
            got = got.long()
            if torch.equal(got, expected):
                return Verdict("passed", "Correct: the greedy tokens are the reference's.")
            if not torch.equal(got[:, :self.prompt], idx):
                return Verdict("failed", f"{call} returned a tensor that does not start with the prompt; it must "
                                         "return the prompt followed by the new tokens.")
            first = int((got != expected).any(dim=0).nonzero()[0])
            outgrown = ""
            if first >= cfg.block_size:
                cached = self.call_kwargs.get("use_cache")
                question = ("did the cache restart from the last block_size tokens?" if cached
                            else "was it cropped to its last block_size tokens?")
                outgrown = f" By then the context ({first} tokens) was longer than block_size={cfg.block_size}: " \
                           + question
            return Verdict("failed", f"{call}: the greedy tokens differ from the reference's from new token "
                                     f"{first - self.prompt + 1} of {new} on.{outgrown} Generation runs your "
                                     "whole model: if the checks of the attention, the block or GPT.forward fail, "
                                     "fix those first.")

        return Prepared(ProbeCall("probe_generate", {"cls": self.object}, plain, flat), judge)


SMALL = dict(vocab_size=9, block_size=7, n_layer=2, n_head=2, n_embd=8)
ONE_HEAD = dict(vocab_size=6, block_size=5, n_layer=1, n_head=1, n_embd=6)
DEEP = dict(vocab_size=11, block_size=6, n_layer=3, n_head=4, n_embd=12)
DROPOUT = dict(vocab_size=8, block_size=6, n_layer=2, n_head=3, n_embd=9, attn_pdrop=0.3, resid_pdrop=0.3,
               embd_pdrop=0.3)

ITEMS = [
    Item("mingpt_attention", 3, (
        attention(2, 7, 16, 4, context_length=9),
        attention(3, 5, 6, 1),
        attention(2, 1, 8, 2, context_length=4),
        attention(2, 6, 12, 3, dropout=0.3),
    ), forbids=LIBRARY_ATTENTION),
    Item("block", 1, (
        block(dict(n_embd=12, n_head=3, block_size=8), 2, 6),
        block(dict(n_embd=6, n_head=1, block_size=3), 3, 1),
        block(dict(n_embd=8, n_head=2, block_size=5, attn_pdrop=0.3, resid_pdrop=0.3), 2, 5),
    ), forbids=LIBRARY_ATTENTION),
    Item("gpt", 2, (
        gpt(SMALL, 2, 6),
        gpt(ONE_HEAD, 3, 5),
        gpt(DROPOUT, 2, 4),
        LossCheck("GPT", config(**SMALL), 3, 7),
    ), forbids=LIBRARY_ATTENTION),
    Item("generate", 2, (
        Generation("GPT", config(**SMALL), 4, 4, 8),      # grows past block_size
        Generation("GPT", config(**ONE_HEAD), 4, 3, 8),
        Generation("GPT", config(**DEEP), 4, 9, 4),       # the prompt alone is longer than block_size
    )),
    # Equality with the reference's tokens (made without a cache). The grader cannot tell whether the
    # cache is used at all; the visible check counts the tokens the model sees at each step.
    Item("kv_cache", 2, (
        Generation("GPT", config(**SMALL), 4, 3, 4, {"use_cache": True}),     # the cache fits
        Generation("GPT", config(**ONE_HEAD), 4, 2, 10, {"use_cache": True}),  # it fills up, restarts
        Generation("GPT", config(**DEEP), 4, 8, 8, {"use_cache": True}),      # cropped prompt, 3 blocks
    )),
]
