"""Functions that hold what they guard where no run can reach it: made from code compiled once
whose string constants are placeholders, replaced by the objects themselves (:func:`with_constants`),
and put in the place of the originals wherever a loaded module holds them
(:func:`replace_everywhere`).

The guards of PyTorch's switches of the trace (:mod:`harness.guard`) and each trace's seal
(:mod:`harness.traces`) are made this way; the audit hook knows them by their globals,
:data:`GUARD_MARK`, and ends a run that reads their code (:mod:`harness.refusals`).
"""

from __future__ import annotations

import sys
import types
import warnings

from transformer_lm.sandboxed import memory_cap

GUARD_MARK: dict = {}
"""The globals of every guard: how the audit hook knows one (a function's globals cannot be changed)."""


def _placeholders(source: str) -> types.CodeType:
    """The code of the one function ``source`` defines, whose string constants are placeholders."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)  # calling a str: it is a placeholder
        module = compile(source, "<the grader's guard>", "exec")
    return next(c for c in module.co_consts if isinstance(c, types.CodeType))


GUARD_CODE = _placeholders('''
def guard(*args, **kwargs):
    "CHECK"("NAME")
    return "ORIGINAL"(*args, **kwargs)
''')
SEAL_CODE = _placeholders('''
def seal(kind, *args):
    "CHECK"(kind)
    return "GETATTR"("TOTALS", kind)(*args)
''')
MADE_CODE = _placeholders('''
def made(*args, **kwargs):
    return "GUARD_RESULT"("ORIGINAL"(*args, **kwargs))
''')
"""The guards' code, compiled once: a guard of each operator's kernel caller is made from it."""
KEEP_CODE = _placeholders('''
def keep():
    return len("KEPT") * 0
''')
"""A function that holds objects alive and out of any run's reach (what keeps a removed kernel out)."""


def with_constants(code: types.CodeType, name: str, constants: dict, _function=types.FunctionType, _mark=GUARD_MARK,
                   _type=type, _str=str, _tuple=tuple) -> types.FunctionType:
    """The function of ``code`` (:func:`_placeholders`) with each string constant of ``constants``
    replaced by its object (``"ORIGINAL"(...)`` then calls the original): those objects are then
    reachable only through the function's ``__code__``, which the audit hook does not let a run
    read. What it uses is bound in its defaults: a trace's seal is made while a probe runs."""
    consts = _tuple(constants.get(c, c) if _type(c) is _str else c for c in code.co_consts)
    return _function(code.replace(co_consts=consts), _mark, name)


def replace_everywhere(found: dict[int, tuple[object, object]]) -> None:
    """Each loaded module's names for an ``original`` of ``found`` (by id: original, replacement)
    point at its replacement from now on."""
    memory_cap.replace_in(list(sys.modules.values()), found)
