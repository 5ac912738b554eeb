"""The checks behind the notebooks' visible test cells, judged on stored values.

Each test cell names a group of checks (``check("self_attention_v1", SelfAttention_v1)``). The
instructor prepared every check of the group from a fixed seed with the reference, and stored the
inputs, what the reference gave and what each catalogued mistake gives on them
(``python -m transformer_lm.instructor.make_test_values``, :mod:`transformer_lm.stored`). Here, in the
student's kernel, each check calls the student's object through its probe and judges the result
with the same judge the grader uses on hidden inputs (:mod:`transformer_lm.judging`), against the
stored values alone: no reference is needed, and none is shipped. Only here, a failure shows
expected values; it names the likely mistake as the grader does, from what each catalogued
mistake gives on the same stored inputs. A group raises :class:`CheckFailed` with a message
written for the student that says how many of its cases pass, or prints what passed once every
case has; every line it shows fits :data:`~transformer_lm.verdict_texts.WIDTH`.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import torch

from transformer_lm import capped_call, catalog, stored
from transformer_lm.forbidding import LIBRARY_ATTENTION, SOFTMAX, forbidding  # noqa: F401 - for the test cells
from transformer_lm.judging import ATOL, RTOL, CheckFailed, Verdict, difference
from transformer_lm.prepared import Prepared
from transformer_lm.random_weights import randomize  # noqa: F401 - for the test cells
from transformer_lm.sandboxed.student_objects import ProbeError, builtin_exception
from transformer_lm.style import check_style  # noqa: F401 - for the test cells
from transformer_lm.verdict_texts import fit, render

TEXTS = {
    "fingerprint_passed": "Gradient fingerprint {expected:numbers}: correct.",
    "fingerprint": "Gradient fingerprint {got:numbers}, expected {expected:numbers}.",
    "values_right": " The value gradients are right, so the weights reach the values correctly; look at the mask "
                    "fill value (-inf) and the softmax.",
}
"""What the fingerprint check of assignment 04 says (:mod:`transformer_lm.verdict_texts`)."""

STORED = Path(__file__).parent / "data" / "visible_checks.safetensors"
"""The stored visible checks, made by ``python -m transformer_lm.instructor.make_test_values``."""


@functools.cache
def stored_checks() -> dict:
    """The stored groups of checks and the minGPT exercise's fingerprints, read once."""
    if not STORED.exists():
        raise CheckFailed(f"The course's stored check values are missing ({STORED}). Install the course's package "
                          "again; an instructor makes them with: python -m transformer_lm.instructor.make_test_values")
    return stored.load(STORED)


def check_shape(got: torch.Tensor, expected_shape, name: str = "output", mistakes: dict | None = None) -> None:
    """Raises :class:`CheckFailed` unless ``got`` has ``expected_shape``. ``mistakes`` maps a shape
    that a catalogued mistake gives to that mistake's name: a test cell's own check names it, as a
    group's checks name theirs."""
    if not isinstance(got, torch.Tensor):
        raise CheckFailed(f"{name} should be a torch.Tensor, got {type(got).__name__}.")
    if tuple(got.shape) != tuple(expected_shape):
        refuse(f"{name} has shape {tuple(got.shape)}, expected {tuple(expected_shape)}.",
               (mistakes or {}).get(tuple(got.shape), ""))


def refuse(message: str, mistake: str = "") -> None:
    """Raises :class:`CheckFailed` with ``message`` and, where given, the catalogued mistake of that
    name, its title and hint, as a failing check of a group does (for a test cell's own checks)."""
    Verdict("failed", message, catalog.BY_NAME[mistake] if mistake else None).raise_if_failed()


def check_close(got: torch.Tensor, expected: torch.Tensor, name: str = "output",
                rtol: float = RTOL, atol: float = ATOL) -> None:
    """Raises :class:`CheckFailed` with expected, got and the largest error unless they match."""
    check_shape(got, expected.shape, name)
    problem = difference(name, got, expected, rtol, atol)
    if problem:
        raise CheckFailed(problem)


def call_student(name: str, function, *args, **kwargs):
    """Calls student code (through a probe) in this kernel, turning whatever goes wrong into
    a :class:`CheckFailed` that says what to do. The original error stays chained, so the
    traceback still shows the line of the answer that raised it."""
    try:
        return function(*args, **kwargs)
    except NotImplementedError:
        raise CheckFailed(f"TODO: {name} is not written yet (it raises NotImplementedError). "
                          "Fill in the cell marked YOUR CODE HERE above, run it, then run this check again.") from None
    except ProbeError as error:
        raise CheckFailed(f"{name}: {error}") from None
    except Exception as error:  # noqa: BLE001 - any error of the answer is reported to the student
        raise CheckFailed(f"{name} raised {type(error).__name__}: {error}") from error


def call_prepared(name: str, prepared: Prepared, objects: dict):
    """The prepared probe's result on ``objects``: called in this kernel, or for a check with a
    ``memory_cap`` in a process of its own under that cap, as the grader calls it
    (:mod:`transformer_lm.capped_call`, which raises ``CapUnavailable`` off Linux)."""
    if not prepared.memory_cap:
        return call_student(name, prepared.call.run_here, objects)
    try:
        return capped_call.call_capped(functools.partial(call_student, name, prepared.call.run_here, objects),
                                       prepared.memory_cap)
    except capped_call.CappedCallRaised as raised:
        if str(raised.error).startswith("TODO:"):
            raise CheckFailed(str(raised.error)) from None
        raise CheckFailed(f"{prepared.on_error}\n{raised}") from None
    except capped_call.CappedCallFailed as failed:
        raise CheckFailed(f"{prepared.on_error}\n{failed}") from None


def run(name: str, prepared: Prepared, objects: dict, context: str = "") -> Verdict | None:
    """Calls the prepared probe on ``objects`` (name -> the student's object) and judges it,
    showing values: the verdict of a pass, which it leaves to :func:`check` to print, or a
    :class:`CheckFailed` whose message starts with ``context`` (what was called). None for a
    capped check on a machine that cannot cap a call, and for a call that refused the non-finite
    inputs a check fed it on purpose (``prepared.refused``): each says so."""
    try:
        result = call_prepared(name, prepared, objects)
    except capped_call.CapUnavailable as unavailable:
        print(fit(f"{name}: not checked under the memory cap here, since {unavailable}; the grader checks it."))
        return None
    except CheckFailed as failed:   # an error of the answer: said with what was called, as a wrong value is
        if prepared.refused and isinstance(failed.__cause__, ValueError):
            print(fit(f"{name}: {prepared.refused}"))
            return None
        mistake = prepared.raised.get(builtin_exception(failed.__cause__)) if failed.__cause__ else None
        if not (context or mistake) or str(failed).startswith("TODO:"):
            raise
        said = Verdict("failed", f"{context}:\n{failed}" if context else str(failed), mistake)
        raise said.refusal() from failed.__cause__
    verdict = prepared.judge_result(result, values=True)
    if context and not verdict.passed:
        verdict.message = f"{context}:\n{verdict.message}"
    verdict.raise_if_failed()
    return verdict


def check(group: str, *answers, **named) -> Verdict | None:
    """Runs every stored check of ``group`` (its cases) on the student's ``answers`` (functions
    and classes, known by their names, or given by name in ``named``), in order. A TODO stops it
    at once; otherwise every case runs, so that a failure can say how many cases pass, and the
    cases' own words of a pass ("Correct: ...") are printed only once all of them passed. A case
    that only explains (``"explains"``, as the grader's ``Explains``) runs only once another has
    failed, and then only names the mistake (:func:`_explained`). Returns the last case's verdict."""
    groups = stored_checks()["groups"]
    if group not in groups:
        raise CheckFailed(f"There is no visible check called {group!r}; the course has: {', '.join(groups)}.")
    objects = {**{answer.__name__: answer for answer in answers}, **named}
    entries = [entry for entry in groups[group] if not entry.get("explains")]
    passed, failures = [], []
    for number, entry in enumerate(entries, 1):
        try:
            verdict = run(entry["name"], entry["check"], objects, entry["context"])
        except CheckFailed as failure:
            if str(failure).startswith("TODO:"):
                raise
            failures.append((number, failure))
            continue
        if verdict is not None:
            passed.append((entry["name"], verdict))
    name, total = entries[0]["name"], len(entries)
    if failures:
        number, shown = next(((n, f) for n, f in failures if f.mistake), failures[0])   # a named mistake first
        shown = _explained(shown, [entry for entry in groups[group] if entry.get("explains")], objects)
        if total == 1:
            raise shown
        raise CheckFailed(f"{name}: {len(passed)} of {total} cases pass; {_failing(failures, number)}\n{shown}",
                          shown.mistake) from shown.__cause__
    _say_passed(name, total, passed)
    return passed[-1][1] if passed else None


def _explained(failure: CheckFailed, explaining: list[dict], objects: dict) -> CheckFailed:
    """``failure``, followed by what the first of the ``explaining`` cases that fails says, and
    naming its mistake (a trace that names a whole-row pass where the memory cap refused one);
    ``failure`` as it is when none fails."""
    for entry in explaining:
        try:
            run(entry["name"], entry["check"], objects, entry["context"])
        except CheckFailed as explanation:
            explained = CheckFailed(f"{failure}\n{explanation}", explanation.mistake or failure.mistake)
            explained.__cause__ = failure.__cause__
            return explained
    return failure


def _failing(failures: list[tuple[int, CheckFailed]], shown: int) -> str:
    """Which cases fail, and the one whose message follows (``shown``)."""
    numbers = [str(number) for number, _ in failures]
    if len(numbers) == 1:
        return f"case {shown} fails:"
    return f"cases {', '.join(numbers[:-1])} and {numbers[-1]} fail; case {shown}:"


def _say_passed(name: str, total: int, passed: list[tuple[str, Verdict]]) -> None:
    """Prints what a group's cases said of a pass, each different line once, after their count;
    where a capped case could not run here (it said so), only the count."""
    if len(passed) < total:
        print(fit(f"{name}: {len(passed)} of {total} cases pass here; the grader checks the others."))
        return
    counted = [f"{name}: {total} of {total} cases pass."] if total > 1 else []
    said = dict.fromkeys(f"{case}: {verdict.message}" for case, verdict in passed)
    print(fit("\n".join(counted + list(said))))


# --------------------------------------------------------------------------------------
# The gradient fingerprint of the original minGPT attention exercise (assignment 04)
# --------------------------------------------------------------------------------------


def seed_000_input() -> torch.Tensor:
    """The exercise's input: 5 tokens of 12 features, the first 1,1,1,2,2,2,3,3,3,4,4,4, the rest ones."""
    x = torch.ones(1, 5, 12)
    x[0, 0] = torch.tensor([1.0, 2.0, 3.0, 4.0]).repeat_interleave(3)
    return x


# A sum that is a whole number in exact arithmetic comes out of float32 a few units in the last
# place either side of it: the value bias's 432 (12 gradients of 6, squared) is 432.00003 on this
# course's machines, and another CPU or another correct order of the same sums can give 431.99997,
# which int() alone would cut to 431. A sum this close below a whole number counts as that number.
# Sums that are not whole numbers stay further from one (37187.586 here), and keep the exercise's.
FINGERPRINT_RTOL = 1e-6   # about 8 units in the last place of a float32


def fingerprint(gradients: list[torch.Tensor]) -> list[int]:
    """The exercise's integer fingerprint of attention gradients: ``int(sum(g**2))`` for each of
    the query, key and value weights and biases (in the order given), at ``FINGERPRINT_RTOL``;
    -1 marks one with NaN."""
    sums = [(g ** 2).sum().item() for g in gradients]
    return [-1 if math.isnan(s) else int(s + abs(s) * FINGERPRINT_RTOL) for s in sums]


def mingpt_fingerprint(module: torch.nn.Module, x: torch.Tensor | None = None) -> list[int]:
    """The exercise's check: every parameter at 0.1, ``y.sum()`` backpropagated, then
    ``int(sum(grad**2))`` for query weight and bias, key weight and bias, value weight and bias."""
    for parameter in module.parameters():
        torch.nn.init.constant_(parameter, 0.1)
    module.zero_grad(set_to_none=True)
    output = module(seed_000_input() if x is None else x)
    output = output[0] if isinstance(output, tuple) else output
    output.sum().backward()
    return fingerprint([module.query.weight.grad, module.query.bias.grad, module.key.weight.grad,
                        module.key.bias.grad, module.value.weight.grad, module.value.bias.grad])


def diagnose_fingerprint(fingerprint: list[int]) -> Verdict:
    """Judges a fingerprint of the minGPT exercise and names the catalogued mistake it comes from."""
    stored_fingerprints = stored_checks()["fingerprints"]
    expected = stored_fingerprints["expected"]
    if list(fingerprint) == expected:
        return Verdict("passed", render(TEXTS["fingerprint_passed"], expected=expected))
    message = render(TEXTS["fingerprint"], got=list(fingerprint), expected=expected)
    for mistake, theirs in stored_fingerprints["mistakes"].items():
        if len(theirs) == len(fingerprint) and all(abs(a - b) <= 1 for a, b in zip(theirs, fingerprint)):
            return Verdict("failed", message, mistake)   # within 1: a mistake's own sums round too
    if fingerprint and fingerprint[-1] == expected[-1]:
        return Verdict("failed", message + TEXTS["values_right"],
                       catalog.BY_NAME["mask_filled_with_zero"])
    return Verdict("failed", message)


# --------------------------------------------------------------------------------------
# Rotary position embeddings (assignment 06): the stored values, and the property they exist for
# --------------------------------------------------------------------------------------


def check_rope(fn) -> Verdict:
    """Visible check of ``fn(x, positions, base)`` (Llama's half-split convention): positions from
    0, positions that start later (as after a cache) and one row of positions per sequence (as
    with left padding), two bases; then the property rotary embeddings exist for."""
    verdict = check("apply_rope", fn)
    # The property rotary embeddings exist for, shown on the student's own function (the values
    # above already imply it; the tolerance is loose so that it never refuses what they passed).
    q, k = torch.randn(2, 1, 1, 1, 16, generator=torch.Generator().manual_seed(0)).unbind(0)
    pairs = ((3, 0), (53, 50), (303, 300))
    scores = [float((call_student(fn.__name__, fn, q, torch.tensor([m])) *
                     call_student(fn.__name__, fn, k, torch.tensor([n]))).sum()) for m, n in pairs]
    if max(scores) - min(scores) > 1e-2 * float(q.norm() * k.norm()):
        raise CheckFailed(f"{fn.__name__}: a query at m and a key at n score {scores} at {list(pairs)}: the score "
                          "must depend on m - n only.")
    print(fit(f"{fn.__name__}: a query at m and a key at n = m - 3 score {scores[0]:+.5f} at m = 3, 53 and 303: "
              "the score depends on m - n only."))
    return verdict
