"""The PEP 8 check of answer cells (:mod:`transformer_lm.style`): PEP 8 as PEP 8 has it, and the
visible check a student runs, which says what the grader will deduct, with the same lines."""

from __future__ import annotations

import linecache

import pytest

from transformer_lm.judging import CheckFailed
from transformer_lm.style import STYLE, check_style, style_problems

ALLOWED = {
    "arithmetic without spaces (E226)": "def heads(bs, h):\n    return bs*h\n",
    "a break before an operator (W503)": "def total(a, b):\n    return (a\n            + b)\n",
    "a break after an operator (W504)": "def total(a, b):\n    return (a +\n            b)\n",
    "Black's break before an operator": "total = (\n    a * b\n    + c\n)\n",
    "a shape comment past 120 characters": "x = 1   # " + "(bs * H, seq, hs) " * 8 + "\n",
    "a hanging indent closed under its first line (E123)": "y = dict(\n    a=1,\n    )\n",
    "Black's slice with bounds that are expressions": "y = q[:, :, h * hs : (h + 1) * hs]\n",
    "PEP 8's own slices": "y = ham[lower+offset : upper+offset], ham[: upper_fn(x) : step_fn(x)], ham[:: step_fn(x)]\n",
    "Black's slices with a bound left out": "y = x[:n], x[: n + 1], ham[lower + offset :], ham[lower + 1 :: step]\n",
    "Black's slice beside another dimension": "y = x[a + 1 :, :n], x[..., n - 1 :]\n",
    "Black's slice in a subscript broken over lines": "y = x[\n    a + 1 : b,\n    c,\n]\n",
    "a slice of a slice": "y = ham[x[a : b] : c]\n",
}
REFUSED = {
    "whitespace before a comma": ("E203", "x , y = 1, 2\n"),
    "whitespace before an if's colon": ("E203", "if x == 4 :\n    pass\n"),
    "whitespace before a dict's colon": ("E203", 'y = {"a" : 1}\n'),
    "whitespace before a dict's colon in a subscript": ("E203", 'y = ham[{"a" : 1}["a"]]\n'),
    "whitespace before a lambda's colon in a subscript": ("E203", "y = ham[lambda x : x]\n"),
    "a slice's colon spaced unequally": ("E203", "y = ham[1 :9]\n"),
    "an extended slice's colons spaced differently": ("E203", "y = ham[a : b:c]\n"),
    "a missing space": ("E225", "x=1\n"),
    "a missing space after a comma": ("E231", "y = [1,2]\n"),
    "a line too long": ("E501", "z = " + " + ".join(["1"] * 60) + "\n"),
    "a comparison to None": ("E711", "empty = x == None\n"),
}


def test_the_rules_extend_pycodestyles_defaults():
    import pycodestyle
    assert set(pycodestyle.DEFAULT_IGNORE.split(",")) <= set(STYLE["ignore"])
    assert STYLE["max_line_length"] == 120


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_what_pep8_allows_is_not_a_problem(name):
    assert style_problems(ALLOWED[name]) == [], name


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_pep8_forbids_is_named_with_its_line(name):
    code, source = REFUSED[name]
    problems = style_problems("import torch\n" + source)
    assert len(problems) == 1 and problems[0].startswith("line 2, ") and f": {code} " in problems[0], problems


def test_a_bracket_left_open_is_told_not_raised():
    """The tokenizer tells it at the line after the last, which the cell does not have."""
    problems = style_problems("import torch\nx = torch.ones(\n")
    assert len(problems) == 1 and problems[0].startswith("line 3, '': E901 TokenError"), problems


def answer_in_a_cell(source: str, name: str, count: int):
    """``name`` defined by ``source`` as IPython runs a cell: under an ``<ipython-input-...>``
    file name that linecache holds, in the namespace ``__main__``."""
    filename = f"<ipython-input-{count}-{name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace = {"__name__": "__main__"}
    exec(compile(source, filename, "exec"), namespace)
    return namespace[name]


def test_the_visible_check_names_what_the_grader_deducts_with_the_same_lines():
    source = "import torch\n\n\ndef scaled(x, d):\n    y=x / d ** 0.5\n    return y\n"
    answer = answer_in_a_cell(source, "scaled", 901)
    with pytest.raises(CheckFailed) as failed:
        check_style(answer, points=1)
    message = str(failed.value)
    assert "1 point(s)" in message and all(problem in message for problem in style_problems(source))
    assert "line 5, 'y=x / d ** 0.5': E225" in message


def test_the_visible_check_passes_spacing_pep8_allows(capsys):
    source = "def heads(q, bs, h, hs):\n    return (q[:, h * hs : (h + 1) * hs]\n            + bs*h)\n"
    answer = answer_in_a_cell(source, "heads", 902)
    check_style(answer, points=1)
    assert "no problems" in capsys.readouterr().out
