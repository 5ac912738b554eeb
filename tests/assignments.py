"""The course's assignments, one row each: what their tests need to know of them, kept here and
nowhere else.

``tests/assignment_tests.py`` writes, from a row, the tests every assignment gets (its source is
graded as planned, its release holds no solution, the solution runs and passes every visible
check, the blank release says TODO, the grader gives the solution full marks and the blank
release zero). Each ``tests/test_assignment_<NN>.py`` takes its row, ``ROW =
assignments.BY_NAME["<NN_name>"]``, pulls those tests into its namespace, and adds its own: its
mistakes, its demonstrations. The fixtures of ``tests/conftest.py`` (``source_nb``, ``solved``,
``released_run``) read the module's ``ROW``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

REPO_ROOT = Path(__file__).resolve().parents[1]

LIBRARY_ATTENTION = ("scaled_dot_product_attention", "MultiheadAttention", "multi_head_attention_forward")
"""PyTorch's own attention, by the names an answer would call it: what every exercise computes itself."""


@dataclass(frozen=True)
class Assignment:
    """One assignment: its notebook and its items, and what its common tests expect of it."""

    name: str
    """Its folder under ``source/`` and ``release/``, e.g. ``03_pytorch_attention``."""
    notebook: str
    """The file name of its one notebook."""
    points: Mapping[str, int]
    """Each autograded item (its test cell is ``<item>_test``) -> its points; 10 in all."""
    signatures: tuple[str, ...]
    """Lines the release's code cells keep: what a student needs to see of each answer."""
    skipped: frozenset[str]
    """The ids of the cells tagged ``skip-grading`` (the grader does not run them), exactly."""
    answers: Mapping[str, tuple[str, ...]] | None = None
    """Each answer cell -> the items that grade it, in the order of their test cells right after
    it; by default each item grades its own answer cell, of its name."""
    written: Mapping[str, int] = field(default_factory=dict)
    """Written answers (markdown, graded by hand) -> points."""
    setup_imports: tuple[str, ...] = ()
    """The setup cell's lines that name ``transformer_lm`` or ``matplotlib``, exactly."""
    parts: Mapping[str, int] = field(default_factory=dict)
    """Answers whose skeleton in the release has several ``raise NotImplementedError()`` (one per
    part a student writes) -> how many; every other code answer has one."""
    shared_lines: frozenset[str] = frozenset()
    """Solution lines that the release holds in other cells (a demonstration, another skeleton):
    the only solution lines of three letters or more that may appear anywhere in the release."""
    release_never_holds: tuple[str, ...] = ()
    """Code that the release's code cells never hold: how the solution solves it."""
    library: tuple[str, ...] = LIBRARY_ATTENTION
    """Names no answer cell of the source mentions (the grader would mark the item forbidden)."""
    reference_in_comments: frozenset[str] = frozenset()
    """Cells the grader runs whose comments speak of "the reference" (in every other cell the
    grader runs the word stands for the course's reference, which it never leans on)."""
    cell_timeout: int = 120
    """How long one of its cells may take, in seconds, when the tests execute it."""
    check_says: Mapping[str, str] = field(default_factory=dict)
    """Items whose passing test cell does not print ``Correct`` -> what it prints instead."""
    checks_print: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Items -> what else their test cell prints when it passes in the solution."""
    release_shows: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Cells that need no answer -> what they show in the blank release, which runs them without
    an error."""

    def __post_init__(self):
        if self.answers is None:
            object.__setattr__(self, "answers", {item: (item,) for item in self.points})
        for name in ("points", "answers", "written", "parts", "check_says", "checks_print", "release_shows"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))

    @property
    def source_dir(self) -> Path:
        return REPO_ROOT / "source" / self.name

    @property
    def release_dir(self) -> Path:
        return REPO_ROOT / "release" / self.name

    @property
    def source_path(self) -> Path:
        return self.source_dir / self.notebook

    @property
    def release_path(self) -> Path:
        return self.release_dir / self.notebook

    @property
    def test_ids(self) -> tuple[str, ...]:
        """The grade_ids of the items' test cells."""
        return tuple(f"{item}_test" for item in self.points)

    @property
    def answer_of(self) -> dict[str, str]:
        """Each item -> the answer cell it grades."""
        return {item: answer for answer, items in self.answers.items() for item in items}


ASSIGNMENTS = (
    Assignment(
        "01_attention_basics", "attention_basics.ipynb",
        points={"softmax_stable": 1, "context_vectors": 1, "self_attention_v1": 1, "self_attention_v2": 1,
                "transfer_weights": 1, "causal_attention": 1, "multihead_wrapper": 1, "two_dim_wrapper": 1,
                "multihead_attention": 2},
        signatures=("def softmax_stable(x):", "def context_vectors(inputs):",
                    "class SelfAttention_v1(nn.Module):", "def __init__(self, d_in, d_out):",
                    "def transfer_weights(sa_v2, sa_v1):",
                    "def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):",
                    "def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):",
                    "def two_dim_wrapper(d_in, context_length, dropout=0.0):", "def forward(self, x):"),
        skipped=frozenset({"softmax-bars-plot", "weights-heatmap-plot", "lookup-plot", "predict-rows", "causal-plot",
                           "dropout-plot", "predict-dim", "predict-view", "split-merge-plot", "mha-heads-plot"}),
        parts={"self_attention_v1": 2, "self_attention_v2": 2, "causal_attention": 2, "multihead_wrapper": 2,
               "multihead_attention": 2},
        shared_lines=frozenset({"return exps / exps.sum(dim=-1, keepdim=True)     # (..., n) / (..., 1) -> (..., n)",
                                "with torch.no_grad():"}),
        check_says={"two_dim_wrapper": "two_dim_wrapper: correct"},
        release_shows={"scores-loop": ("tensor([0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865])",),   # x(2)'s scores
                       "context-loop": ("tensor([0.4419, 0.6515, 0.5683])",)}),                      # z(2)
    Assignment(
        "02_multihead_attention", "multihead_attention.ipynb",
        points={"self_attention_init": 1, "self_attention_forward": 3, "mha_scores": 3, "mha_causal_mask": 1,
                "mha_output": 2},
        answers={"self_attention": ("self_attention_init", "self_attention_forward"),
                 "multihead_self_attention": ("mha_scores", "mha_causal_mask", "mha_output")},
        written={"q1": 1, "q2": 1, "q3": 1, "q4": 1, "q5": 1},
        signatures=("class SelfAttention(nn.Module):", "def __init__(self, input_size, hidden):",
                    "class MultiHeadSelfAttention(nn.Module):",
                    "def __init__(self, input_size, hidden, num_heads, causal=False, dropout=0):",
                    "def forward(self, x):", "def forward(self, x, return_attention=False):",
                    "raise ValueError(", "return att, probs"),
        skipped=frozenset({"lookup-picture", "transpose-demo", "predict-kT", "q1-demo", "padding-demo", "dropout-demo",
                           "head-split-picture", "predict-merge", "triu-demo", "causal-picture", "predict-zeros",
                           "demo-plain", "demo-causal"}),
        setup_imports=("import matplotlib.pyplot as plt",
                       "from transformer_lm.sandboxed.test_values import SelfAttentionTestValues, "
                       "MultiHeadAttentionTestValues"),
        parts={"self_attention": 2, "multihead_self_attention": 3},   # tasks 1.1 and 1.2; 2.1, 2.2 and 2.3
        check_says={"self_attention_init": "has the expected layers"},
        checks_print={"mha_output": ("raises ValueError: hidden=10 is not divisible by num_heads=3",)},
        release_shows={"q1-demo": ("raw: max p",), "padding-demo": ("nan",)}),
    Assignment(
        "03_pytorch_attention", "pytorch_attention.ipynb",
        points={"my_attention": 3, "self_attention_head": 2, "multiheaded_self_attention": 3,
                "transformer_decoder_layer": 2},
        signatures=("def my_attention(q, k, v, attn_mask=None):", "class SelfAttentionHead(nn.Module):",
                    "def __init__(self, model_dim, qk_dim=None):", "self.Q = nn.Linear(model_dim, self.qk_dim)",
                    "def forward(self, input, mask=None):", "def __init__(self, model_dim, num_heads):",
                    "def forward(self, input, attn_mask=None):", "def load_from_torch(self, mha):",
                    "def __init__(self, model_dim, num_heads, ff_dim, dropout=0.0, norm_first=False):",
                    "def forward(self, input):", "def load_from_torch(self, layer):"),
        skipped=frozenset({"renormalise", "causal-heatmap", "flip-predict", "is-causal-predict", "is-causal-hint",
                           "mask-conventions-figure", "mha-empty-row-predict", "layer-diagram", "gpt-layer"}),
        parts={"multiheaded_self_attention": 3, "transformer_decoder_layer": 3},
        shared_lines=frozenset({"self.model_dim = model_dim", "with torch.no_grad():", "else:"}),
        checks_print={"my_attention": ("100 random sizes",),
                      "multiheaded_self_attention": ("attn_mask=allowed) equals nn.MultiheadAttention(x, x, x, "
                                                     "attn_mask=~allowed)",)},
        release_shows={"torch-mha": ("in_proj_weight (24, 8)",)}),
    Assignment(
        "04_mingpt", "mingpt.ipynb",
        points={"mingpt_attention": 3, "block": 1, "gpt": 2, "generate": 2, "kv_cache": 2},
        signatures=("class MultiHeadSelfAttention(nn.Module):", "def forward(self, x, kv_cache=None):",
                    "self.register_buffer(\"mask\"", "class Block(nn.Module):",
                    "self.mlp = nn.Sequential(", "class GPT(nn.Module):",
                    "self.pos_emb = nn.Parameter(torch.zeros(1, config.block_size, config.n_embd))",
                    "self.blocks = nn.ModuleList([Block(config) for _ in range(config.n_layer)])",
                    "self.head = nn.Linear(config.n_embd, config.vocab_size, bias=False)",
                    "def forward(self, idx, targets=None, kv_cache=None):",
                    "def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, use_cache=False):",
                    "def sample_next_token(logits, temperature=1.0, top_k=None):",
                    "def generate_tokens(model, idx, max_new_tokens, temperature=1.0, top_k=None):",
                    "def generate_with_cache(model, idx, max_new_tokens, temperature=1.0, top_k=None):"),
        # Training, timing, plots, and everything that needs the trained model; then the figures and
        # the predict-then-run demonstrations (issue 16).
        skipped=frozenset({"verbose-demo", "init-loss", "training", "evaluation", "kv-trained", "kv-speed", "maps",
                           "head-split-figure", "key-bias-demo", "block-diagram", "order-demo", "temperature-demo",
                           "kv-mask-figure", "sdpa-cache-demo"}),
        parts={"generate": 2},
        shared_lines=frozenset({"else:"}),
        release_never_holds=("masked_fill(", "F.softmax(", "F.cross_entropy(", "torch.multinomial(", "torch.topk(",
                             "[{} for _ in model.blocks]"),
        reference_in_comments=frozenset({"block_test", "gpt_test", "generate_test", "kv_cache_test"}),
        cell_timeout=230,   # the training
        checks_print={"mingpt_attention": ("gradient fingerprint: [161, 13, 294, 0, 37187, 432]",),
                      "kv_cache": ("generate_with_cache: the tokens of generation without a cache",)},
        release_shows={"addition-data": ("79+61=041", "target: [-1, -1, -1, -1, -1, 0, 4, 1]"),
                       # the figures and demonstrations that use no answer
                       "head-split-figure": (), "block-diagram": (), "order-demo": (), "temperature-demo": (),
                       "kv-mask-figure": (), "sdpa-cache-demo": ()}),
    Assignment(
        "05_efficient_attention", "efficient_attention.ipynb",
        points={"online_softmax": 2, "flash_forward": 2, "flash_memory": 1, "causal_skipping": 1, "flash_backward": 3,
                "backward_memory": 1},
        answers={"online_softmax": ("online_softmax",),
                 "flash_forward": ("flash_forward", "flash_memory", "causal_skipping"),
                 "flash_backward": ("flash_backward", "backward_memory")},
        written={"q1": 1},
        signatures=("def merge_stats(max_a, sum_a, max_b, sum_b):", "def softmax_stats(blocks):",
                    "def online_softmax(scores, block):",
                    "def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):",
                    "class FlashAttention(torch.autograd.Function):",
                    "def forward(ctx, q, k, v, causal=False, block_q=16, block_k=16):",
                    "def backward(ctx, grad_out):"),
        skipped=frozenset({"naive-attention", "naive-benchmark", "naive-plot", "exp-range", "merge-example",
                           "tile-grid", "rescale-demo", "causal-grid", "causal-count", "saved-for-backward",
                           "final-benchmark", "final-plot"}),
        setup_imports=("import matplotlib.pyplot as plt", "from matplotlib.colors import ListedColormap",
                       "from matplotlib.patches import Patch, Rectangle"),
        parts={"online_softmax": 3, "flash_backward": 3},
        release_never_holds=("torch.maximum(row_max", "ctx.save_for_backward(", "(grad_out * out).sum(")),
    Assignment(
        "06_modern_attention", "modern_attention.ipynb",
        points={"apply_rope": 2, "sliding_window_mask": 1, "grouped_query_attention": 3, "padded_generation": 3,
                "kv_cache_bytes": 1},
        written={"q1": 1, "q2": 1},
        signatures=("def apply_rope(x, positions, base=10000.0):",
                    "def sliding_window_mask(query_len, key_len, window):",
                    "class GroupedQueryAttention(nn.Module):",
                    "def forward(self, x, positions, attn_mask=None, cache=None):",
                    "def padded_positions(attention_mask):", "def padded_attention_mask(attention_mask, query_len):",
                    "def generate_padded(model, prompts, max_new_tokens, pad_id=0):",
                    "def kv_cache_bytes(n_layers, n_kv_heads, head_dim, seq_len, batch=1, dtype=torch.bfloat16):"),
        skipped=frozenset({"rope-2d", "rope-frequencies", "rope-relative", "rope-conventions", "window-figure",
                           "window-cached", "repeat-demo", "empty-rows", "gqa-cache", "gqa-shapes", "padding-layout",
                           "batched-vs-alone", "padding-pieces", "cache-table", "cache-plot"}),
        setup_imports=("import matplotlib.pyplot as plt",
                       "from transformer_lm.sandboxed.decoder import DecoderConfig, TinyDecoder"),
        parts={"padded_generation": 3},
        shared_lines=frozenset({"d = x.shape[-1]", "cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)"}),
        release_never_holds=("repeat_interleave(", "cumsum(")),
)

BY_NAME = {row.name: row for row in ASSIGNMENTS}
