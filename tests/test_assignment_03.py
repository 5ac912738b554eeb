"""Assignment 03 (attention in PyTorch): the release, the solution, the student's start, the grader.

Everything runs for real: nbgrader generates the release, nbclient runs the notebooks in a
python3 kernel, and the real ``autograder grade`` grades a small class (one call for every
submission) in a sandbox. Each notebook is executed once per module and shared by the tests. The
tests every assignment gets come from its row of tests/assignments.py (tests/assignment_tests.py);
the ones below are this assignment's own.
"""

from __future__ import annotations

import nbformat
import pytest

import assignment_tests
import assignments
import notebook_tools as tools
from autograder.running import sandbox

ROW = assignments.BY_NAME["03_pytorch_attention"]
globals().update(assignment_tests.tests_for(ROW))

# An answer that hands the work to PyTorch: correct numbers, but the exercise was to write it.
SDPA_ATTENTION = '''def my_attention(q, k, v, attn_mask=None):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
'''

# The most common masking mistake: masked_fill fills where its condition is True, here the allowed pairs.
INVERTED_MASK_ATTENTION = '''def my_attention(q, k, v, attn_mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        scores = scores.masked_fill(attn_mask, float("-inf"))
    elif attn_mask is not None:
        scores = scores + attn_mask
    return torch.softmax(scores, dim=-1) @ v
'''


# The library reached without its name in the answer's text: caught by what ran in the sandbox.
SDPA_BY_GETATTR = '''def my_attention(q, k, v, attn_mask=None):
    return getattr(F, "scaled_dot_" + "product_attention")(q, k, v, attn_mask=attn_mask)
'''
LIBRARY_HELPER = '''def run_library(layer, x, mask):
    blocked = ~mask if mask is not None and mask.dtype == torch.bool else mask
    return layer(x, x, x, attn_mask=blocked, need_weights=False)[0]
'''


def library_through_a_helper(source_nb):
    """The solution, whose MultiheadedSelfAttention keeps the layer it loads from and runs it
    through ``run_library``, a function of an ordinary cell above the answer."""
    nb = tools.read(source_nb)
    source = tools.cell_by_grade_id(nb, "multiheaded_self_attention").source
    start = source.index("        batch, seq, _ = input.shape")
    end = source.index("        ### END SOLUTION", start)
    source = source[:start] + "        return run_library(self.library, input, attn_mask)\n" + source[end:]
    source = source.replace("        w_q, w_k, w_v = mha.in_proj_weight", "        self.library = mha\n"
                            "        w_q, w_k, w_v = mha.in_proj_weight")
    nb = tools.replace_solution(nb, "multiheaded_self_attention", source)
    answer = nb.cells.index(tools.cell_by_grade_id(nb, "multiheaded_self_attention"))
    nb.cells.insert(answer, nbformat.v4.new_code_cell(LIBRARY_HELPER))
    return nb


def wrong_norm_order(source_nb) -> str:
    """The solution's decoder layer with the two LayerNorm orders swapped."""
    source = tools.cell_by_grade_id(source_nb, "transformer_decoder_layer").source
    assert source.count("if self.norm_first:") == 1
    return source.replace("if self.norm_first:", "if not self.norm_first:")


@pytest.fixture(scope="module")
def reports(source_nb, tmp_path_factory):
    """One class graded by the real grader, in one call: the solution; an answer that calls
    F.scaled_dot_product_attention together with a decoder layer whose LayerNorms are in the
    wrong order; an inverted boolean mask; and the blank release."""
    if sandbox.detect_isolation().name != "bubblewrap":
        pytest.skip(f"needs bubblewrap: {sandbox.detect_isolation().detail}")
    forbidden = tools.replace_solution(source_nb, "my_attention", SDPA_ATTENTION)
    forbidden = tools.replace_solution(forbidden, "transformer_decoder_layer", wrong_norm_order(source_nb))
    submissions = {"solution": source_nb, "library_call": forbidden,
                   "inverted_mask": tools.replace_solution(source_nb, "my_attention", INVERTED_MASK_ATTENTION),
                   "blank": tools.read(ROW.release_path),
                   "sdpa_by_getattr": tools.replace_solution(source_nb, "my_attention", SDPA_BY_GETATTR),
                   "library_by_helper": library_through_a_helper(source_nb)}
    graded = tools.grade_class(ROW.name, tmp_path_factory.mktemp("course"), submissions)
    return {student: {item["grade_id"]: item for item in report["items"]} | {"_report": report}
            for student, report in graded.items()}


@pytest.fixture(scope="module")
def solution_and_blank(reports):
    """The solution's and the blank release's reports, from the class of ``reports``."""
    return reports["solution"]["_report"], reports["blank"]["_report"]


# --------------------------------------------------------------------------------------
# The source notebook's shape
# --------------------------------------------------------------------------------------


def test_library_attention_only_in_test_and_demo_cells(source_nb):
    """Answers must not mention PyTorch's attention (the grader would mark them forbidden: checked
    for every assignment by test_source_is_graded_as_planned); the test cells use it as the
    reference, the mask conventions included."""
    attention_test = tools.cell_by_grade_id(source_nb, "my_attention_test").source
    assert "F.scaled_dot_product_attention(q, k, v, attn_mask=mask)" in attention_test
    assert "range(100)" in attention_test
    conventions = tools.cell_by_grade_id(source_nb, "multiheaded_self_attention_test").source
    assert "theirs(x, x, x, attn_mask=~allowed)" in conventions        # nn.MultiheadAttention: True blocks
    assert "mine, x, attn_mask=allowed)" in conventions                # F.sdpa's convention: True takes part


def test_diagram_is_drawn_and_torchview_only_mentioned(source_nb, solved):
    nb = solved
    diagram = next(c for c in nb.cells if c.id == "layer-diagram")
    assert "skip-grading" in diagram.metadata["tags"]
    assert any("image/png" in o.get("data", {}) for o in diagram.outputs)
    code = "\n".join(c.source for c in source_nb.cells if c.cell_type == "code")
    assert "torchview" not in code
    assert any("torchview" in c.source for c in source_nb.cells if c.cell_type == "markdown")


def test_teaching_cells_are_ungraded_and_draw_or_assert(source_nb, solved):
    """The pictures and the predict-then-run cells are demonstrations: tagged skip-grading, drawn
    with matplotlib, and (where they state a fact) asserting it, so running the solution checks them."""
    nb = solved
    cells = {c.id: c for c in nb.cells}
    for figure in ("causal-heatmap", "mask-conventions-figure", "layer-diagram"):
        assert any("image/png" in o.get("data", {}) for o in cells[figure].outputs), figure
    for demo in ("renormalise", "flip-predict", "is-causal-predict", "mha-empty-row-predict", "is-causal-hint",
                 "gpt-layer"):
        assert "assert " in cells[demo].source, demo
    for cell in source_nb.cells:
        if cell.cell_type == "code" and ("plt." in cell.source or "assert " in cell.source):
            assert "nbgrader" in cell.metadata or "skip-grading" in cell.metadata.get("tags", []), cell.id
    prompts = [c for c in source_nb.cells
               if c.cell_type == "markdown" and c.source.startswith("**Predict, then run:**")]
    assert len(prompts) >= 2
    markdown = "\n".join(c.source for c in source_nb.cells if c.cell_type == "markdown")
    for word in ("the seed", "activity's", "seen before"):
        assert word not in markdown, word
    assert cells["conventions"].source.startswith("## Conventions") and cells["sources"].source.startswith("## Sources")


# --------------------------------------------------------------------------------------
# The solution answers the masking questions in numbers
# --------------------------------------------------------------------------------------


def test_solution_shows_the_masking_answers(solved):
    """The fill-value question answered in numbers: -1e9 does not fit float16, a finite fill
    spreads a fully masked row evenly, -inf gives nan in a naive version and zeros in PyTorch."""
    nb = solved
    outputs = {c.id: tools.squeeze(tools.text_outputs(c)) for c in nb.cells if c.cell_type == "code"}
    assert "cannot be converted" in outputs["fill-value-demo"]
    assert "[0.3333, 0.3333, 0.3333]" in outputs["fill-value-demo"]
    assert "[ nan, nan, nan]" in outputs["fill-value-demo"]
    assert "[ nan, nan, nan]" in outputs["empty-row"]
    assert "[0.0000, 0.0000, 0.0000]" in outputs["empty-row"]
    assert "True False" in outputs["mask-conventions"]
    assert outputs["causality"].startswith("tensor([[0.0000, 0.0000, 0.0000, 0.0000,")


# --------------------------------------------------------------------------------------
# The real grader: a forbidden call, named mistakes, the norm order
# --------------------------------------------------------------------------------------


def test_library_call_is_forbidden_and_named(reports):
    item = reports["library_call"]["my_attention"]
    assert item["status"] == "forbidden" and item["score"] == 0
    assert "scaled_dot_product_attention" in item["message"]
    # The rest of the notebook is still graded on its own merits.
    assert reports["library_call"]["self_attention_head"]["status"] == "passed"
    assert reports["library_call"]["multiheaded_self_attention"]["status"] == "passed"


def test_library_calls_out_of_the_answers_text_are_found_by_what_ran(reports):
    """SDPA through a getattr string, and nn.MultiheadAttention run by a helper in another cell:
    no forbidden name in the answers' text, but the trace of what ran in the sandbox holds them.
    Each costs only the item whose answer made the call: the classes that reuse my_attention
    keep their points."""
    by_getattr = reports["sdpa_by_getattr"]
    assert (by_getattr["my_attention"]["status"], by_getattr["my_attention"]["score"]) == ("forbidden", 0)
    assert "ran scaled_dot_product_attention" in by_getattr["my_attention"]["message"]
    assert by_getattr["_report"]["total"] == 10 - ROW.points["my_attention"], by_getattr["_report"]["items"]
    by_helper = reports["library_by_helper"]
    item = by_helper["multiheaded_self_attention"]
    assert (item["status"], item["score"]) == ("forbidden", 0) and "multi_head_attention_forward" in item["message"]
    assert by_helper["_report"]["total"] == 10 - ROW.points["multiheaded_self_attention"], by_helper["_report"]["items"]
    for report in (by_getattr, by_helper):
        assert any("Forbidden call" in flag for flag in report["_report"]["flags"]), report["_report"]["flags"]


def test_wrong_norm_order_fails_the_decoder_layer(reports):
    item = reports["library_call"]["transformer_decoder_layer"]
    assert item["status"] == "failed" and item["score"] == 0
    assert "output" in item["message"]


def test_inverted_mask_fails_with_the_mistake_named(reports):
    item = reports["inverted_mask"]["my_attention"]
    assert item["status"] == "failed" and item["score"] == 0
    assert item["mistake"] == "the boolean mask is inverted"
    assert "~mask" in item["hint"]
