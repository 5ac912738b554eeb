"""One answer's fingerprint, and the regions two answers have in common.

The fingerprinting is copydetect's (MOSS-style winnowing, Schleimer, Wilkerson and Aiken 2003):
its tokenizer (``copydetect.utils.filter_code``, on Pygments' Python lexer) drops comments and
whitespace and writes every name (variables, attributes, functions, classes; not builtins or
``self``) as one letter and every string as one, so a renamed copy reads the same; its ``winnow``
keeps the smallest hash of every window of ``WINDOW`` consecutive k-grams, which guarantees that
any match of ``K + WINDOW - 1`` characters of that text shares a fingerprint; its
``compare_files`` finds the matching regions of a pair.

Two things come first, on the answer's lines, so that positions still point into the text as
written (for marking matches on a page):

* lines that the release's answer cell also has (signature, docstring, ``# YOUR CODE HERE``,
  ``raise NotImplementedError()``, given code) and the answer's own docstrings become blank, so
  shared scaffolding never counts;
* the statements of every block are put in a canonical order (sorted by their shape, names left
  out), so that a copy whose independent statements were swapped reads the same. Winnowing alone
  only survives a reordering where statements are longer than a k-gram; most lines of attention
  code are shorter than that once names are one letter (``tests/test_similarity.py`` shows both).
  An answer that does not parse keeps its order.

One change to copydetect: it hashes k-grams with Python's ``hash``, which is salted anew in each
process (``PYTHONHASHSEED``), so winnowing would keep other fingerprints on every run and a pair's
similarity would change from run to run. Here k-grams are hashed with BLAKE2b: the same class
gives the same report.
"""

from __future__ import annotations

import ast
import hashlib
import keyword
import re
from dataclasses import dataclass, replace

import numpy as np
from copydetect import compare_files
from copydetect.utils import filter_code, get_token_coverage, winnow
from pygments.lexers import PythonLexer
from pygments.token import Token

from transformer_lm.source_scan import parse_cell

K = 25
"""Characters of normalised code in a k-gram: copydetect's default noise threshold. Matches shorter
than this (``V=V.V(V)``, a projection) are noise that every answer has."""
WINDOW = 6
"""k-grams per winnowing window: copydetect's default guarantee of 30 characters (K + WINDOW - 1)."""


@dataclass
class Fingerprint:
    """An answer as copydetect compares it (the attributes ``compare_files`` reads), with the map
    from the canonical text it was made from back to the text as written."""

    raw_code: str  # the answer as written
    filtered_code: str  # the normalised code: no comments or docstrings, one letter per name
    offsets: np.ndarray  # copydetect's map from filtered_code back to the canonical text
    hashes: set[int]
    hash_idx: dict[int, list[int]]
    token_coverage: float
    canonical: str  # raw_code in canonical order, with what the release gives and docstrings blanked
    positions: np.ndarray  # the canonical text's characters, as positions in raw_code
    k: int = K

    @property
    def size(self) -> int:
        """How much code the answer holds once normalised (characters of ``filtered_code``)."""
        return len(self.filtered_code)


def fingerprint(source: str, starter: str = "") -> Fingerprint:
    """The fingerprint of ``source``, an answer cell, without what ``starter`` (the release's answer
    cell) already gives."""
    # the lines parse_cell numbers: it also breaks a line at \x85, \x1c or \u2028, which a student may type
    lines = [line + "\n" for line in source.splitlines()]
    given = {line.strip() for line in starter.splitlines() if line.strip()}
    tree = parse_cell("".join(lines))   # None: compared as written
    blank = {number for number, line in enumerate(lines) if line.strip() in given} | _docstring_lines(tree)
    kept = [re.sub(r"\S", " ", line) if number in blank else line for number, line in enumerate(lines)]
    shapes = [_line_shape(line) for line in kept]
    order = _canonical_order(tree.body, 0, len(lines), shapes) if tree and tree.body else range(len(lines))
    starts = np.cumsum([0] + [len(line) for line in lines])
    canonical = "".join(kept[n] for n in order)
    positions = np.concatenate([np.arange(starts[n], starts[n + 1]) for n in order] or [np.zeros(0, int)])
    filtered, offsets = filter_code(canonical, "answer.py", language="python")
    hashes, idx = winnow(_kgram_hashes(filtered), WINDOW, remove_duplicates=False)
    hash_idx: dict[int, list[int]] = {}
    for value, index in zip(hashes.tolist(), idx.tolist()):
        hash_idx.setdefault(value, []).append(index)
    return Fingerprint("".join(lines), filtered, offsets, set(hash_idx), hash_idx,
                       get_token_coverage(hash_idx, K, len(filtered)), canonical, positions)


def matching_regions(a: Fingerprint, b: Fingerprint, ignored: frozenset[int] = frozenset()
                     ) -> tuple[np.ndarray, np.ndarray]:
    """For each answer of a pair, a mask over its text as written: True where it matches the other,
    by fingerprints other than ``ignored``."""
    _, _, (slices_a, slices_b) = compare_files(_without(a, ignored), _without(b, ignored))
    return _mask(a, slices_a), _mask(b, slices_b)


def _without(answer: Fingerprint, ignored: frozenset[int]) -> Fingerprint:
    return replace(answer, hashes=answer.hashes - ignored,
                   hash_idx={h: i for h, i in answer.hash_idx.items() if h not in ignored})


def _mask(answer: Fingerprint, slices: np.ndarray) -> np.ndarray:
    """The characters of the answer as written that ``slices`` of its canonical text cover, whole
    tokens of code only: copydetect maps a slice back to the text within a few characters, and
    the comments, blanked lines and spaces inside a slice matched nothing."""
    covered = np.zeros(len(answer.canonical), dtype=bool)
    for start, end in zip(*slices) if len(slices) and len(slices[0]) else ():
        covered[int(start):int(end)] = True
    mask = np.zeros(len(answer.raw_code), dtype=bool)
    for start, kind, value in PythonLexer().get_tokens_unprocessed(answer.canonical):
        end = start + len(value)
        if kind not in Token.Text and kind not in Token.Comment and covered[start:end].any():
            mask[answer.positions[start:end]] = True
    return mask


def _kgram_hashes(text: str) -> np.ndarray:
    """A 64-bit BLAKE2b hash of every k-gram of ``text`` (the same in every process)."""
    data = text.encode("utf-32-le", "surrogatepass")  # four bytes a character: k-gram i is bytes 4i to 4(i + K)
    return np.array([int.from_bytes(hashlib.blake2b(data[4 * i:4 * (i + K)], digest_size=8).digest(), "little",
                                    signed=True) for i in range(len(text) - K + 1)], dtype=np.int64)




def _docstring_lines(tree: ast.Module | None) -> set[int]:
    """The lines (0-based) of the docstrings of the answer's module, classes and functions."""
    lines = set()
    for node in ast.walk(tree) if tree else ():
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                lines.update(range(first.lineno - 1, first.end_lineno))
    return lines


_STRING = re.compile(r"(['\"]).*?\1")
_NAME = re.compile(rf"\b(?!(?:{'|'.join(keyword.kwlist)})\b)[^\W\d]\w*")


def _line_shape(line: str) -> str:
    """A line without its names, strings, comments and spaces: what orders blocks alike in a renamed copy."""
    return re.sub(r"\s+", "", _NAME.sub("V", _STRING.sub("S", line).split("#", 1)[0]))


def _first_line(statement: ast.stmt) -> int:
    """The 0-based line where ``statement`` starts, its decorators included."""
    return min([statement.lineno, *(d.lineno for d in getattr(statement, "decorator_list", []))]) - 1


def _canonical_order(body: list[ast.stmt], first: int, end: int, shapes: list[str]) -> list[int]:
    """The lines ``first`` to ``end`` (0-based, end excluded), which hold ``body``, in canonical
    order: lines before the first statement stay first; each statement, with the comments and blank
    lines after it, moves as a block, sorted by shape; statements sharing a line move together;
    the bodies of compound statements are ordered the same way inside their block."""
    blocks: list[list[ast.stmt]] = []
    for statement in body:
        if blocks and _first_line(statement) < blocks[-1][-1].end_lineno:
            blocks[-1].append(statement)
        else:
            blocks.append([statement])
    starts = [_first_line(block[0]) for block in blocks] + [end]
    spans = sorted(zip(blocks, starts, starts[1:]), key=lambda span: sorted(filter(None, shapes[span[1]:span[2]])))
    return list(range(first, starts[0])) + [line for span in spans for line in _inside(*span, shapes)]


def _inside(block: list[ast.stmt], start: int, stop: int, shapes: list[str]) -> list[int]:
    """The lines ``start`` to ``stop`` of a block of statements, each body inside it in canonical order."""
    lines = list(range(start, stop))
    for statement in block:
        for body in _bodies(statement):
            first, end = _first_line(body[0]), body[-1].end_lineno
            lines[first - start:end - start] = _canonical_order(body, first, end, shapes)
    return lines


def _bodies(node: ast.AST) -> list[list[ast.stmt]]:
    """The statement lists directly inside ``node``: a function's body, an if's two branches, a try's
    handlers' bodies, a match's cases' bodies."""
    found = []
    for _, value in ast.iter_fields(node):
        if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
            found.append(value)
        elif isinstance(value, list) and value and isinstance(value[0], (ast.excepthandler, ast.match_case)):
            found.extend(part.body for part in value)
    return found
