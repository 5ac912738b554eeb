"""Correct answers to assignment 05, written anew in the styles of public code: the answer cell of
``merge_stats``, ``softmax_stats`` and ``online_softmax``. Their ``softmax_stats`` merge the blocks
in every order a student might: one after another (from the statistics of nothing, or from the
first block's), in float64 or in the log domain, as a tree of pairwise merges, or every block's
statistics kept and merged in one step at the end.
Each source starts with a ``# style:`` line. Every one is tiled (no T x T scores, no whole row of
scores for a block of queries), skips the key blocks wholly in a query block's future, keeps only
q, k, v, out and lse for the backward, and calls no library softmax or attention.
``tests/outside_truth_class.py`` puts them together.
"""

SOFTMAX = {
    "plain": '''# style: the notebook's recurrence, statistics kept with keepdim
def merge_stats(max_a, sum_a, max_b, sum_b):
    maximum = torch.maximum(max_a, max_b)
    scale_a = torch.where(max_a == float("-inf"), torch.zeros_like(sum_a), torch.exp(max_a - maximum))
    scale_b = torch.where(max_b == float("-inf"), torch.zeros_like(sum_b), torch.exp(max_b - maximum))
    return maximum, sum_a * scale_a + sum_b * scale_b


def softmax_stats(blocks):
    m, l = torch.tensor(float("-inf")), torch.tensor(0.0)
    for chunk in blocks:
        chunk_max = chunk.max(dim=-1, keepdim=True).values
        m, l = merge_stats(m, l, chunk_max.squeeze(-1), torch.exp(chunk - chunk_max).sum(dim=-1))
    return m, l


def online_softmax(scores, block):
    m, l = softmax_stats(scores[..., s:s + block] for s in range(0, scores.shape[-1], block))
    return torch.exp(scores - m[..., None]) / l[..., None]
''',
    "nan_to_num": '''# style: lucidrains (chunks by .split, nan_to_num where an empty part gives nan)
def merge_stats(max_a, sum_a, max_b, sum_b):
    new_max = torch.maximum(max_a, max_b)
    return new_max, (sum_a * torch.exp(max_a - new_max)).nan_to_num(0.0) + (sum_b * torch.exp(max_b - new_max)).nan_to_num(0.0)


def softmax_stats(blocks):
    row_max = row_sum = None
    for chunk in blocks:
        chunk_max = chunk.amax(dim=-1)
        chunk_sum = (chunk - chunk_max[..., None]).exp().sum(dim=-1)
        if row_max is None:
            row_max, row_sum = chunk_max, chunk_sum
        else:
            row_max, row_sum = merge_stats(row_max, row_sum, chunk_max, chunk_sum)
    return row_max, row_sum


def online_softmax(scores, block):
    row_max, row_sum = softmax_stats(scores.split(block, dim=-1))
    return (scores - row_max[..., None]).exp() / row_sum[..., None]
''',
    "fairseq": '''# style: old fairseq (.new() constructors, .float() on float32, .type_as)
def merge_stats(max_a, sum_a, max_b, sum_b):
    maximum = torch.max(max_a, max_b)
    empty_a, empty_b = torch.isinf(max_a) & (max_a < 0), torch.isinf(max_b) & (max_b < 0)
    factor_a = torch.exp(max_a.masked_fill(empty_a, 0) - maximum.masked_fill(empty_a, 0)).masked_fill(empty_a, 0)
    factor_b = torch.exp(max_b.masked_fill(empty_b, 0) - maximum.masked_fill(empty_b, 0)).masked_fill(empty_b, 0)
    return maximum, (sum_a.float() * factor_a + sum_b.float() * factor_b).type_as(sum_a)


def softmax_stats(blocks):
    blocks = iter(blocks)
    first = next(blocks).float()
    maximum = first.max(dim=-1)[0]
    total = torch.exp(first - maximum.unsqueeze(-1)).sum(dim=-1)
    del first
    for part in blocks:
        part = part.float()
        part_max = part.max(dim=-1)[0]
        maximum, total = merge_stats(maximum, total, part_max, torch.exp(part - part_max.unsqueeze(-1)).sum(dim=-1))
    return maximum, total


def online_softmax(scores, block):
    x = scores.float()
    maximum, total = softmax_stats(x[..., start:start + block] for start in range(0, x.size(-1), block))
    return (torch.exp(x - maximum.unsqueeze(-1)) / total.unsqueeze(-1)).type_as(scores)
''',
    "float64": '''# style: float64 statistics (merged in double, returned in the input's dtype)
def merge_stats(max_a, sum_a, max_b, sum_b):
    a, b = max_a.double(), max_b.double()
    top = torch.maximum(a, b)
    safe = torch.where(torch.isinf(top), torch.zeros_like(top), top)
    total = sum_a.double() * torch.exp(a - safe) + sum_b.double() * torch.exp(b - safe)
    return top.to(max_a.dtype), total.to(sum_a.dtype)


def softmax_stats(blocks):
    top, total = torch.tensor(float("-inf"), dtype=torch.float64), torch.tensor(0.0, dtype=torch.float64)
    dtype = None
    for part in blocks:
        dtype = part.dtype
        part = part.double()
        part_top = part.amax(dim=-1)
        top, total = merge_stats(top, total, part_top, torch.exp(part - part_top.unsqueeze(-1)).sum(dim=-1))
    return top.to(dtype), total.to(dtype)


def online_softmax(scores, block):
    x = scores.double()
    top, total = softmax_stats(torch.split(x, block, dim=-1))
    return (torch.exp(x - top.unsqueeze(-1)) / total.unsqueeze(-1)).to(scores.dtype)
''',
    "log_domain": '''# style: log-domain merge (each part's sum kept as a logarithm, logaddexp to combine)
def merge_stats(max_a, sum_a, max_b, sum_b):
    maximum = torch.maximum(max_a, max_b)
    log_total = torch.logaddexp(max_a + torch.log(sum_a), max_b + torch.log(sum_b))
    both_empty = torch.isneginf(maximum)
    return maximum, torch.where(both_empty, torch.zeros_like(sum_a), torch.exp(log_total - maximum.masked_fill(both_empty, 0.0)))


def softmax_stats(blocks):
    lse = maximum = torch.tensor(float("-inf"))
    for part in blocks:
        lse = torch.logaddexp(lse, torch.logsumexp(part, dim=-1))
        maximum = torch.maximum(maximum, part.amax(dim=-1))
    return maximum, torch.exp(lse - maximum)


def online_softmax(scores, block):
    stats = softmax_stats(torch.split(scores, block, dim=-1))
    return torch.exp(scores - stats[0].unsqueeze(-1)) / stats[1].unsqueeze(-1)
''',
}
SOFTMAX["tree"] = '''# style: a tree of pairwise merges (a binary counter of merged runs, as parallel reductions pair them)
import functools


def merge_stats(max_a, sum_a, max_b, sum_b):
    maximum = torch.maximum(max_a, max_b)
    scale = lambda m: torch.where(torch.isneginf(m), 0.0, torch.exp(m - maximum))
    return maximum, sum_a * scale(max_a) + sum_b * scale(max_b)


def softmax_stats(blocks):
    runs = []   # (statistics, how many blocks they cover), the most recent last
    for chunk in blocks:
        top = chunk.amax(dim=-1)
        stats, count = (top, torch.exp(chunk - top.unsqueeze(-1)).sum(dim=-1)), 1
        while runs and runs[-1][1] == count:
            earlier, _ = runs.pop()
            stats, count = merge_stats(*earlier, *stats), 2 * count
        runs.append((stats, count))
    empty = (torch.tensor(float("-inf")), torch.tensor(0.0))
    return functools.reduce(lambda a, b: merge_stats(*a, *b), (stats for stats, _ in runs), empty)


def online_softmax(scores, block):
    maximum, total = softmax_stats(scores.split(block, -1))
    return torch.exp(scores - maximum[..., None]) / total[..., None]
'''
SOFTMAX["stacked"] = '''# style: every block's maximum and sum kept, then merged in one step (as split-K merges its partial results)
def merge_stats(max_a, sum_a, max_b, sum_b):
    maximum = torch.maximum(max_a, max_b)
    weights = torch.stack([max_a, max_b]).sub(maximum).exp().nan_to_num(0.0)
    return maximum, sum_a * weights[0] + sum_b * weights[1]


def softmax_stats(blocks):
    maxima, sums = [], []
    for chunk in blocks:
        maxima.append(chunk.amax(dim=-1))
        sums.append(torch.exp(chunk - maxima[-1].unsqueeze(-1)).sum(dim=-1))
    maxima, sums = torch.stack(maxima, dim=-1), torch.stack(sums, dim=-1)   # (..., number of blocks)
    maximum = maxima.amax(dim=-1)
    return maximum, (sums * torch.exp(maxima - maximum.unsqueeze(-1))).sum(dim=-1)


def online_softmax(scores, block):
    maximum, total = softmax_stats(torch.split(scores, block, dim=-1))
    return torch.exp(scores - maximum.unsqueeze(-1)) / total.unsqueeze(-1)
'''
SOFTMAX["hf"] = SOFTMAX["plain"].replace(
    "# style: the notebook's recurrence, statistics kept with keepdim\ndef merge_stats(max_a, sum_a, max_b, sum_b):",
    '''# style: Hugging Face (type hints; docstrings that name the library's softmax)
from typing import Tuple


def merge_stats(max_a: torch.Tensor, sum_a: torch.Tensor, max_b: torch.Tensor, sum_b: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Merges two parts' softmax statistics, as the fused kernels behind torch.softmax do."""''').replace(
    "def online_softmax(scores, block):", 'def online_softmax(scores: torch.Tensor, block: int) -> torch.Tensor:\n'
                                          '    """Matches torch.nn.functional.softmax(scores, dim=-1), a block at a time."""')
