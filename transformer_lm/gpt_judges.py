"""Judges of assignment 04's GPT: its loss, the tokens it generates and the tokens it samples.

Each is data (what the reference gave, and what each catalogued mistake gives, on the check's
inputs) with a ``__call__`` that judges a probe's record: :mod:`transformer_lm.instructor.kinds` makes them
with the reference, and :mod:`transformer_lm.stored` keeps them for the visible checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from transformer_lm import catalog
from transformer_lm.judging import Verdict, difference
from transformer_lm.verdict_texts import render

SAMPLING_SIGMAS = 6.0
"""How far a token's frequency may stray from its probability, in standard errors: a right sampler
strays further about once in a hundred million tokens checked."""

TEXTS = {
    "no_logits": "forward(idx, targets) produced no logits.",
    "logits": "the logits of forward(idx, targets)",
    "no_loss": "forward(idx, targets) returned loss=None; with targets it must return (logits, loss).",
    "loss_shape": "the loss has shape {shape:shape}; expected a single number, the mean over the positions that "
                  "count.",
    "loss": "the loss",
    "loss_passed": "Correct: the logits and the loss match the reference.",
    "returned_nothing": "nothing",
    "returned_shape": "shape {shape:shape}",
    "tokens_shape": "{call:call} on a prompt of shape {prompt:shape} with max_new_tokens={new:number} returned ",
    "tokens_shape_expected": "; expected {expected:shape}: the prompt followed by the new tokens.",
    "cache_unused": "{call:call} gives the right tokens, but ",
    "never_ran": "never ran the model",
    "ran_on": "ran the model on {seen:numbers} tokens per step",
    "cache_steps": ": with the cache it runs on the prompt (at most block_size={block_size:number} tokens) first, "
                   "then on one new token per step until the cache is full, then starts again: {steps:numbers}.",
    "tokens_passed": "Correct: the greedy tokens are the reference's.",
    "no_prompt": "{call:call} returned a tensor that does not start with the prompt; it must return the prompt "
                 "followed by the new tokens.",
    "tokens_differ": "{call:call}: the greedy tokens differ from the reference's from new token {first:number} of "
                     "{new:number} on.",
    "outgrown": " By then the context ({context:number} tokens) was longer than block_size={block_size:number}: ",
    "cache_restarted": "did the cache restart from the last block_size tokens?",
    "cropped": "was it cropped to its last block_size tokens?",
    "whole_model": " Generation runs your whole model: if the checks of the attention, the block or GPT.forward "
                   "fail, fix those first.",
    "draws_shape": "{call:call} returned ",
    "draws_shape_expected": "; expected {expected:shape}: one token id per row.",
    "not_token_ids": "{call:call} returned values that are not token ids 0..{last:number}.",
    "draws_passed": "Correct: {draws:number} draws per row follow softmax(logits / temperature) over the top_k "
                    "largest logits.",
    "misfit": "{call:call}: in row {row:number} of the logits, token {token:number} was drawn with frequency "
              "{frequency:number} in {draws:number} draws",
    "probability": "; its probability is {probability:number}",
    "misfit_end": ", too far from softmax(logits / temperature) over the top_k largest logits.",
    "cached_passed": "Correct: with the KV cache, the logits are those of the whole sequence run at once.",
    "cached": "the logits with the cache",
}
"""What the checks of the GPT's loss, of its generated tokens and of its sampled tokens say
(:mod:`transformer_lm.verdict_texts`); :mod:`transformer_lm.instructor.gpt_kinds` takes its own from here too."""


def frequency_misfit(frequencies: torch.Tensor, probabilities: torch.Tensor, draws: int) -> tuple[int, int] | None:
    """The ``(row, token)`` whose frequency in ``draws`` draws per row does not fit its probability
    (drawn although its probability is 0, or further than :data:`SAMPLING_SIGMAS` standard errors
    from it), the worst first; None when every one fits."""
    p = probabilities.double()
    bound = SAMPLING_SIGMAS * torch.sqrt(p * (1 - p) / draws) + 1.0 / draws
    excess = (frequencies.double() - p).abs() - bound
    excess = torch.where((p == 0) & (frequencies > 0), torch.inf, excess)
    if bool((excess <= 0).all()):
        return None
    row, token = divmod(int(torch.argmax(excess)), p.shape[-1])
    return row, token


@dataclass
class LossJudge:
    """``forward(idx, targets)`` gives the reference's ``logits`` and ``loss`` (the probe records
    the loss as ``weights``); a loss that is the ``summed`` one, or the mean over
    ``every_position`` (targets of -1 counted), is named as its catalogued mistake."""

    logits: torch.Tensor
    loss: torch.Tensor
    summed: torch.Tensor
    every_position: torch.Tensor

    def __call__(self, record, value, values: bool) -> Verdict:
        if "output" not in record:
            return Verdict("failed", TEXTS["no_logits"])
        problem = difference(TEXTS["logits"], record["output"], self.logits, values=values)
        if problem:
            return Verdict("failed", problem)
        if "weights" not in record:
            return Verdict("failed", TEXTS["no_loss"])
        got = record["weights"]
        if got.numel() != 1:
            return Verdict("failed", render(TEXTS["loss_shape"], shape=tuple(got.shape)))
        got = got.reshape(())
        problem = difference(TEXTS["loss"], got, self.loss, values=values)
        if problem is None:
            return Verdict("passed", TEXTS["loss_passed"])
        named = [name for name, made in (("loss_summed", self.summed), ("loss_mean_over_ignored", self.every_position))
                 if difference(TEXTS["loss"], got, made) is None]
        return Verdict("failed", problem, catalog.BY_NAME[named[0]] if named else None)


@dataclass
class TokensJudge:
    """Greedy ``generate`` (``call``) on the prompt ``idx`` gives the reference's ``expected``
    tokens; ``use_cache`` also wants the model run on the reference cache's ``steps`` (tokens per
    call). A failure says where the tokens part from the reference's and names the mistake whose
    ``candidates`` tokens they are, or, for the right tokens, whose ``step_candidates`` tokens per
    call the model ran on."""

    call: str
    idx: torch.Tensor
    expected: torch.Tensor
    steps: torch.Tensor
    block_size: int
    use_cache: bool
    candidates: dict[catalog.Mistake, torch.Tensor]
    step_candidates: dict[catalog.Mistake, torch.Tensor] = field(default_factory=dict)  # right tokens, other steps

    def __call__(self, record, value, values: bool) -> Verdict:
        prompt, new = self.idx.shape[-1], self.expected.shape[-1] - self.idx.shape[-1]
        got = record.get("output")
        if got is None or tuple(got.shape) != tuple(self.expected.shape):
            expected = render(TEXTS["tokens_shape_expected"], expected=tuple(self.expected.shape))
            return Verdict("failed", render(TEXTS["tokens_shape"], call=self.call, prompt=tuple(self.idx.shape),
                                            new=new) + _returned(got) + expected)
        got = got.long()
        seen = record.get("tokens_per_call")
        if torch.equal(got, self.expected) and self.use_cache and \
                (seen is None or not torch.equal(seen.long(), self.steps)):
            ran = (TEXTS["never_ran"] if seen is None or not seen.numel()
                   else render(TEXTS["ran_on"], seen=str(seen.tolist())))
            mistake = next((m for m, steps in self.step_candidates.items()
                            if seen is not None and torch.equal(seen.long(), steps)), None)
            return Verdict("failed", render(TEXTS["cache_unused"], call=self.call) + ran
                           + render(TEXTS["cache_steps"], block_size=self.block_size, steps=str(self.steps.tolist())),
                           mistake)
        if torch.equal(got, self.expected):
            return Verdict("passed", TEXTS["tokens_passed"])
        if not torch.equal(got[:, :prompt], self.idx):
            return Verdict("failed", render(TEXTS["no_prompt"], call=self.call))
        mistake = next((m for m, tokens in self.candidates.items() if torch.equal(got, tokens)), None)
        first = int((got != self.expected).any(dim=0).nonzero()[0])
        outgrown = ""
        if first >= self.block_size:
            question = TEXTS["cache_restarted"] if self.use_cache else TEXTS["cropped"]
            outgrown = render(TEXTS["outgrown"], context=first, block_size=self.block_size) + question
        return Verdict("failed", render(TEXTS["tokens_differ"], call=self.call, first=first - prompt + 1, new=new)
                       + outgrown + TEXTS["whole_model"], mistake)


@dataclass
class DrawsJudge:
    """``draws`` tokens from each row of the logits (``call``, in one call on the rows repeated)
    follow the ``expected`` probabilities ``(rows, vocab)``; a catalogued sampling mistake whose
    probabilities (``candidates``) they follow instead is named."""

    call: str
    draws: int
    expected: torch.Tensor
    candidates: dict[catalog.Mistake, torch.Tensor]

    def __call__(self, record, value, values: bool) -> Verdict:
        rows, vocab = self.expected.shape
        got = record.get("output")
        if got is None or tuple(got.shape) != (rows * self.draws, 1):
            return Verdict("failed", render(TEXTS["draws_shape"], call=self.call) + _returned(got)
                           + render(TEXTS["draws_shape_expected"], expected=(rows * self.draws, 1)))
        if got.is_floating_point() or bool(((got < 0) | (got >= vocab)).any()):
            return Verdict("failed", render(TEXTS["not_token_ids"], call=self.call, last=vocab - 1))
        frequencies = torch.nn.functional.one_hot(got.long().view(rows, self.draws), vocab).sum(dim=1) / self.draws
        misfit = frequency_misfit(frequencies, self.expected, self.draws)
        if misfit is None:
            return Verdict("passed", render(TEXTS["draws_passed"], draws=self.draws))
        row, token = misfit
        shown = render(TEXTS["probability"], probability=f"{self.expected[row, token].item():.3f}") if values else ""
        mistake = next((m for m, q in self.candidates.items() if frequency_misfit(frequencies, q, self.draws) is None),
                       None)
        return Verdict("failed", render(TEXTS["misfit"], call=self.call, row=row, token=token,
                                        frequency=f"{frequencies[row, token].item():.3f}", draws=self.draws)
                       + shown + TEXTS["misfit_end"], mistake)


def _returned(got: torch.Tensor | None) -> str:
    """What a call returned that is not the tokens expected: nothing, or a tensor of some shape."""
    return TEXTS["returned_nothing"] if got is None else render(TEXTS["returned_shape"], shape=tuple(got.shape))


JUDGES = (LossJudge, TokensJudge, DrawsJudge)
