"""The lectures teach on other cases than the graded ones: no function or class that a lecture
defines passes the visible check of a graded item, as it is or through the few lines of adapting a
strong student would write around it. A helper that is an item's answer under another name gives
the item away: the visible check passes an answer the student did not write.

Each lecture's code cells run in this process, in a namespace of their own (quickly: lecture 05
trains its tiny GPT in seconds; the figures go to the Agg backend); every function and class they
define at top level is a candidate. Every group of stored visible checks (:mod:`transformer_lm.checks`)
is an item's check. A candidate stands for one object of a group at a time, the group's other
objects being the reference's (:data:`PARTNERS`), so that a pass means the candidate did that
object's work. A function is tried as it is, with the item's arguments in order or matched by
meaning (:data:`MEANINGS`), through the item's conversions (:data:`CONVERSIONS`: a square band cut
to the last queries, the other mask convention, a size per token times the tokens) and, for RoPE, as
a rotation of 2-D pairs spread over the ``(batch, heads, seq, head_dim)`` layout in each form a
lecture could give it (:data:`ROTATIONS`). A class is tried as it is. The checks run without the
test cells' ``checks.forbidding``: stricter, as a helper that calls library attention passes here.
The trials run in a forked process under a memory cap (a helper called with another item's inputs
can reach for gigabytes), each check within :data:`SECONDS`.

Not tried: ``two_dim_wrapper`` of assignment 01, whose visible check is code in its test cell, and
:data:`UNTRIED`. The harness can fail: the helpers by which lecture 07 once gave away three items of
assignment 06 (RoPE, the sliding window, the KV cache's size), and 2-D rotations of points, pass
through these adapters (:func:`test_the_adapters_turn_given_away_helpers_into_answers`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import io
import math
import signal
import time
import warnings

import matplotlib
import nbformat
import pytest
import torch

import notebook_tools as tools
from transformer_lm import capped_call, checks
from transformer_lm.instructor.reference import decoder, gpt

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LECTURES = sorted((tools.REPO_ROOT / "notebooks").glob("*.ipynb"))
SECONDS = 5
"""The most one candidate's check may take: a helper that runs longer on the checks' small inputs is no answer."""
TRIALS_SECONDS = 600
"""The most one lecture's trials may take together, past which their process is killed."""
MEMORY = 512 * 2**20
"""The bytes the trials may hold beyond the test's: lecture 02's Jacobian of 8000 x 4 logits fails at once."""

PARTNERS = {
    "padded_positions": decoder.left_padded_positions, "padded_attention_mask": decoder.padded_causal_mask,
    "GroupedQueryAttention": decoder.GroupedQueryAttention, "generate_padded": decoder.generate_padded,
    "GPT": gpt.GPT, "sample_next_token": gpt.sample_next_token,
}
"""The reference's objects that stand for an item's other objects while a candidate stands for one."""

UNTRIED = {"transfer_weights": "no reference object stands for its SelfAttention_v1 and SelfAttention_v2"}
CLASS_ROLES = {"cls", "source_cls", "target_cls", "attention"}
"""The arguments of the probes that take a class; the others take a function."""

MEANINGS = [
    {"x", "inputs", "input", "points", "point", "vectors", "vector", "v"}, {"positions", "position", "pos"},
    {"key_len", "seq_len", "T", "T_k", "tokens", "length", "context", "n_tokens", "n"}, {"query_len", "T_q", "queries"},
    {"n_layers", "layers", "L"}, {"n_kv_heads", "kv_heads", "n_kv"}, {"head_dim", "head_size", "d", "d_head"},
    {"batch", "batch_size", "B"}, {"window", "w", "window_size"}, {"attn_mask", "mask", "allowed"},
    {"base", "rope_base"},
]
"""Names of one argument: an item's argument goes to the candidate's parameter with a name of its set."""
BYTE_NAMES = {"bytes_per_number", "bytes", "itemsize", "element_size", "nbytes"}
"""Parameters that take the bytes of a number, which an item gives as a dtype."""


@contextlib.contextmanager
def time_limit(seconds: float):
    """TimeoutError in the candidate after ``seconds``; then SIGALRM's timer as it was (pytest-timeout's)."""
    def expire(signum, frame):
        raise TimeoutError(f"over {seconds} s")
    start, handler = time.monotonic(), signal.signal(signal.SIGALRM, expire)
    delay, interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, handler)
        if delay:
            signal.setitimer(signal.ITIMER_REAL, max(delay - (time.monotonic() - start), 1e-3), interval)


@functools.cache
def definitions(path) -> dict[str, object]:
    """The functions and classes a lecture defines at top level, after running its code cells in order."""
    module = f"lecture_{path.stem}"
    namespace = {"__name__": module}
    with contextlib.chdir(path.parent), contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code":
                exec(compile(cell.source, f"<{path.name}, cell {cell.id}>", "exec"), namespace)
                plt.close("all")
    return {name: value for name, value in namespace.items()
            if (inspect.isfunction(value) or inspect.isclass(value)) and value.__module__ == module}


def slots(group: str) -> dict[str, str]:
    """The objects a group of checks calls, by name: ``"class"`` or ``"function"``."""
    kinds = {}
    for entry in checks.stored_checks()["groups"][group]:
        for role, name in entry["check"].call.objects.items():
            kinds[name] = "class" if role in CLASS_ROLES or kinds.get(name) == "class" else "function"
    return kinds


def passes(group: str, slot: str, objects: dict) -> bool:
    """Whether the group's checks that call ``slot`` pass ``objects`` (name -> object), as ``checks.check`` runs
    them (the others call only the reference's objects, which pass). Whatever a check raises is a failure."""
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings(), time_limit(SECONDS):
        warnings.simplefilter("ignore")
        try:
            for entry in checks.stored_checks()["groups"][group]:
                if slot in entry["check"].call.objects.values():
                    checks.run(entry["name"], entry["check"], objects, entry["context"])
        except Exception:  # noqa: BLE001 - whatever a check raises, it did not pass
            return False
    return True


# Bindings: the item's arguments handed to a candidate
def in_order(candidate):
    """The item's arguments, keywords included, in the item's order, as many as the candidate takes."""
    kinds = [p.kind for p in inspect.signature(candidate).parameters.values()]
    capacity = 99 if inspect.Parameter.VAR_POSITIONAL in kinds else sum(
        kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD) for kind in kinds)
    return lambda *args, **kwargs: candidate(*[*args, *kwargs.values()][:capacity])


def by_meaning(candidate):
    """The item's positional arguments as they are, and each keyword to the candidate's parameter of the
    same meaning (:data:`MEANINGS`); a dtype as the bytes of one number where the candidate wants those."""
    parameters = inspect.signature(candidate).parameters

    def adapted(*args, **kwargs):
        named = {}
        for name, value in kwargs.items():
            same = next((meaning for meaning in MEANINGS if name in meaning), {name})
            named.update({p: value for p in parameters if p in same})
            if isinstance(value, torch.dtype):
                named.update({p: value.itemsize for p in parameters if p in BYTE_NAMES})
        if not args and not named:
            raise TypeError("no argument of the item means anything to this function")
        return candidate(*args, **named)
    return adapted


BINDINGS = {"as it is": lambda candidate: candidate, "in order": in_order, "by meaning": by_meaning}


# Conversions: an item's arguments or result brought to the candidate's case
def square_band(bound):
    """A mask computed for every key as a query (``(key_len, key_len)``), cut to the last ``query_len``
    rows: the item's queries are the last of the keys."""
    def adapted(query_len, key_len, window):
        return bound(query_len=key_len, key_len=key_len, window=window)[..., key_len - query_len:, :]
    return adapted


def other_convention(bound):
    """Boolean masks in the other convention (True = hidden), in and out."""
    def flip(value):
        return ~value if isinstance(value, torch.Tensor) and value.dtype == torch.bool else value

    def adapted(*args, **kwargs):
        return flip(bound(*map(flip, args), **{name: flip(value) for name, value in kwargs.items()}))
    return adapted


def additive_to_boolean(bound):
    """A float mask (0 where a query may look, -inf where not) as booleans."""
    return lambda *args, **kwargs: bound(*args, **kwargs) == 0


def times_tokens(bound):
    """A size for one token of one sequence, times the tokens and the sequences."""
    return lambda **kwargs: bound(**kwargs) * kwargs["seq_len"] * kwargs.get("batch", 1)


def one_input_thrice(bound):
    """Attention of a sequence with itself from a function of (queries, keys, values)."""
    return lambda x: bound(x, x, x)


def then(first, second):
    """The conversion ``second`` around the conversion ``first``."""
    def converted(bound):
        return second(first(bound))
    converted.__name__ = f"{first.__name__} and {second.__name__}"
    return converted


CONVERSIONS = {
    "sliding_window_mask": [square_band, other_convention, additive_to_boolean, then(other_convention, square_band),
                            then(additive_to_boolean, square_band)],
    "padded_attention_mask": [other_convention, additive_to_boolean],
    "my_attention": [other_convention],
    "kv_cache_bytes": [times_tokens],
    "context_vectors": [one_input_thrice],
}
"""For an item's object, the conversions a student would write around a helper of the lecture's case."""


# Rotations: apply_rope from a rotation of 2-D pairs
def rope_angles(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """The angle of each pair at each position, in float64: ``(T, d/2)``, or ``(B, 1, T, d/2)`` for one
    row of positions per sequence. The assignment's text gives this step; the rotation is the helper's."""
    d = x.shape[-1]
    angles = positions.to(torch.float64).unsqueeze(-1) * base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    return angles.unsqueeze(-3) if positions.dim() == 2 else angles


def as_pairs(x: torch.Tensor) -> torch.Tensor:
    """``(..., d)`` -> ``(..., d/2, 2)``: pair i is the features i and i + d/2 (the half-split convention)."""
    return torch.stack(x.chunk(2, dim=-1), dim=-1)


def from_pairs(pairs: torch.Tensor) -> torch.Tensor:
    """``(..., d/2, 2)`` -> ``(..., d)``, the inverse of :func:`as_pairs`."""
    return torch.cat(pairs.unbind(-1), dim=-1)


def flat_pairs(x, angles):
    """Every pair as a row of points ``(N, 2)``, with its angle, ``(N,)``."""
    pairs = as_pairs(x)
    return pairs.reshape(-1, 2), angles.expand(pairs.shape[:-1]).reshape(-1)


def rotate_point_by_point(f, x, angles):
    """``f(point, angle)`` on one ``(2,)`` point and a float at a time."""
    points, flat = flat_pairs(x, angles)
    turned = [f(point, angle) for point, angle in zip(points, flat.tolist())]
    turned = torch.stack([torch.stack([torch.as_tensor(c) for c in t]) if isinstance(t, (tuple, list))
                          else torch.as_tensor(t) for t in turned])
    return from_pairs(turned.reshape(as_pairs(x).shape))


ROTATIONS = {
    "on the halves of (B, H, T, d)": lambda f, x, angles: f(x, angles),
    "on the interleaved layout, features reordered":
        lambda f, x, angles: from_pairs(f(as_pairs(x).flatten(-2), angles).unflatten(-1, (-1, 2))),
    "on the pairs as (..., d/2, 2) points": lambda f, x, angles: from_pairs(f(as_pairs(x), angles.expand(
        as_pairs(x).shape[:-1]))),
    "on the pairs as (N, 2) points": lambda f, x, angles: from_pairs(f(*flat_pairs(x, angles)).reshape(
        as_pairs(x).shape)),
    "point by point": rotate_point_by_point,
    "on the pairs as complex numbers": lambda f, x, angles: from_pairs(torch.view_as_real(f(
        torch.view_as_complex(as_pairs(x).contiguous()), angles))),
    "as (..., 2, 2) rotation matrices": lambda f, x, angles: from_pairs(
        (f(angles).to(x.dtype) @ as_pairs(x).unsqueeze(-1)).squeeze(-1)),
}
"""The ways a student spreads a rotation of 2-D pairs, ``f``, over ``x`` ``(B, H, T, d)`` at ``angles``."""


def as_rope(spread, f):
    """``apply_rope(x, positions, base)`` from the rotation ``f``, spread over x by ``spread``."""
    def apply_rope(x, positions, base=10000.0):
        return spread(f, x, rope_angles(x, positions, base)).to(x.dtype)
    return apply_rope


# The items, the candidates, and the tests
def items() -> list[tuple[str, str, str]]:
    """(group, object, "class" or "function") for every object of every group of visible checks tried."""
    return [(group, name, kind) for group in checks.stored_checks()["groups"] if group not in UNTRIED
            for name, kind in slots(group).items()]


def candidates(objects: dict, slot: str, kind: str):
    """(how, object): every way a lecture's objects are tried as the item's object ``slot``."""
    for name, value in objects.items():
        if kind == "class" or not inspect.isfunction(value):
            if kind == "class" and inspect.isclass(value):
                yield name, value
            continue
        for binding, bind in BINDINGS.items():
            yield f"{name} {binding}", bind(value)
            for conversion in CONVERSIONS.get(slot, []):
                yield f"{name} {binding}, {conversion.__name__}", conversion(bind(value))
        if slot == "apply_rope":
            for rotation, spread in ROTATIONS.items():
                yield f"{name} {rotation}", as_rope(spread, value)


def partners(group: str, slot: str) -> dict:
    """The group's other objects, the reference's."""
    return {name: PARTNERS[name] for name in slots(group) if name != slot}


def in_a_capped_process(function):
    """``function()`` in a forked process that may hold :data:`MEMORY` bytes more, on one thread
    (:func:`transformer_lm.capped_call.call_capped`; where no cap can be set, here): what it returned."""
    try:
        return capped_call.call_capped(function, MEMORY, seconds=TRIALS_SECONDS)
    except capped_call.CapUnavailable:
        return function()


def passing(objects: dict) -> list[str]:
    """What passes a visible check, said as "<how> passes <group> as <object>"."""
    return [f"{how} passes {group} as {slot}" for group, slot, kind in items()
            for how, candidate in candidates(objects, slot, kind)
            if passes(group, slot, {**partners(group, slot), slot: candidate})]


def test_every_group_is_tried_or_says_why():
    """A new group whose other objects have no reference stand-in must say how it is tried."""
    for group in checks.stored_checks()["groups"]:
        if group not in UNTRIED and len(slots(group)) > 1:
            assert set(slots(group)) <= set(PARTNERS), f"{group}: {set(slots(group)) - set(PARTNERS)}"


@pytest.mark.parametrize("path", LECTURES, ids=lambda p: p.stem)
def test_no_lecture_definition_passes_a_visible_check(path):
    objects = definitions(path)
    found = in_a_capped_process(functools.partial(passing, objects))
    assert not found, f"{path.name} gives items away ({len(objects)} definitions tried):\n" + "\n".join(found)


# Lecture 07's old helpers, which gave away three items, and two 2-D rotations a lecture must not define.

def rotate_pairs(x, angles):
    a, b = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat([a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()], dim=-1)


def rotate_interleaved(x, angles):
    pairs = torch.view_as_complex(x.to(torch.float64).reshape(*x.shape[:-1], x.shape[-1] // 2, 2))
    return torch.view_as_real(pairs * torch.polar(torch.ones_like(angles), angles)).flatten(-2).to(x.dtype)


def window_band(T, window):
    i, j = torch.arange(T).view(T, 1), torch.arange(T).view(1, T)
    return (j <= i) & (i - j < window)


def cache_per_token(kv_heads, layers=32, head_size=128, bytes_per_number=2):
    return 2 * layers * kv_heads * head_size * bytes_per_number


def turn_points(points, angles):
    c, s = angles.cos(), angles.sin()
    return torch.stack([c * points[:, 0] - s * points[:, 1], s * points[:, 0] + c * points[:, 1]], dim=-1)


def turn_point(v, angle):
    c, s = math.cos(angle), math.sin(angle)
    return torch.stack([c * v[0] - s * v[1], s * v[0] + c * v[1]])


def test_the_adapters_turn_given_away_helpers_into_answers():
    """The adapters are strong enough to find an answer under another name, so that the test above
    can fail: lecture 07's old helpers pass RoPE (both conventions), the window and the cache's size,
    and so do 2-D rotations of points, spread over the layout."""
    given_away = (rotate_pairs, rotate_interleaved, window_band, cache_per_token, turn_points, turn_point)
    found = in_a_capped_process(functools.partial(passing, {f.__name__: f for f in given_away}))
    solved = {line.split(" ")[0] + " -> " + line.split(" passes ")[1].split(" as ")[0] for line in found}
    assert solved == {"rotate_pairs -> apply_rope", "rotate_interleaved -> apply_rope", "turn_points -> apply_rope",
                      "turn_point -> apply_rope", "window_band -> sliding_window_mask",
                      "cache_per_token -> kv_cache_bytes"}, found


def test_the_reference_passes_the_groups_it_stands_in():
    """The reference's objects that stand in for an item's other objects pass that item's checks, so a
    candidate's failure there is its own."""
    for group in checks.stored_checks()["groups"]:
        if len(slots(group)) > 1 and group not in UNTRIED:
            for slot in slots(group):
                assert passes(group, slot, {name: PARTNERS[name] for name in slots(group)}), (group, slot)
