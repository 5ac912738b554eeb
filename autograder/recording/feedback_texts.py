"""Whether a text of the feedback pages is made of the closed catalogue: every word of it from a
template (:mod:`autograder.reading.messages`, the judges' ``TEXTS``, :mod:`transformer_lm.verdict_texts`,
a checks file's own ``TEXTS``) or from a slot of its kind.

A feedback text may be several templates one after the other (a check's call, then what it
found, then why), so it is read as a sequence of pieces: a template's text up to a slot that holds
words (a ``call``, a ``label``, another ``text``, names of the course's, a line of the student's
own cell, what Python's compiler says of it), each such slot's words, the numbers, shapes and lists
of numbers that slots hold, and the punctuation between them. The words a slot may hold are given
(:func:`course_words`): what the course's checks call and compare, and the student's own lines and
what compiling them says (:mod:`autograder.reading.syntax`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator

import torch

from autograder.reading import messages
from autograder.reading.results import STATUSES
from autograder.reading.syntax import syntax_error
from transformer_lm import checks, decoder_judges, gpt_judges, judging, tiled_judges, timed_judges

NUMBER = r"-?(?:\d[\d,]*(?:\.\d+)?(?:e[+-]?\d+)?%?|inf|nan)"
NUMBERS = rf"\[(?:\.\.\., )?(?:(?:{NUMBER}|True|False)(?:, (?:{NUMBER}|True|False))*)?(?:, \.\.\.)?\]"
SHAPE = r"\((?:-?\d+,|-?\d+(?:, -?\d+)+)?\)"
PUNCTUATION = re.compile(r"[ .,;:()\n]")
JOINERS = (" and ", " or ")
"""What joins the names of a ``names`` slot, besides punctuation."""
WORDS = {"call", "label", "text", "own", "parser", "names", "item"}
"""The kinds of slot whose words are the course's (or the student's), read as pieces of their own."""

TEMPLATES = (
    *messages.OUTCOME.values(), *messages.DEATHS, *messages.PROBES, messages.PROBE_FALLBACK, *messages.HIDDEN.values(),
    *messages.STATUS_SENTENCES.values(), messages.ON_COURSE_CODE, *messages.ERRORS.values(), messages.IN_ANSWER_CELL,
    messages.BEFORE_RUN, *STATUSES,
    *(text for module in (judging, decoder_judges, gpt_judges, tiled_judges, timed_judges, checks)
      for text in module.TEXTS.values()),
)
"""Every template a feedback text is made of, but for a checks file's own."""


WORD_SLOT = re.compile(r"\{\w+:(?:" + "|".join(sorted(WORDS)) + r")\}")
KINDS = {**messages.slot_kinds(()), "number": NUMBER, "numbers": NUMBERS, "shape": SHAPE}
"""What a slot of the other kinds may hold: as in :mod:`autograder.reading.messages`, but numbers as a check
writes them (``inf``, ``45%``, ``8,192``), lists of them, and shapes or indexes of any sign."""


def _pieces(template: str) -> list[str]:
    """``template``'s pieces, as patterns: split at each slot of words, its other slots matching their kind."""
    return [messages.template_pattern(part, KINDS) for part in WORD_SLOT.split(template)]


class Catalogue:
    """The pieces a feedback text may be made of, by the first character they start with."""

    def __init__(self, templates: Iterable[str], words: Iterable[str]):
        patterns = {p for template in templates for p in _pieces(template)} | {re.escape(w) for w in words if w}
        patterns |= {NUMBER, NUMBERS, SHAPE, *map(re.escape, JOINERS)}
        self.by_first: dict[str, list[re.Pattern]] = {}
        self.anywhere: list[re.Pattern] = []
        for pattern in filter(None, patterns):
            compiled = re.compile(pattern)
            literal = re.match(r"(?:\\.|[^\\(\[.*+?{|^$])", pattern)
            if literal and not pattern.startswith("-?"):
                self.by_first.setdefault(literal.group()[-1], []).append(compiled)
            else:
                self.anywhere.append(compiled)

    def holds(self, text: str, own: Iterable[str] = ()) -> bool:
        """Whether ``text`` is, whole, a sequence of the pieces and punctuation; ``own`` are the
        sources of the student's cells, whose lines an ``own`` slot quotes, and of which a
        ``parser`` slot holds what compiling them says."""
        lines: dict[str, set[str]] = {}
        for source in own:
            error = syntax_error(source)
            said = [error.msg] if error and error.msg else []
            for line in filter(None, [*map(messages.own_line, source.splitlines()), *said]):
                lines.setdefault(line[0], set()).add(line)
        reached = [False] * (len(text) + 1)
        reached[0] = True
        for start in range(len(text)):
            if not reached[start]:
                continue
            if PUNCTUATION.match(text, start):
                reached[start + 1] = True
            for pattern in (*self.by_first.get(text[start], ()), *self.anywhere):
                found = pattern.match(text, start)
                if found and found.end() > start:
                    reached[found.end()] = True
            for line in lines.get(text[start], ()):
                if text.startswith(line, start):
                    reached[start + len(line)] = True
        return reached[len(text)]


def strings(value, depth: int = 0) -> Iterator[str]:
    """Every string a prepared check holds (what it calls, the names it compares), at any depth."""
    if depth > 8 or isinstance(value, (torch.Tensor, bytes)):
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from strings(key, depth + 1)
            yield from strings(item, depth + 1)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            yield from strings(item, depth + 1)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            yield from strings(getattr(value, field.name), depth + 1)
        if isinstance(getattr(type(value), "called", None), property):
            yield value.called


def course_words(assignment) -> set[str]:
    """The words a slot of the assignment's texts may hold: the course's names
    (:func:`autograder.reading.messages.course_names`) and every string of its prepared checks, a
    gradient's key (``grad.q``) also as the name it is the gradient of."""
    words = set(strings(list(assignment.prepared.values())))
    return messages.course_names(assignment) | words | {w[len("grad."):] for w in words if w.startswith("grad.")}


def catalogue(assignment) -> Catalogue:
    """The catalogue of an assignment's feedback texts: :data:`TEMPLATES`, its checks file's own
    ``TEXTS`` and its words (:func:`course_words`)."""
    return Catalogue((*TEMPLATES, *assignment.texts.values()), course_words(assignment))
