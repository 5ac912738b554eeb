"""Judges of assignment 04's GPT: its loss, the tokens it generates and the tokens it samples.

Each is data (what the reference gave, and what each catalogued mistake gives, on the check's
inputs) with a ``__call__`` that judges a probe's record: :mod:`transformer_lm.kinds` makes them
with the reference, and :mod:`transformer_lm.stored` keeps them for the visible checks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from transformer_lm import catalog
from transformer_lm.judging import Verdict, difference

SAMPLING_SIGMAS = 6.0
"""How far a token's frequency may stray from its probability, in standard errors: a right sampler
strays further about once in a hundred million tokens checked."""


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
    ``every_position`` (targets of -1 counted), is named."""

    logits: torch.Tensor
    loss: torch.Tensor
    summed: torch.Tensor
    every_position: torch.Tensor

    def __call__(self, record, value, values: bool) -> Verdict:
        if "output" not in record:
            return Verdict("failed", "forward(idx, targets) produced no logits.")
        problem = difference("the logits of forward(idx, targets)", record["output"], self.logits, values=values)
        if problem:
            return Verdict("failed", problem)
        if "weights" not in record:
            return Verdict("failed", "forward(idx, targets) returned loss=None; with targets it must return "
                                     "(logits, loss).")
        got = record["weights"]
        if got.numel() != 1:
            return Verdict("failed", f"the loss has shape {tuple(got.shape)}; expected a single number, the mean "
                                     "over the positions that count.")
        got = got.reshape(())
        problem = difference("the loss", got, self.loss, values=values)
        if problem is None:
            return Verdict("passed", "Correct: the logits and the loss match the reference.")
        if difference("the loss", got, self.summed) is None:
            problem += " It is the sum over the positions; the loss is their mean (F.cross_entropy's default)."
        elif difference("the loss", got, self.every_position) is None:
            problem += (" The positions whose target is -1 still count in the mean: pass ignore_index=-1 to "
                        "F.cross_entropy.")
        return Verdict("failed", problem)


@dataclass
class TokensJudge:
    """Greedy ``generate`` (``call``) on the prompt ``idx`` gives the reference's ``expected``
    tokens; ``use_cache`` also wants the model run on the reference cache's ``steps`` (tokens per
    call). A failure says where the tokens part from the reference's and names the mistake whose
    ``candidates`` tokens they are."""

    call: str
    idx: torch.Tensor
    expected: torch.Tensor
    steps: torch.Tensor
    block_size: int
    use_cache: bool
    candidates: dict[catalog.Mistake, torch.Tensor]

    def __call__(self, record, value, values: bool) -> Verdict:
        prompt, new = self.idx.shape[-1], self.expected.shape[-1] - self.idx.shape[-1]
        got = record.get("output")
        if got is None or tuple(got.shape) != tuple(self.expected.shape):
            shape = "nothing" if got is None else f"shape {tuple(got.shape)}"
            return Verdict("failed", f"{self.call} on a prompt of shape {tuple(self.idx.shape)} with max_new_tokens="
                                     f"{new} returned {shape}; expected {tuple(self.expected.shape)}: the prompt "
                                     f"followed by the new tokens.")
        got = got.long()
        seen = record.get("tokens_per_call")
        if torch.equal(got, self.expected) and self.use_cache and \
                (seen is None or not torch.equal(seen.long(), self.steps)):
            ran = ("never ran the model" if seen is None or not seen.numel()
                   else f"ran the model on {seen.tolist()} tokens per step")
            return Verdict("failed", f"{self.call} gives the right tokens, but {ran}: with the cache it runs on the "
                                     f"prompt (at most block_size={self.block_size} tokens) first, then on one new "
                                     f"token per step until the cache is full, then starts again: "
                                     f"{self.steps.tolist()}.")
        if torch.equal(got, self.expected):
            return Verdict("passed", "Correct: the greedy tokens are the reference's.")
        if not torch.equal(got[:, :prompt], self.idx):
            return Verdict("failed", f"{self.call} returned a tensor that does not start with the prompt; it must "
                                     "return the prompt followed by the new tokens.")
        mistake = next((m for m, tokens in self.candidates.items() if torch.equal(got, tokens)), None)
        first = int((got != self.expected).any(dim=0).nonzero()[0])
        outgrown = ""
        if first >= self.block_size:
            question = ("did the cache restart from the last block_size tokens?" if self.use_cache
                        else "was it cropped to its last block_size tokens?")
            outgrown = f" By then the context ({first} tokens) was longer than block_size={self.block_size}: " \
                       + question
        return Verdict("failed", f"{self.call}: the greedy tokens differ from the reference's from new token "
                                 f"{first - prompt + 1} of {new} on.{outgrown} Generation runs your whole model: if "
                                 "the checks of the attention, the block or GPT.forward fail, fix those first.",
                       mistake)


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
            shape = "nothing" if got is None else f"shape {tuple(got.shape)}"
            return Verdict("failed", f"{self.call} returned {shape}; expected {(rows * self.draws, 1)}: one token id "
                                     "per row.")
        if got.is_floating_point() or bool(((got < 0) | (got >= vocab)).any()):
            return Verdict("failed", f"{self.call} returned values that are not token ids 0..{vocab - 1}.")
        frequencies = torch.nn.functional.one_hot(got.long().view(rows, self.draws), vocab).sum(dim=1) / self.draws
        misfit = frequency_misfit(frequencies, self.expected, self.draws)
        if misfit is None:
            return Verdict("passed", f"Correct: {self.draws} draws per row follow softmax(logits / temperature) over "
                                     "the top_k largest logits.")
        row, token = misfit
        shown = f"; its probability is {self.expected[row, token].item():.3f}" if values else ""
        mistake = next((m for m, q in self.candidates.items() if frequency_misfit(frequencies, q, self.draws) is None),
                       None)
        return Verdict("failed", f"{self.call}: in row {row} of the logits, token {token} was drawn with frequency "
                                 f"{frequencies[row, token].item():.3f} in {self.draws} draws{shown}, too far from "
                                 "softmax(logits / temperature) over the top_k largest logits.", mistake)


JUDGES = (LossJudge, TokensJudge, DrawsJudge)
