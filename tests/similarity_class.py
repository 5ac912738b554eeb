"""A class of assignment 01 for the similarity report, built from the release with answer cells
written out in full, as students write them (nothing is graded or run).

In ``causal_attention``:

* ann, ben and cat share one answer: ben renamed its variables, moved independent statements
  around in both methods and changed its comments; cat renamed them otherwise, put the statements
  in a third order and built the mask in one line;
* rex handed in the course's solution with the variables renamed and other comments, and the
  student whose id is markup copied rex's;
* kim (einsum), lee (loops) and max (torch.matmul, a tril mask) wrote their own, in three styles;
* bo and bea left the release as it is (the starter code that everyone shares);
* zed's notebook is cut off; yan left the release as it is, with every cell's metadata a list, not
  a dict (the notebook is repaired as it is read, and compared).

In ``softmax_stable``, a short item, every one of them writes a correct softmax of a few lines,
some alike, one as a textbook writes it.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat

import notebook_tools as tools
from autograder.commands.demo import ASSIGNMENT as A, NOTEBOOK as NB, make_course

HOSTILE = "=<img src=x onerror=alert(1)>&amp;\"'"  # a folder name: a student id is whatever the folder says

HEAD = '''class CausalAttention(nn.Module):
    """Single-head causal self-attention of a batch, with dropout on the attention weights.

    Members: W_query, W_key, W_value (nn.Linear(d_in, d_out, bias=qkv_bias), in this order),
    dropout (nn.Dropout(dropout)) and the buffer mask, (context_length, context_length),
    which marks each query's future keys.
    """

    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
'''
FORWARD = '''
    def forward(self, x):
        """x: (b, num_tokens, d_in) -> context vectors (b, num_tokens, d_out).

        queries, keys, values: (b, num_tokens, d_out); scores and weights: (b, num_tokens, num_tokens),
        one row per query, softmax over the last dimension (the keys).
        """
'''
PROJECTIONS = '''        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
'''

ANN = HEAD + PROJECTIONS + '''        self.dropout = nn.Dropout(dropout)
        self.scale = 1.0 / math.sqrt(d_out)
        blocked = torch.ones(context_length, context_length, dtype=torch.bool).triu(diagonal=1)
        self.register_buffer("mask", blocked)
''' + FORWARD + '''        n_tok = x.shape[1]
        q = self.W_query(x) * self.scale          # scale the queries once
        k = self.W_key(x)
        v = self.W_value(x)
        att = torch.bmm(q, k.transpose(1, 2))     # (b, T, T)
        att.masked_fill_(self.mask[:n_tok, :n_tok], -1e9)
        att = att - att.max(dim=-1, keepdim=True).values
        att = att.exp()
        att = att / att.sum(dim=-1, keepdim=True)
        return torch.bmm(self.dropout(att), v)
'''
BEN = HEAD + PROJECTIONS + '''        hidden = torch.ones(context_length, context_length, dtype=torch.bool).triu(diagonal=1)
        self.register_buffer("mask", hidden)
        self.factor = 1.0 / math.sqrt(d_out)
        self.dropout = nn.Dropout(dropout)
''' + FORWARD + '''        values = self.W_value(x)
        keys = self.W_key(x)
        length = x.shape[1]
        queries = self.W_query(x) * self.factor
        # attention scores
        w = torch.bmm(queries, keys.transpose(1, 2))
        w.masked_fill_(self.mask[:length, :length], -1e9)   # hide the future
        w = w - w.max(dim=-1, keepdim=True).values   # stable softmax
        w = w.exp()
        w = w / w.sum(dim=-1, keepdim=True)
        return torch.bmm(self.dropout(w), values)
'''
CAT = HEAD + PROJECTIONS + '''        self.mult = 1.0 / math.sqrt(d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.ones(context_length, context_length, dtype=torch.bool).triu(diagonal=1))
''' + FORWARD + '''        K = self.W_key(x)
        Q = self.W_query(x) * self.mult
        V = self.W_value(x)
        T = x.shape[1]
        A = torch.bmm(Q, K.transpose(1, 2))
        A.masked_fill_(self.mask[:T, :T], -1e9)
        A = A - A.max(dim=-1, keepdim=True).values
        A = A.exp()
        A = A / A.sum(dim=-1, keepdim=True)
        return torch.bmm(self.dropout(A), V)
'''
REX = HEAD + '''        self.d_out = d_out
''' + PROJECTIONS + '''        self.dropout = nn.Dropout(dropout)
        upper = torch.triu(torch.ones(context_length, context_length), diagonal=1).bool()  # mask the future
        self.register_buffer("mask", upper)
''' + FORWARD + '''        batch, n, width = x.shape
        qs = self.W_query(x)
        ks = self.W_key(x)
        vs = self.W_value(x)
        att = qs @ ks.transpose(1, 2)
        hide = self.mask[:n, :n]
        att = att.masked_fill(hide, float("-inf"))
        probs = torch.softmax(att / ks.shape[-1] ** 0.5, dim=-1)
        probs = self.dropout(probs)
        return probs @ vs
'''
# rex's answer as another student copied it, with a comment that is markup.
COPY_OF_REX = REX.replace("        return probs @ vs\n", "        return probs @ vs   # </pre><script>alert(1)</script>\n")
KIM = HEAD + PROJECTIONS + '''        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", ~torch.tril(torch.ones(context_length, context_length, dtype=torch.bool)))
''' + FORWARD + '''        t = x.size(1)
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        logits = torch.einsum("bqd,bkd->bqk", q, k) * k.size(-1) ** -0.5
        logits = logits.masked_fill(self.mask[:t, :t], -torch.inf)
        return torch.einsum("bqk,bkd->bqd", self.dropout(logits.softmax(dim=-1)), v)
'''
LEE = HEAD + PROJECTIONS + '''        self.dropout = nn.Dropout(dropout)
        mask = torch.zeros(context_length, context_length, dtype=torch.bool)
        for i in range(context_length):
            mask[i, i + 1:] = True
        self.register_buffer("mask", mask)
''' + FORWARD + '''        outputs = []
        for seq in x:
            queries = self.W_query(seq)
            keys = self.W_key(seq)
            values = self.W_value(seq)
            rows = []
            for i in range(len(seq)):
                scores = []
                for j in range(len(seq)):
                    if self.mask[i, j]:
                        scores.append(torch.tensor(float("-inf")))
                    else:
                        scores.append(torch.dot(queries[i], keys[j]) / math.sqrt(keys.shape[1]))
                weights = self.dropout(torch.softmax(torch.stack(scores), dim=0))
                rows.append(weights @ values)
            outputs.append(torch.stack(rows))
        return torch.stack(outputs)
'''
MAX = HEAD + PROJECTIONS + '''        self.dropout = nn.Dropout(dropout)
        self.register_buffer('mask', torch.tril(torch.ones(context_length, context_length)) == 0)
''' + FORWARD + '''        query = self.W_query(x)
        key = self.W_key(x)
        value = self.W_value(x)
        tokens = x.shape[-2]
        energy = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(key.shape[-1])
        energy = energy.masked_fill(self.mask[:tokens, :tokens], float('-inf'))
        attention = self.dropout(F.softmax(energy, dim=-1))
        return torch.matmul(attention, value)
'''
CAUSAL = {"ann": ANN, "ben": BEN, "cat": CAT, "rex": REX, HOSTILE: COPY_OF_REX, "kim": KIM, "lee": LEE, "max": MAX}
GROUP = ["ann", "ben", "cat"]
INDEPENDENT = ["kim", "lee", "max"]
BLANK = ["bo", "bea"]

SOFTMAX_HEAD = '''def softmax_stable(x):
    """Softmax over the last dimension of x, safe for large scores.

    x: (..., n). Returns a tensor of the same shape whose entries are positive and sum to 1
    along the last dimension.
    """
'''
SOFTMAX = {
    "ann": SOFTMAX_HEAD + "    m = x.max(dim=-1, keepdim=True).values\n    e = torch.exp(x - m)\n"
                          "    return e / e.sum(dim=-1, keepdim=True)\n",
    "ben": SOFTMAX_HEAD + "    top = x.max(dim=-1, keepdim=True).values\n    ex = torch.exp(x - top)\n"
                          "    return ex / ex.sum(dim=-1, keepdim=True)\n",
    "cat": SOFTMAX_HEAD + "    big = x.max(dim=-1, keepdim=True).values\n    num = torch.exp(x - big)\n"
                          "    return num / num.sum(dim=-1, keepdim=True)\n",
    "rex": SOFTMAX_HEAD + "    s = x - x.amax(dim=-1, keepdim=True)\n    p = torch.exp(s)\n"
                          "    return p / p.sum(dim=-1, keepdim=True)\n",
    HOSTILE: SOFTMAX_HEAD + "    s = x - x.amax(dim=-1, keepdim=True)\n    p = torch.exp(s)\n"
                            "    return p / p.sum(dim=-1, keepdim=True)\n",
    "kim": SOFTMAX_HEAD + "    return torch.exp(x - torch.logsumexp(x, dim=-1, keepdim=True))\n",
    "lee": SOFTMAX_HEAD + "    shifted = x - x.amax(-1, keepdim=True)\n"
                          "    return shifted.exp() / shifted.exp().sum(-1, keepdim=True)\n",
    "max": SOFTMAX_HEAD + "    z = x - torch.max(x, dim=-1, keepdim=True)[0]\n    num = torch.exp(z)\n"
                          "    return num / torch.sum(num, dim=-1, keepdim=True)\n",
}


UNPARSABLE = "xia"
"""A student whose answers are one expression deeper than Python's parser goes."""


def deep_expression(terms: int) -> str:
    return "x = " + "+".join(["1"] * terms) + "\n"


def write_class(root: Path) -> None:
    """A course folder of assignment 01 in ``root`` (config, source, hidden checks, public code,
    release) with the class's submissions."""
    make_course(root, A, generate=False)
    release = tools.read(root / "release" / A / NB)
    notebooks = {student: tools.replace_solutions(release, {"causal_attention": CAUSAL[student],
                                                            "softmax_stable": SOFTMAX[student]})
                 for student in CAUSAL}
    notebooks.update({student: release for student in BLANK})
    # answers Python's parser refuses: one too long to compare, one compared as written
    notebooks[UNPARSABLE] = tools.replace_solutions(release, {"causal_attention": deep_expression(200_000),
                                                              "softmax_stable": deep_expression(20_000)})
    for student, notebook in notebooks.items():
        folder = root / "submitted" / student / A
        folder.mkdir(parents=True)
        nbformat.write(notebook, folder / NB)
    damaged = json.loads(nbformat.writes(release))
    for damaged_cell in damaged["cells"]:
        damaged_cell["metadata"] = ["not", "a", "dict"]
    for student, text in {"zed": nbformat.writes(notebooks["ann"])[:5000], "yan": json.dumps(damaged)}.items():
        folder = root / "submitted" / student / A
        folder.mkdir(parents=True)
        (folder / NB).write_text(text)
