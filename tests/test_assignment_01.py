"""Assignment 01 (attention basics): the release, the solution, the student's start, two known bugs.

Everything runs for real: nbgrader generates the release, nbclient runs the notebooks in a
python3 kernel. Each notebook is executed once per module and shared by the tests.
"""

from __future__ import annotations

import json
import re

import notebook_tools as tools

ASSIGNMENT = "01_attention_basics"
SOURCE_DIR = tools.REPO_ROOT / "source" / ASSIGNMENT
RELEASE_DIR = tools.REPO_ROOT / "release" / ASSIGNMENT
NOTEBOOK = "attention_basics.ipynb"

POINTS = {"softmax_stable": 1, "context_vectors": 1, "self_attention_v1": 1, "self_attention_v2": 1,
          "transfer_weights": 1, "causal_attention": 1, "multihead_wrapper": 1, "two_dim_wrapper": 1,
          "multihead_attention": 2}

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


# --------------------------------------------------------------------------------------
# The source notebook's shape
# --------------------------------------------------------------------------------------


def test_source_is_graded_as_planned(source_nb):
    """Its items, their points and the cells around them. What every source must be (clean, with
    a locked setup cell first) is checked for every assignment in test_notebooks.py."""
    assert source_nb.metadata["language_info"]["name"] == "python"

    setup = tools.cell_by_grade_id(source_nb, "setup")
    assert "transformer_lm" not in setup.source

    tools.assert_graded_as_planned(source_nb, POINTS)


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
# 1. The committed release is what nbgrader makes from the source, without solutions
# --------------------------------------------------------------------------------------


def test_release_contains_no_solutions(source_nb):
    release = tools.read(RELEASE_DIR / NOTEBOOK)
    text = "\n".join(cell.source for cell in release.cells)
    assert "BEGIN SOLUTION" not in json.dumps(release) and "END SOLUTION" not in json.dumps(release)
    bodies = tools.solution_bodies(source_nb)
    assert set(bodies) == set(POINTS)
    for name, lines in bodies.items():
        assert lines, f"{name}: no solution body in the source"
        cell = tools.cell_by_grade_id(release, name)
        assert "raise NotImplementedError()" in cell.source
        left = {line.strip() for line in cell.source.splitlines()}
        for line in lines:
            if re.search(r"[A-Za-z]", line):   # skip lines like ")" that skeletons share
                assert line not in left, f"{name}: solution line left in the release: {line}"
        assert tools.squeeze(" ".join(lines)) not in tools.squeeze(text)
    # The skeleton keeps what a student needs to see: the signatures.
    for signature in ("def softmax_stable(x):", "def context_vectors(inputs):",
                      "class SelfAttention_v1(nn.Module):", "def __init__(self, d_in, d_out):",
                      "def transfer_weights(sa_v2, sa_v1):",
                      "def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):",
                      "def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):",
                      "def two_dim_wrapper(d_in, context_length, dropout=0.0):", "def forward(self, x):"):
        assert signature in text


# --------------------------------------------------------------------------------------
# 2. The solution runs, fast, and prints the course's numbers
# --------------------------------------------------------------------------------------


def test_solution_runs_quickly(solved):
    nb, seconds = solved
    assert seconds < 60, f"the solution notebook took {seconds:.1f} s"
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not tools.errors(cell), f"cell {cell.id} failed: {tools.errors(cell)}"


def test_solution_prints_the_expected_values(solved):
    nb, _ = solved
    text = tools.squeeze("".join(tools.text_outputs(c) for c in nb.cells if c.cell_type == "code"))
    assert "tensor([0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865])" in text   # scores of x(2)
    assert "tensor([0.4419, 0.6515, 0.5683])" in text                            # z(2)
    assert "tensor([[0.2996, 0.8053]," in text                                   # SelfAttention_v1, seed 123
    assert "tensor([[[-0.4519, 0.2216, 0.4772, 0.1063]," in text                 # the wrapper, seed 123
    assert "-0.0844" not in text                                                 # seed 001's softmax(dim=1) numbers
    assert "tensor([nan, nan, nan])" in text                                     # the naive softmax overflows
    assert "raises ValueError: d_out=5 is not divisible by num_heads=2" in text


def test_every_check_passes_in_the_solution(solved):
    nb, _ = solved
    for name in POINTS:
        output = tools.text_outputs(tools.cell_by_grade_id(nb, f"{name}_test"))
        assert output.strip(), f"{name}_test printed nothing"
        assert "orrect" in output, output


# --------------------------------------------------------------------------------------
# 3. A student's first run: every check says TODO, nothing else breaks
# --------------------------------------------------------------------------------------


def test_release_reports_todo_everywhere(released_run):
    tools.assert_every_check_says_todo(released_run, [f"{name}_test" for name in POINTS])
    # Cells that need no student code still show their numbers.
    text = tools.squeeze("".join(tools.text_outputs(c) for c in released_run.cells if c.cell_type == "code"))
    assert "tensor([0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865])" in text
    assert "tensor([0.4419, 0.6515, 0.5683])" in text


# --------------------------------------------------------------------------------------
# 4. Seed 001's own bugs are caught and named
# --------------------------------------------------------------------------------------


def _test_cell_errors(source_nb, grade_id: str, code: str) -> str:
    nb = tools.execute(tools.replace_solution(source_nb, grade_id, code), allow_errors=True, cwd=SOURCE_DIR)
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


def test_solution_gets_full_marks_and_the_blank_release_zero(graded_class):
    """Read from the hostile class of tests/hostile_class.py, graded once per session."""
    root, _, _ = graded_class
    report = {student: json.loads((root / "reports" / ASSIGNMENT / f"{student}.json").read_text())
              for student in ("ada_solution", "bo_blank")}
    tools.assert_full_marks_and_zero(report["ada_solution"], report["bo_blank"])
