"""No hint, and no text of the student's wheel, holds an answer's code: a hint names the idea and
what goes wrong, never the expression a solution writes. The wheel (``student_files``) reaches
every student, who can read each hint in it without failing anything; before, six hints were the
answer's own expression (the empty-part guard of ``merge_stats``, the backward's ``dq``/``dk``,
RoPE's frequencies, the window's diagonal, the padded mask and the padded positions).

A solution line is a code line between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` of
``source/*/*.ipynb`` whose code (comment stripped) has :data:`SHORTEST` characters or more without
its whitespace, and that the notebooks do not also write outside a solution (as
:func:`autograder.commands.student_kit.solution_lines` counts them, from the same
:func:`autograder.commands.student_kit.written_lines`). A text holds one when:

* a window of :data:`SHORTEST` characters of the line's code appears in the text, both read
  without whitespace, keyword names (``dim=-1`` is ``-1``), or ``dtype=``/``device=`` arguments,
  which change where or in what precision a value lives, not what it is. A window counts only if
  it joins two operands by more than a dot: ``sliding_window_mask(`` or ``ctx.save_for_backward``
  names what a notebook asks for, ``causal & attention_mask`` is code;
* or an expression of the line (of :data:`SHORTEST` characters or more, with two operators or
  more) appears in the text with every plain name read as a blank: ``dS @ k * scale`` is the
  answer's ``d_scores @ k_tile * scale`` in other names. Attribute and function names stay (a
  prose word is never followed by ``(`` or ``.``), so words alone never match.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from functools import lru_cache

import pytest

import notebook_tools as tools
from autograder.commands.student_kit import PACKAGE, student_files, written_lines
from transformer_lm import catalog
from transformer_lm.instructor import concepts

SHORTEST = 20
"""The shortest code, in characters without whitespace, that counts as an answer's."""

TOKEN = re.compile(r"[A-Za-z_]\w*|\d+(?:\.\d+)?(?:e-?\d+)?|\*\*|//|\.\.\.|[<>=!+\-*/@%&|^~]=|\S")
NAME = re.compile(r"[A-Za-z_]\w*$")
KEPT = {"None", "True", "False", "and", "or", "not", "in", "is", "for", "if", "else", "lambda"}
"""Words that are code whatever they stand beside: never read as a blank."""
OPERATORS = {"+", "-", "*", "/", "//", "%", "**", "@", "&", "|", "^", "~", "<", ">", "<=", ">=", "==", "!=", "["}
PLACES = {"dtype", "device"}
"""Keyword arguments that say where or in what precision a value lives, not what it is."""


def tokens(text: str) -> list[str]:
    """``text`` as code tokens, without keyword names and without ``dtype=``/``device=``
    arguments: ``torch.arange(0, d, 2, dtype=torch.float64)`` and ``torch.arange(0, d, 2)`` are one
    expression."""
    found, out, at = TOKEN.findall(text), [], 0
    while at < len(found):
        token = found[at]
        if NAME.match(token) and found[at + 1:at + 2] == ["="] and out and out[-1] in ("(", ","):
            at += 2
            if token in PLACES:
                depth = 0
                while at < len(found) and not (depth == 0 and found[at] in (",", ")")):
                    depth += (found[at] in "([{") - (found[at] in ")]}")
                    at += 1
                at += found[at:at + 1] == [","] and out[-1] == "("
                if out[-1] == ",":
                    out.pop()
            continue
        out.append(token)
        at += 1
    return out


def literal(text: str) -> str:
    return "".join(tokens(text))


def blanked(text: str) -> str:
    """The tokens of ``text`` with every plain name (not after ``.``, not before ``.`` or ``(``,
    not a word of :data:`KEPT`) read as ``_``, one space apart."""
    found = tokens(text)
    return " ".join("_" if NAME.match(token) and token not in KEPT and found[at - 1:at] != ["."]
                    and found[at + 1:at + 2] not in (["."], ["("]) else token for at, token in enumerate(found))


def code_of(line: str) -> str:
    """``line`` without its comment."""
    try:
        for token in tokenize.generate_tokens(io.StringIO(line).readline):
            if token.type == tokenize.COMMENT:
                return line[:token.start[1]]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return line


@lru_cache(maxsize=1)
def solution_lines() -> frozenset[str]:
    """The code of every solution line of ``source/``, comment stripped (see the module's doc)."""
    answers, given = set(), set()
    for inside, kind, line in written_lines(tools.REPO_ROOT):
        code = code_of(line).strip()
        if kind == "code" and len(literal(code)) >= SHORTEST:
            (answers if inside else given).add(code)
    return frozenset(answers - given)


def joins_operands(window: str) -> bool:
    """Whether ``window`` joins two operands by more than a dot (see the module's doc)."""
    return re.search(r"[\w\]\)][^\w.]+[\w(\[]", re.sub(r"[A-Za-z_][\w.]*", "N", window)) is not None


def expressions(line: str) -> set[str]:
    """The blanked expressions of ``line`` of :data:`SHORTEST` characters or more that hold two
    operators or more."""
    source = re.sub(r"^(return|if|elif|while|assert)\s+", "", line.rstrip(":"))
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    segments = (ast.get_source_segment(source, node) for node in ast.walk(tree) if isinstance(node, ast.expr))
    return {blanked(segment) for segment in segments if segment and len(literal(segment)) >= SHORTEST
            and sum(token in OPERATORS for token in blanked(segment).split()) >= 2}


@lru_cache(maxsize=1)
def answer_code() -> tuple[dict[str, str], dict[str, str]]:
    """The windows and the blanked expressions of every solution line, each with its line."""
    windows, blanks = {}, {}
    for line in sorted(solution_lines()):
        code = literal(line)
        for start in range(len(code) - SHORTEST + 1):
            if joins_operands(code[start:start + SHORTEST]):
                windows.setdefault(code[start:start + SHORTEST], line)
        for expression in expressions(line):
            blanks.setdefault(expression, line)
    return windows, blanks


def answers_held(text: str) -> set[str]:
    """The solution lines whose code ``text`` holds."""
    windows, blanks = answer_code()
    code, words = literal(text), f" {blanked(text)} "
    held = {windows[code[start:start + SHORTEST]] for start in range(len(code) - SHORTEST + 1)
            if code[start:start + SHORTEST] in windows}
    return held | {line for expression, line in blanks.items() if f" {expression} " in words}


def hints() -> dict[str, str]:
    """Every catalogued mistake's title and hint, the families of ``transformer_lm/instructor/concepts/``
    registered."""
    concepts.modules()
    return {name: f"{mistake.title}\n{mistake.hint}" for name, mistake in catalog.BY_NAME.items()}


def wheel_texts() -> dict[str, str]:
    """Every string constant of the wheel's Python modules (docstrings, ``TEXTS``, f-strings' parts),
    by ``file:line``."""
    texts = {}
    for name in (name for name in student_files(tools.REPO_ROOT) if name.endswith(".py")):
        for node in ast.walk(ast.parse((tools.REPO_ROOT / PACKAGE / name).read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                texts[f"{name}:{node.lineno}"] = texts.get(f"{name}:{node.lineno}", "") + node.value
    return texts


def test_the_notebooks_have_solution_lines_to_hold_against():
    assert len(solution_lines()) > 100 and all(windows for windows in answer_code())


@pytest.mark.parametrize("name", sorted(hints()))
def test_no_hint_holds_an_answers_code(name):
    held = answers_held(hints()[name])
    assert not held, f"the hint of {name} holds the code of {sorted(held)}: name the idea, not the expression"


def test_no_text_of_the_wheel_holds_an_answers_code():
    found = {where: sorted(held) for where, text in wheel_texts().items() if (held := answers_held(text))}
    assert not found, found


PLANTED = {
    "the guard, word for word": "Give an empty part the factor 0: torch.where(torch.isneginf(max_a), 0.0, "
                                "torch.exp(max_a - maximum)).",
    "the guard in other spacing": "factor_a=torch.where( torch.isneginf(max_a),0.0,torch.exp( max_a-maximum ))",
    "the padded positions, keyword names dropped": "positions = (attention_mask.long().cumsum(-1) - 1).clamp(0)",
    "RoPE's speeds without the dtype": "Pair i turns by base ** (-torch.arange(0, d, 2) / d).",
    "the backward's dq in the math's names": "dq = dS @ k * scale",
    "a KV cache's positions": "their embeddings are self.pos_emb[:, start:start + T, :]",
    "the padded mask, cast after the indexing": "causal & attention_mask[:, None, None, :].bool()",
}
HONEST = {
    "the guard's idea": "exp of the difference of two -inf maxima is NaN: guard the case where both parts are empty, "
                        "so that the merged row stays empty.",
    "the scale's idea": "Both gradients of the scores carry the scale the forward multiplied them by.",
    "a function's name": "Call sliding_window_mask(query_len, key_len, window) with the layer's window.",
    "an API's name": "Save what the backward needs with ctx.save_for_backward.",
}


@pytest.mark.parametrize("label", sorted(PLANTED))
def test_a_planted_answer_is_found(label):
    assert answers_held(PLANTED[label]), label


@pytest.mark.parametrize("label", sorted(HONEST))
def test_an_idea_in_words_is_not(label):
    assert not answers_held(HONEST[label]), (label, answers_held(HONEST[label]))
