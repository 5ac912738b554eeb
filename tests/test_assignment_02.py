"""Assignment 02 (self-attention and multi-head attention): the release, the solution, the
student's start, and grading through the real grader.

Everything runs for real: nbgrader generates the release, nbclient runs the notebooks in a
python3 kernel, and ``autograder grade`` grades submissions in a sandbox. The solution and
the release are executed once per module, and every submission is graded in one class run. The
tests every assignment gets come from its row of tests/assignments.py (tests/assignment_tests.py);
the ones below are this assignment's own.
"""

from __future__ import annotations

import re

import pytest

import assignment_tests
import assignments
import notebook_tools as tools
from transformer_lm import catalog
from transformer_lm.style import style_problems

ROW = assignments.BY_NAME["02_multihead_attention"]
globals().update(assignment_tests.tests_for(ROW))

# Seed 003's own SelfAttention, as a student would paste it (the PDF's wrapped lines joined).
# Two of its lines are longer than 120 characters, by their trailing shape comments.
SEED_SELF_ATTENTION = '''class SelfAttention(nn.Module):
    def __init__(self, input_size, hidden):
        """Self-attention module which computes softmax(xQ @ xK^T) @ xV

        Args:
            input_size: int, size of input vectors
            hidden: int, size of output vectors and hidden states
        """
        # Task 1.1: Create layers requires for self-attention (1 point)
        # YOUR CODE STARTS HERE (~4 lines)
        super().__init__()
        self.q = nn.Linear(input_size, hidden) # [input_size, hidden]
        self.k = nn.Linear(input_size, hidden) # [input_size, hidden]
        self.v = nn.Linear(input_size, hidden) # [input_size, hidden]
        self.scale = hidden ** 0.5
        # YOUR CODE ENDS HERE

    def forward(self, x):
        """Softmax(xQ @ xK^T) @ xV

        Args:
            x: FloatTensor[batch_size, seq_len, input_size]

        Returns:
            FloatTensor[batch_size, seq_len, hidden]
        """
        # Task 1.2: Compute Self Attention (3 points)
        # 1. Compute key, query and value matrices from your input x
        # 2. Compute the scores using query and key matrices
        # 3. Compute probabilities using softmax and scale the scores using
        # 4. Compute the output using probabilities and value matrices
        #
        # Write shape of each tensor for each line of code
        # for example:
        #     Suppose batch_size = 3 and seq_len = 5
        #     x = torch.zeros(3, 5) # shape [batch_size, seq_len]
        #     x = x.unsqueeze(1)     # shape [batch_size, 1, seq_len]
        #
        # NOTE: Remember that we work with batches of data [batch_size, seq_len, hidden],
        # not just single examples [seq_len, hidden] as we did in the lecture. This changes your shapes a bit.
        #
        # YOUR CODE STARTS HERE (~ can be implemented in 4 lines or 3 if you combine steps 2 and 3 into one operation)
        q = self.q(x) # [batch_size, seq_len, hidden]
        scores = torch.bmm(q, self.k(x).transpose(1, 2)) / self.scale # [batch_size, seq_len, hidden] -> [batch_size, seq_len, seq_len]
        probs = F.softmax(scores, dim=-1) # [batch_size, seq_len, seq_len]
        return torch.bmm(probs, self.v(x)) # [batch_size, seq_len, seq_len] @ [batch_size, seq_len, hidden] -> [batch_size, seq_len, hidden]
        # YOUR CODE ENDS HERE
'''

# Seed 003's own MultiHeadSelfAttention, pasted the same way.
SEED_MULTI_HEAD_SELF_ATTENTION = '''class MultiHeadSelfAttention(nn.Module):
    def __init__(self, input_size, hidden, num_heads, causal=False, dropout=0):
        """
        Args:
            input_size: int, size of input vectors
            hidden: int, size of output vectors and hidden states
            num_heads: int, number of attention heads, should be a divisor of hidden
            causal: use causal masking (do not allow queries to look to the keys that correspond to the future tokens)
        """
        if hidden % num_heads:
            raise ValueError(f"hidden should be divisible by num_heads, "
                             f"but got hidden={hidden} and num_heads={num_heads}")
        super().__init__()

        self.k = nn.Linear(input_size, hidden)
        self.q = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)
        self.mix = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(dropout)

        self.num_heads = num_heads
        self.head_size = hidden // num_heads
        self.scale = self.head_size ** 0.5
        self.causal = causal # causal masking

    def forward(self, x, return_attention=False):
        """Computes [Softmax(x Q_1 @ x K_1^T) @ x V_1 : ... : Softmax(x Q_heads @ x K_heads^T) @ x V_heads] @ U
        Args:
            x: FloatTensor[batch_size, seq_len, input_size]

        Returns:
            FloatTensor[batch_size, seq_len, hidden]
            if return_attention is True, returns also FloatTensor[batch_size * num_heads, seq_len, seq_len]
        """
        bs, seq, _ = x.shape

        # Task 2.1 (3 points)
        # YOUR CODE STARTS HERE (Our implementation is in 3 lines, one for each for k, q and v)
        k = self.k(x).view(bs, seq, self.num_heads, self.head_size).transpose(1, 2)
        # shape [batch_size, num_heads, seq_len, head_size]
        # 'k' [batch_size, seq_len, input_size]
        # -> view [batch_size, seq_len, num_heads, head_size]
        # -> transpose [batch_size, num_heads, seq_len, head_size]
        q = self.q(x).view(bs, seq, self.num_heads, self.head_size).transpose(1, 2)
        # shape [batch_size, num_heads, seq_len, head_size]
        # 'q' [batch_size, seq_len, input_size]
        # -> view [batch_size, seq_len, num_heads, head_size]
        # -> transpose [batch_size, num_heads, seq_len, head_size]
        v = self.v(x).view(bs, seq, self.num_heads, self.head_size).transpose(1, 2)
        # shape [batch_size, num_heads, seq_len, head_size]
        # 'v' [batch_size, seq_len, input_size]
        # -> view [batch_size, seq_len, num_heads, head_size]
        # -> transpose [batch_size, num_heads, seq_len, head_size]
        scores = torch.matmul(q, k.transpose(-2, -1)) / self.scale
        # shape [batch_size, num_heads, seq_len, seq_len]
        # 'q' [batch_size, num_heads, seq_len, head_size]
        # @ 'k.T' [batch_size, num_heads, head_size, seq_len]
        # -> [batch_size, num_heads, seq_len, seq_len]
        # YOUR CODE ENDS HERE

        if self.causal:
            # Task 2.2 (1 point)
            # Apply casual mask to the scores
            # YOUR CODE STARTS HERE (Our implementation is in 2 lines)
            mask = torch.triu(torch.ones(seq, seq, device=x.device), diagonal=1).bool() # [seq_len, seq_len]
            scores = scores.masked_fill(mask[None, None, :, :], float('-inf')) # [bs, num_heads, seq_len, seq_len]
            # YOUR CODE ENDS HERE

        # Task 2.3 (2 points)
        # Compute probability (probs) and attention (att), remember to apply mixing matrix
        # YOUR CODE STARTS HERE (can be implemented in 4 lines)
        probs = F.softmax(scores, dim=-1) # [bs, num_heads, seq_len, seq_len]
        probs = self.dropout(probs) # [bs, num_heads, seq_len, seq_len]

        att = torch.matmul(probs, v)
        # [bs, num_heads, seq_len, seq_len]
        # @ [bs, num_heads, seq_len, head_size] -> [bs, num_heads, seq_len, head_size]

        probs = probs.reshape(bs * self.num_heads, seq, seq)
        # 'probs' [bs, num_heads, seq_len, seq_len]
        # -> reshape [bs * num_heads, seq_len, seq_len]

        att = att.transpose(1, 2).contiguous().view(bs, seq, -1) # [bs, seq_len, hidden]

        att = self.mix(att)
        # [bs, seq_len, hidden] @ [hidden, hidden] -> [bs, seq_len, hidden]
        # YOUR CODE ENDS HERE

        if return_attention:
            return att, probs

        return att
'''

# A typical mistake: the heads merged with view, without the transpose back.
MERGED_WITHOUT_TRANSPOSE = SEED_MULTI_HEAD_SELF_ATTENTION.replace(
    "att = att.transpose(1, 2).contiguous().view(bs, seq, -1)", "att = att.contiguous().view(bs, seq, -1)")


def release_with(answers: dict[str, str]):
    """The committed release with answer cells replaced, as a student would fill them."""
    return tools.replace_solutions(ROW.release_path, answers)


@pytest.fixture(scope="module")
def reports(source_nb, tmp_path_factory):
    """Five submissions graded in one run of the grader (the blank release among them):

    * ``solution``: the release filled with the source's answer cells;
    * ``pep8_allowed``: the solution written with spacing PEP 8 allows (``bs*self.num_heads``,
      ``hidden**0.5``, a line broken before ``/``);
    * ``seed``: the release filled with seed 003's own classes, pasted whole;
    * ``mistakes``: the solution's SelfAttention with one PEP 8 violation, and seed 003's
      MultiHeadSelfAttention with the heads merged by view without transpose;
    * ``swapped``: the solution with SelfAttention's layers made as nn.Linear(hidden, input_size);
      ``swapped_unscaled``: the same, with forward's scores not scaled either.
    """
    solution = {gid: tools.cell_by_grade_id(source_nb, gid).source for gid in ROW.answers}
    pep8 = solution["self_attention"].replace("self.scale = hidden ** 0.5", "self.scale=hidden ** 0.5")
    assert pep8 != solution["self_attention"]
    allowed = {"self_attention": solution["self_attention"].replace("hidden ** 0.5", "hidden**0.5").replace(
                   "k.transpose(1, 2) / self.scale", "k.transpose(1, 2)/self.scale"),
               "multihead_self_attention": solution["multihead_self_attention"].replace(
                   "(bs * self.num_heads, seq", "(bs*self.num_heads, seq").replace(
                   "scores = q @ k.transpose(1, 2) / self.scale", "scores = (q @ k.transpose(1, 2)\n"
                                                                  "                  / self.scale)")}
    assert all(allowed[gid] != solution[gid] for gid in ROW.answers)
    swapped = solution["self_attention"]
    for name in "qkv":
        swapped = swapped.replace(f"self.{name} = nn.Linear(input_size, hidden)",
                                  f"self.{name} = nn.Linear(hidden, input_size)")
    unscaled = swapped.replace("k.transpose(1, 2) / self.scale", "k.transpose(1, 2)")
    assert solution["self_attention"] != swapped != unscaled
    submissions = {
        "solution": release_with(solution),
        "pep8_allowed": release_with(allowed),
        "seed": release_with({"self_attention": SEED_SELF_ATTENTION,
                              "multihead_self_attention": SEED_MULTI_HEAD_SELF_ATTENTION}),
        "mistakes": release_with({"self_attention": pep8, "multihead_self_attention": MERGED_WITHOUT_TRANSPOSE}),
        "swapped": release_with({**solution, "self_attention": swapped}),
        "swapped_unscaled": release_with({**solution, "self_attention": unscaled}),
        "blank": tools.read(ROW.release_path),
    }
    graded = tools.grade_class(ROW.name, tmp_path_factory.mktemp("course"), submissions)
    return {student: {item["grade_id"]: item for item in report["items"]} | {"": report}
            for student, report in graded.items()}


@pytest.fixture(scope="module")
def solution_and_blank(reports):
    """The solution's and the blank release's reports, from the class of ``reports``."""
    return reports["solution"][""], reports["blank"][""]


# --------------------------------------------------------------------------------------
# The source notebook's shape
# --------------------------------------------------------------------------------------


def test_solution_follows_pep8_and_comments_every_tensor(source_nb):
    for grade_id in ROW.answers:
        source = tools.cell_by_grade_id(source_nb, grade_id).source
        assert style_problems(source) == [], grade_id
        lines = tools.solution_lines(source)
        for previous, line in zip([""] + lines, lines):
            statement = re.match(r"(return |[\w.]+ = )", line)
            if statement and not line.startswith("self."):
                assert "#" in line or previous.startswith("#"), f"{grade_id}: no shape comment for: {line}"


# --------------------------------------------------------------------------------------
# The solution's demonstrations
# --------------------------------------------------------------------------------------


def test_solution_demos_show_what_the_text_says(source_nb, solved):
    """Every code cell the grader does not track is a demonstration, tagged so that it does not run
    when graded; the plots show the probabilities as they are; each demonstration shows what the
    text says."""
    for cell in source_nb.cells:
        if cell.cell_type == "code" and tools.grade_id(cell) is None:
            assert "skip-grading" in cell.metadata.get("tags", []), f"cell {cell.id} is not tagged skip-grading"
    for cell in source_nb.cells:   # no softmax anywhere near the plots
        names = ("plot_heads", "probs_plain", "probs_causal")
        if cell.cell_type == "code" and any(name in cell.source for name in names):
            assert "softmax" not in cell.source, f"cell {cell.id} applies a softmax to probabilities"
    nb = solved
    cells = {cell.id: cell for cell in nb.cells}
    for plot in ("demo-plain", "demo-causal"):   # one figure per sequence
        images = [o for o in cells[plot].outputs if o.output_type == "display_data" and "image/png" in o.data]
        assert len(images) == 3, plot
    rows = tools.squeeze(tools.text_outputs(cells["demo-causal"]))
    assert "[[1.0000, 0.0000, 0.0000, 0.0000, 0.0000, 0.0000, 0.0000]," in rows   # token 0 sees only itself
    saturation = tools.text_outputs(cells["q1-demo"]).splitlines()[1:]
    largest = [float(line.split("|")[1].split()[0]) for line in saturation]
    assert len(largest) == 5 and largest == sorted(largest) and largest[-1] > 0.9   # more focused as h grows
    padding = tools.text_outputs(cells["padding-demo"])
    assert "nan" in padding and "[0., 0., 0.]" in padding
    dropout = tools.text_outputs(cells["dropout-demo"])
    assert "train: the same output twice? False" in dropout and "eval:  the same output twice? True" in dropout


# --------------------------------------------------------------------------------------
# Seed 003's own code earns every autograded point through the real grader
# --------------------------------------------------------------------------------------


def test_seed_code_gets_full_marks_without_deduction(reports):
    """Seed 003's own classes pass every hidden check at full points. Two of its lines run past
    120 characters only because of their shape comments, which the style rules do not count."""
    report = reports["seed"]
    assert report[""]["flags"] == []
    for name, points in ROW.points.items():
        item = report[name]
        assert (item["status"], item["score"], item["deduction"]) == ("passed", points, ""), (name, item["message"])
    assert report[""]["total"] == report[""]["max_total"] == 10
    assert style_problems(SEED_MULTI_HEAD_SELF_ATTENTION) == style_problems(SEED_SELF_ATTENTION) == []


# --------------------------------------------------------------------------------------
# A typical mistake is named; a PEP 8 violation costs exactly the deduction
# --------------------------------------------------------------------------------------


def test_merged_heads_without_transpose_cost_the_output_item_only_and_are_named(reports):
    """Seed 003's rubric puts the merge in task 2.3, the output: the scores and the mask are right
    and keep their points (issue 15's case: this mistake cost 6 of 6 points)."""
    report = reports["mistakes"]
    item = report["mha_output"]
    assert item["status"] == "failed" and item["score"] == 0
    assert item["mistake"] == "heads merged with view but no transpose", item
    assert ".contiguous().view(bs, seq, hidden)" in item["hint"], item["hint"]   # the notebook's own names
    for name in ("mha_scores", "mha_causal_mask"):
        assert report[name]["status"] == "passed" and report[name]["score"] == ROW.points[name], report[name]


def test_layers_made_the_wrong_way_round_cost_the_constructor_alone_and_are_named(reports):
    """nn.Linear(hidden, input_size) costs the constructor's point, named; forward is then graded with
    the course's layers in the student's class, so it keeps its points when it is right and loses
    them when it is wrong too (its scores not scaled)."""
    swapped, title = reports["swapped"], catalog.BY_NAME["linear_sizes_swapped"].title
    init = swapped["self_attention_init"]
    assert (init["status"], init["score"], init["mistake"]) == ("failed", 0, title), init
    forward = swapped["self_attention_forward"]
    assert (forward["status"], forward["score"]) == ("passed", ROW.points["self_attention_forward"]), forward
    # the course's layers stood in, under the student's own forward: not the whole class
    assert "run on the course's layers q, k and v of SelfAttention in place of yours" in forward["message"], forward
    assert swapped[""]["total"] == swapped[""]["max_total"] - 1
    both = reports["swapped_unscaled"]
    assert (both["self_attention_init"]["score"], both["self_attention_init"]["mistake"]) == (0, title)
    forward = both["self_attention_forward"]
    assert (forward["status"], forward["score"]) == ("failed", 0), forward
    assert forward["mistake"] == catalog.BY_NAME["no_scaling"].title, forward
    assert forward["message"].startswith("With the course's layers q, k and v of SelfAttention in place of yours: ")


def test_spacing_pep8_allows_keeps_every_point(reports):
    """pycodestyle leaves E226 (``bs*heads``) and W503 (a break before an operator) out by default,
    since PEP 8 allows both; the course's rules extend its default list and never replace it."""
    report = reports["pep8_allowed"]
    assert report[""]["total"] == report[""]["max_total"] == 10, [i for i in report.values() if i.get("deduction")]
    assert all(item["deduction"] == "" for name, item in report.items() if name)


def test_pep8_violation_costs_exactly_the_deduction(reports):
    report = reports["mistakes"]
    forward = report["self_attention_forward"]
    assert forward["status"] == "passed" and forward["score"] == ROW.points["self_attention_forward"] - 1
    assert forward["deduction"].startswith("pep8"), forward
    assert "E225" in forward["deduction"] and "'self.scale=hidden ** 0.5 " in forward["deduction"]   # the line itself
    init = report["self_attention_init"]   # the same answer cell, but the deduction is taken once
    assert (init["status"], init["score"], init["deduction"]) == ("passed", 1, "")
    assert report[""]["total"] == 1 + 2 + ROW.points["mha_scores"] + ROW.points["mha_causal_mask"]


def test_visible_check_names_the_mistake(source_nb):
    """The test cell of 2.1, run here on the mistaken class, says what is wrong."""
    from transformer_lm import checks

    namespace: dict = {}
    exec(tools.cell_by_grade_id(source_nb, "setup").source, namespace)
    exec(MERGED_WITHOUT_TRANSPOSE, namespace)
    with pytest.raises(checks.CheckFailed) as failure:
        exec(tools.cell_by_grade_id(source_nb, "mha_scores_test").source, namespace)
    assert "heads merged with view but no transpose" in str(failure.value)
