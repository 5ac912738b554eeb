"""What an answer cell's code mentions, read as a syntax tree and never run, and where the text
of an answer defined in a notebook is.

Visible checks use it to refuse an answer that calls the library function the exercise asks
students to write, and to check its cell's style; the grader's preflight uses it for the same
reason before anything runs.
"""

from __future__ import annotations

import ast
import inspect
import linecache
import textwrap
import threading
import types

_PARSING = threading.Lock()  # see parse_cell


def parse_cell(source: str) -> ast.Module | None:
    """A notebook cell's code as a syntax tree, with IPython magics and shell escapes left out;
    None when it is not valid Python or too deeply nested for Python to parse. One thread at a time: CPython 3.11 can fail with
    "AST constructor recursion depth mismatch" when threads build syntax trees at once, and the
    grader grades submissions in threads."""
    python = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
    with _PARSING:
        try:
            return ast.parse(python)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None


def mentioned_names(source: str) -> set[str]:
    """Every identifier and attribute name that ``source``'s code mentions, read as tokens of its
    syntax tree: comments, strings (docstrings and f-strings among them), annotations and assert
    messages are never read, since honest code names library classes there. IPython magics and
    shell escapes are ignored. Used to spot forbidden library calls before anything runs; a call
    reached through a string (``getattr(torch, "softmax")``) is refused when it runs instead."""
    tree = parse_cell(source)
    if tree is None:
        return set()
    unread = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            unread.add(node.returns)
        elif isinstance(node, ast.arg):
            unread.add(node.annotation)
        elif isinstance(node, ast.AnnAssign):
            unread.add(node.annotation)
        elif isinstance(node, ast.Assert):
            unread.add(node.msg)
        elif isinstance(node, ast.JoinedStr):
            unread.add(node)
    skipped = {id(inner) for node in unread - {None} for inner in ast.walk(node)}
    names = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.alias):
            names.update(node.name.split("."))
    return names


def functions_of(obj) -> list[types.FunctionType]:
    """A function, or the functions a class defines itself."""
    if inspect.isfunction(obj):
        return [obj]
    prefix = getattr(obj, "__qualname__", "") + "."
    return [member for _, member in inspect.getmembers(obj)
            if inspect.isfunction(member) and member.__qualname__.startswith(prefix)]


def answer_text(obj) -> str:
    """The text the grader scans for ``obj``: its whole notebook cell (helpers beside it
    included) when it was defined in one, else its own source; empty when there is none."""
    try:
        filename = inspect.getsourcefile(obj) or ""
        if all(f.__globals__.get("__name__") == "__main__" for f in functions_of(obj)) and linecache.getlines(filename):
            return "".join(linecache.getlines(filename))  # a cell of the kernel: IPython keeps it in linecache
        return textwrap.dedent(inspect.getsource(obj))  # a method's source is indented
    except (OSError, TypeError):
        return ""
