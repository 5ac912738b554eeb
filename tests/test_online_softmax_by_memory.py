"""Assignment 05's online softmax judged by memory: ``softmax_stats(blocks)`` reads rows of 100 MiB
of scores from a generator that makes each 1 MiB block on demand, in a run capped at 48 MiB more
than it held before its first cell. Each whole-row pass (the blocks put back together by
``torch.cat``, kept in a list and stacked, reduced by ``scatter_reduce`` and ``index_add``, by
pooling or by ``logsumexp``) loses the item, named as a whole-row pass, in the visible test cell and
in the grader, and costs no other item; each correct order of merging (block after block, a tree
of pairwise merges, every block's statistics merged in one step, float64 or log-domain running
statistics) keeps every point with no flag.

Against the grader before (commit 2b2f6be, which judged ``online_softmax`` by the trace's widest
reduction at small sizes): the whole row reduced by ``scatter_reduce`` and ``index_add``, and by
pooling, kept the item's 2 points, and the honest merge of every block's statistics in one step
lost them.
"""

import pytest

import assignments
import notebook_tools as tools
from honest_softmax import SOFTMAX
from live_checks import visible
from autograder.running import sandbox
from transformer_lm import catalog
from transformer_lm.forbidding import SOFTMAX as FORBIDDEN_SOFTMAX, forbidding
from transformer_lm.judging import CheckFailed

ROW = assignments.BY_NAME["05_efficient_attention"]
pytestmark = pytest.mark.timeout(900)
WHOLE_ROW = catalog.BY_NAME["full_row_reduction"]
MERGE = SOFTMAX["plain"].split("def softmax_stats")[0].removeprefix("# style: the notebook's recurrence, statistics "
                                                                     "kept with keepdim\n")
ONLINE = '''

def online_softmax(scores, block):
    maximum, total = softmax_stats(scores.split(block, dim=-1))
    return torch.exp(scores - maximum.unsqueeze(-1)) / total.unsqueeze(-1)
'''
EVASIONS = {
    # the example: the whole row's maximum by scatter_reduce, its sum by index_add
    "scatter_reduce_and_index_add": '''def softmax_stats(blocks):
    row = torch.cat([part for part in blocks], dim=-1)
    column = torch.zeros(row.shape[-1], dtype=torch.long)
    top = row.new_full(row.shape[:-1] + (1,), float("-inf")).scatter_reduce(-1, column.expand(row.shape), row, "amax")
    total = row.new_zeros(row.shape[:-1] + (1,)).index_add(-1, column, torch.exp(row - top))
    return top.squeeze(-1), total.squeeze(-1)
''',
    "pooling": '''def softmax_stats(blocks):
    row = torch.cat(list(blocks), dim=-1)
    flat = row.reshape(-1, 1, row.shape[-1])
    top = torch.nn.functional.max_pool1d(flat, flat.shape[-1]).reshape(row.shape[:-1])
    total = torch.nn.functional.avg_pool1d(torch.exp(flat - top.reshape(-1, 1, 1)), flat.shape[-1])
    return top, total.reshape(row.shape[:-1]) * row.shape[-1]
''',
    "cat_then_amax_and_sum": '''def softmax_stats(blocks):
    row = torch.cat(tuple(blocks), dim=-1)
    top = row.amax(dim=-1)
    return top, torch.exp(row - top.unsqueeze(-1)).sum(dim=-1)
''',
    "list_then_stack": '''def softmax_stats(blocks):
    kept = list(blocks)
    width = kept[0].shape[-1]
    padded = torch.stack([torch.nn.functional.pad(b, (0, width - b.shape[-1]), value=float("-inf")) for b in kept])
    top = padded.amax(dim=(0, -1))
    return top, torch.exp(padded - top.unsqueeze(-1)).sum(dim=(0, -1))
''',
    "logsumexp_of_the_concatenation": '''def softmax_stats(blocks):
    row = torch.cat(list(blocks), dim=-1)
    top = row.amax(dim=-1)
    return top, torch.exp(torch.logsumexp(row, dim=-1) - top)
''',
}
HONEST = ("plain", "tree", "stacked", "float64", "log_domain", "nan_to_num")


def as_the_test_cell(softmax_stats) -> None:
    with forbidding(softmax_stats, FORBIDDEN_SOFTMAX):
        visible("softmax_stats", "softmax_stats")(softmax_stats)


def defined(source: str, name: str):
    namespace = {"torch": __import__("torch")}
    exec(source, namespace)
    return namespace[name]


@pytest.mark.parametrize("name", sorted(EVASIONS))
def test_the_test_cell_refuses_a_whole_row_pass_by_the_cap_and_names_it(name):
    with pytest.raises(CheckFailed) as refused:
        as_the_test_cell(defined(MERGE + EVASIONS[name], "softmax_stats"))
    assert "a cap the kernel enforces" in str(refused.value) and "held every block at once" in str(refused.value)
    assert refused.value.mistake is WHOLE_ROW


@pytest.mark.parametrize("name", HONEST)
def test_the_test_cell_passes_every_correct_order_of_merging(name):
    as_the_test_cell(defined(SOFTMAX[name], "softmax_stats"))


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Every submission's items by grade_id, and its report under ``""``."""
    if sandbox.detect_isolation().name != "bubblewrap":
        pytest.skip(f"needs bubblewrap: {sandbox.detect_isolation().detail}")
    source = tools.read(ROW.source_path)
    solution = {gid: tools.answer_cell(source, gid) for gid in ROW.answers}
    cells = {f"honest_{name}": SOFTMAX[name] for name in HONEST} | {
        name: MERGE + body + ONLINE for name, body in EVASIONS.items()}
    reports = tools.grade_class(ROW.name, tmp_path_factory.mktemp("course"),
                                {name: tools.replace_solutions(ROW.release_path, {**solution, "online_softmax": cell})
                                 for name, cell in cells.items()})
    return {student: {item["grade_id"]: item for item in report["items"]} | {"": report}
            for student, report in reports.items()}


@pytest.mark.parametrize("name", HONEST)
def test_every_correct_order_of_merging_keeps_every_point_with_no_flag(graded, name):
    report = graded[f"honest_{name}"][""]
    failed = {i["grade_id"]: i["message"][:300] for i in report["items"] if i["status"] != "passed"}
    assert not failed and report["total"] == report["max_total"] and report["flags"] == [], failed


@pytest.mark.parametrize("name", sorted(EVASIONS))
def test_a_whole_row_pass_loses_the_online_softmax_and_no_other_item(graded, name):
    items = graded[name]
    lost = items["online_softmax"]
    assert lost["score"] == 0 and lost["status"] == "failed", lost
    assert lost["mistake"] == WHOLE_ROW.title and "a cap the kernel enforces" in lost["message"], lost
    kept = {gid: item["message"][:200] for gid, item in items.items()
            if gid and gid != "online_softmax" and item["status"] != "passed"}
    assert not kept and items[""]["flags"] == [], kept
