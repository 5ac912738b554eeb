"""What an item forbids (the library function its exercise asks students to write): absent from the
run that checks it (:func:`absent_from_run`), and found twice.

Before anything runs, in the answer's code, its names resolved to what they are
(:mod:`transformer_lm.library_calls`, preflight's early, named message). While the answer is
checked, in what ran: :func:`found_in_trace` reads the names that
:func:`transformer_lm.sandboxed.call_trace.trace_calls` recorded in the sandbox (torch functions by
name and ATen operators), so a call reached through ``getattr`` strings, ``torch.ops.aten`` or a
helper in another cell is found too. Both run in the trusted process.
"""

from __future__ import annotations

from transformer_lm.forbidding import python_functions, runtime_names


def found_in_trace(forbids: tuple[str, ...], ran: dict[str, list[tuple[int, ...]]], own_cell: int | None,
                   answer_cells: set[int], excused: set[int]) -> list[str]:
    """The forbidden names that this item's answer ran while it was checked. ``ran`` gives, for
    each watched name that ran, the notebook cells on the stack (innermost first). A call belongs
    to the innermost answer cell on its stack. One made inside an earlier answer that was charged
    with a forbidden call already (a ``my_attention`` that an attention class reuses), or inside
    the course's code, is ``excused``: one mistake costs points once. Any other is this item's,
    whichever cell it seems to come from: an answer that calls the library through another
    answer's helper, or through code compiled under another cell's name, gains nothing.

    A call with no notebook cell on its stack at all is PyTorch's autograd engine running the
    backward of a forbidden call (the check's own ``backward()``): it belongs with the forward
    calls of its name, and is this item's only where no forward call of the name was seen."""
    names = runtime_names(forbids)
    owners: dict[str, set[int | None]] = {}
    for runtime, stacks in ran.items():
        if runtime in names:
            found = owners.setdefault(names[runtime], set())
            found.update(next((cell for cell in stack if cell in answer_cells), None) for stack in stacks if stack)
    return sorted(name for name, found in owners.items()
                  if not found or any(owner == own_cell or owner not in excused for owner in found))


def absent_from_run(forbids: tuple[str, ...]) -> dict[str, list[str]]:
    """What a run that checks an item forbidding ``forbids`` takes out of PyTorch before any student
    code (:mod:`autograder.running.harness.absence`): every ATen operator of the forbidden calls'
    families, and torch's Python functions and classes that compute them (``module:attribute``),
    each found by what it computes (:mod:`transformer_lm.instructor.operator_families`)."""
    return {"operators": sorted(name for name in runtime_names(forbids) if "::" in name),
            "functions": python_functions(forbids)}
