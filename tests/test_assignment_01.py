"""Assignment 01 (attention basics): the release, the solution, the student's start, two known bugs.

Everything runs for real: nbgrader generates the release, nbclient runs the notebooks in a
python3 kernel. Each notebook is executed once per module and shared by the tests. The tests every
assignment gets come from its row of tests/assignments.py (tests/assignment_tests.py); the ones
below are this assignment's own.
"""

from __future__ import annotations

import json
import re

import pytest

import assignment_tests
import assignments
import notebook_tools as tools

ROW = assignments.BY_NAME["01_attention_basics"]
globals().update(assignment_tests.tests_for(ROW))

# Seed 001's own CausalAttention: its softmax runs over dim=1, the queries of (b, queries, keys).
SEED_CAUSAL_ATTENTION = '''
class CausalAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.d_out = d_out
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer(
            'mask',
            torch.triu(torch.ones(context_length, context_length), diagonal=1)
        )

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        keys = self.W_key(x)
        queries = self.W_query(x)
        values = self.W_value(x)
        attn_scores = queries @ keys.transpose(1, 2)
        attn_scores.masked_fill_(
            self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1]**0.5, dim=1)
        attn_weights = self.dropout(attn_weights)
        context_vec = attn_weights @ values
        return context_vec
'''

# Seed 001's own MultiHeadAttention: `self.d_out = d_out` sits inside a comment, so forward fails.
SEED_MULTI_HEAD_ATTENTION = '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out,
    context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        # assert d_out % num_heads == 0 #d_out must be divisible by num_headself.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads #A
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out) #B
        self.dropout = nn.Dropout(dropout)
        self.register_buffer(
        'mask',
        torch.triu(torch.ones(context_length, context_length), diagonal=1)
    )

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        keys = self.W_key(x)
        queries = self.W_query(x)
        values = self.W_value(x)

        keys = keys.view(b, num_tokens, self.num_heads, self.head_dim)
        values = values.view(b, num_tokens, self.num_heads, self.head_dim)
        queries = queries.view(b, num_tokens, self.num_heads, self.head_dim)

        keys = keys.transpose(1, 2)
        queries = queries.transpose(1, 2)
        values = values.transpose(1, 2)

        attn_scores = queries @ keys.transpose(2, 3)
        mask_bool = self.mask.bool()[:num_tokens, :num_tokens]
        attn_scores.masked_fill_(mask_bool, -torch.inf)

        attn_weights = torch.softmax(
            attn_scores / keys.shape[-1]**0.5, dim=-1)
        attn_weights = self.dropout(attn_weights)

        context_vec = (attn_weights @ values).transpose(1, 2)
        context_vec = context_vec.contiguous().view(b, num_tokens, self.d_out)
        context_vec = self.out_proj(context_vec)

        return context_vec
'''


@pytest.fixture(scope="module")
def solution_and_blank(graded_class):
    """The solution's and the blank release's reports, read from the hostile class of
    tests/hostile_class.py, graded once per session."""
    root, _, _ = graded_class
    return [json.loads((root / "reports" / ROW.name / f"{student}.json").read_text())
            for student in ("ada_solution", "bo_blank")]


# --------------------------------------------------------------------------------------
# The source notebook's shape
# --------------------------------------------------------------------------------------


ATTENTION_TASKS = ("context_vectors", "self_attention_v1", "self_attention_v2", "causal_attention",
                   "multihead_wrapper", "multihead_attention")


def test_source_says_what_is_forbidden_and_where_it_comes_from(source_nb):
    """Each task's heading names the library calls its check refuses; the book is cited by name;
    the conventions cell's names are the other assignments' own; pictures are never graded."""
    def heading(grade_id: str) -> str:
        return source_nb.cells[source_nb.cells.index(tools.cell_by_grade_id(source_nb, grade_id)) - 1].source

    assert all(name in heading("softmax_stable")
               for name in ("torch.softmax", "F.softmax", "x.softmax", "torch.special.softmax", "forbidden"))
    for grade_id in ATTENTION_TASKS:
        text = heading(grade_id)
        assert "scaled_dot_product_attention" in text and "nn.MultiheadAttention" in text, grade_id

    cells = {cell.id: cell for cell in source_nb.cells}
    sources, conventions = cells["sources"].source, cells["conventions"].source
    assert "Raschka" in sources and "exercise 3.1" in sources and "exercise 3.2" in sources
    markdown = "\n".join(cell.source for cell in source_nb.cells if cell.cell_type == "markdown")
    assert not re.search(r"seed 0\d\d|elsewhere|\(exercise 3\.\d\)", markdown)
    for assignment, names in (("02_multihead_attention", ("input_size", "hidden", "head_size")),
                              ("04_mingpt", ("n_embd", "n_head", "block_size"))):
        other = next((tools.REPO_ROOT / "source" / assignment).glob("*.ipynb")).read_text()
        for name in names:
            assert f"`{name}`" in conventions and name in other, (assignment, name)

    for cell in source_nb.cells:
        if cell.cell_type == "code" and "plt." in cell.source:
            assert "skip-grading" in cell.metadata.get("tags", []), f"cell {cell.id} draws but is not skip-grading"
            assert "nbgrader" not in cell.metadata, cell.id


# --------------------------------------------------------------------------------------
# The solution prints the course's numbers
# --------------------------------------------------------------------------------------


def test_solution_prints_the_expected_values(solved):
    nb = solved
    text = tools.squeeze("".join(tools.text_outputs(c) for c in nb.cells if c.cell_type == "code"))
    assert "tensor([0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865])" in text   # scores of x(2)
    assert "tensor([0.4419, 0.6515, 0.5683])" in text                            # z(2)
    assert "tensor([[0.2996, 0.8053]," in text                                   # SelfAttention_v1, seed 123
    assert "tensor([[[-0.4519, 0.2216, 0.4772, 0.1063]," in text                 # the wrapper, seed 123
    assert "-0.0844" not in text                                                 # seed 001's softmax(dim=1) numbers
    assert "tensor([nan, nan, nan])" in text                                     # the naive softmax overflows
    assert "raises ValueError: d_out=5 is not divisible by num_heads=2" in text


# --------------------------------------------------------------------------------------
# Seed 001's own bugs are caught and named
# --------------------------------------------------------------------------------------


def _test_cell_errors(source_nb, grade_id: str, code: str) -> str:
    nb = tools.execute(tools.replace_solution(source_nb, grade_id, code), allow_errors=True, cwd=ROW.source_dir)
    found = tools.errors(tools.cell_by_grade_id(nb, f"{grade_id}_test"))
    assert found, f"{grade_id}_test passed seed 001's code"
    return "\n".join(f"{ename}: {evalue}" for ename, evalue in found)


def test_seed_causal_attention_is_caught(source_nb):
    message = _test_cell_errors(source_nb, "causal_attention", SEED_CAUSAL_ATTENTION)
    assert "CheckFailed" in message
    assert "softmax over the wrong dimension" in message


def test_seed_multi_head_attention_is_caught(source_nb):
    message = _test_cell_errors(source_nb, "multihead_attention", SEED_MULTI_HEAD_ATTENTION)
    assert "d_out" in message
