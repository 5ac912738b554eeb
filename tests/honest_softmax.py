"""Correct answers to assignment 05, written anew in the styles of public code: the answer cell of
``merge_stats`` and ``online_softmax``.
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


def online_softmax(scores, block):
    m = torch.full(scores.shape[:-1], float("-inf"), dtype=scores.dtype)
    l = torch.zeros(scores.shape[:-1], dtype=scores.dtype)
    for s in range(0, scores.shape[-1], block):
        chunk = scores[..., s:s + block]
        chunk_max = chunk.max(dim=-1, keepdim=True).values
        m, l = merge_stats(m, l, chunk_max.squeeze(-1), torch.exp(chunk - chunk_max).sum(dim=-1))
    return torch.exp(scores - m[..., None]) / l[..., None]
''',
    "nan_to_num": '''# style: lucidrains (chunks by .split, nan_to_num where an empty part gives nan)
def merge_stats(max_a, sum_a, max_b, sum_b):
    new_max = torch.maximum(max_a, max_b)
    return new_max, (sum_a * torch.exp(max_a - new_max)).nan_to_num(0.0) + (sum_b * torch.exp(max_b - new_max)).nan_to_num(0.0)


def online_softmax(scores, block):
    row_max, row_sum = scores.new_full(scores.shape[:-1], float("-inf")), scores.new_zeros(scores.shape[:-1])
    for chunk in scores.split(block, dim=-1):
        chunk_max = chunk.amax(dim=-1)
        row_max, row_sum = merge_stats(row_max, row_sum, chunk_max, (chunk - chunk_max[..., None]).exp().sum(dim=-1))
    return (scores - row_max[..., None]).exp() / row_sum[..., None]
''',
    "fairseq": '''# style: old fairseq (.new() constructors, .float() on float32, .type_as)
def merge_stats(max_a, sum_a, max_b, sum_b):
    maximum = torch.max(max_a, max_b)
    empty_a, empty_b = torch.isinf(max_a) & (max_a < 0), torch.isinf(max_b) & (max_b < 0)
    factor_a = torch.exp(max_a.masked_fill(empty_a, 0) - maximum.masked_fill(empty_a, 0)).masked_fill(empty_a, 0)
    factor_b = torch.exp(max_b.masked_fill(empty_b, 0) - maximum.masked_fill(empty_b, 0)).masked_fill(empty_b, 0)
    return maximum, (sum_a.float() * factor_a + sum_b.float() * factor_b).type_as(sum_a)


def online_softmax(scores, block):
    x = scores.float()
    maximum = x.new(x.size()[:-1]).fill_(float("-inf"))
    total = x.new(x.size()[:-1]).zero_()
    for start in range(0, x.size(-1), block):
        part = x[..., start:start + block]
        part_max = part.max(dim=-1)[0]
        maximum, total = merge_stats(maximum, total, part_max, torch.exp(part - part_max.unsqueeze(-1)).sum(dim=-1))
    return (torch.exp(x - maximum.unsqueeze(-1)) / total.unsqueeze(-1)).type_as(scores)
''',
    "float64": '''# style: float64 statistics (merged in double, returned in the input's dtype)
def merge_stats(max_a, sum_a, max_b, sum_b):
    a, b = max_a.double(), max_b.double()
    top = torch.maximum(a, b)
    safe = torch.where(torch.isinf(top), torch.zeros_like(top), top)
    total = sum_a.double() * torch.exp(a - safe) + sum_b.double() * torch.exp(b - safe)
    return top.to(max_a.dtype), total.to(sum_a.dtype)


def online_softmax(scores, block):
    x = scores.double()
    top, total = x.new_full(x.shape[:-1], float("-inf")), x.new_zeros(x.shape[:-1])
    start = 0
    while start < x.shape[-1]:
        part = x[..., start:start + block]
        part_top = part.amax(dim=-1)
        top, total = merge_stats(top, total, part_top, torch.exp(part - part_top.unsqueeze(-1)).sum(dim=-1))
        start += block
    return (torch.exp(x - top.unsqueeze(-1)) / total.unsqueeze(-1)).to(scores.dtype)
''',
    "log_domain": '''# style: log-domain merge (each part's sum kept as a logarithm, logaddexp to combine)
def merge_stats(max_a, sum_a, max_b, sum_b):
    maximum = torch.maximum(max_a, max_b)
    log_total = torch.logaddexp(max_a + torch.log(sum_a), max_b + torch.log(sum_b))
    both_empty = torch.isneginf(maximum)
    return maximum, torch.where(both_empty, torch.zeros_like(sum_a), torch.exp(log_total - maximum.masked_fill(both_empty, 0.0)))


def online_softmax(scores, block):
    stats = (torch.full_like(scores[..., 0], float("-inf")), torch.zeros_like(scores[..., 0]))
    for part in torch.split(scores, block, dim=-1):
        part_max = part.amax(dim=-1)
        stats = merge_stats(*stats, part_max, torch.exp(part - part_max.unsqueeze(-1)).sum(dim=-1))
    return torch.exp(scores - stats[0].unsqueeze(-1)) / stats[1].unsqueeze(-1)
''',
}
SOFTMAX["hf"] = SOFTMAX["plain"].replace(
    "# style: the notebook's recurrence, statistics kept with keepdim\ndef merge_stats(max_a, sum_a, max_b, sum_b):",
    '''# style: Hugging Face (type hints; docstrings that name the library's softmax)
from typing import Tuple


def merge_stats(max_a: torch.Tensor, sum_a: torch.Tensor, max_b: torch.Tensor, sum_b: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Merges two parts' softmax statistics, as the fused kernels behind torch.softmax do."""''').replace(
    "def online_softmax(scores, block):", 'def online_softmax(scores: torch.Tensor, block: int) -> torch.Tensor:\n'
                                          '    """Matches torch.nn.functional.softmax(scores, dim=-1), a block at a time."""')
