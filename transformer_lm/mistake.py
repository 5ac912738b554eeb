"""One catalogued mistake, as every family of the catalogue (:mod:`transformer_lm.catalog`) writes it."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_lm.flaws import DecoderFlaws, Flaws, GenerationFlaws, TilingFlaws

NAMES = {"batch": "batch", "seq": "seq", "d_out": "d_out", "num_heads": "num_heads", "head_dim": "head_dim"}
"""The names hints use for shapes, unless a notebook's API gives its own
(:class:`transformer_lm.instructor.cases.AttentionAPI`)."""


@dataclass(frozen=True)
class Mistake:
    """One catalogued mistake: a name for reports, words for the student, and its flaws.

    ``shows_with`` lists the features a test needs for the mistake to change the result
    ("heads", "mask", "float_mask", "causal", "projection", "dropout", "bias", "several_tokens", "concatenated",
    "input_width": an input whose width is not one head's, "size_one": a size of 1;
    :attr:`transformer_lm.instructor.cases.AttentionCase.features`); one feature is enough.
    """

    name: str
    title: str
    hint: str
    flaws: Flaws | GenerationFlaws | TilingFlaws | DecoderFlaws | None = None
    shows_with: frozenset[str] = frozenset()

    def hint_in(self, names: dict[str, str] | None = None) -> str:
        """The hint in a notebook's own names (``batch``, ``seq``, ``d_out``, ``num_heads``,
        ``head_dim``: :data:`NAMES` where the notebook has none of its own)."""
        return self.hint.format_map({**NAMES, **(names or {})})

    def visible_in(self, features: set[str] | frozenset[str]) -> bool:
        return not self.shows_with or bool(self.shows_with & set(features))
