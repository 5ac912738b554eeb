"""What of the course's code a run may hold: the stand-ins for the answers an item builds on,
and the parts of the reference those stand-ins use, never more.

An item that builds on a wrong earlier answer is judged in a run of its own with the course's
code in place of that answer (one mistake costs points once). That run also runs the student's
answer to the item itself, so it must not hold the course's answer to that item, nor to any later
one. So the run gets, as source text: the top-level definitions of the assignment's stand-ins
file (``<checks_dir>/stand_ins/<assignment>.py``) that the names it stands in for need, and the
top-level definitions of the reference that those use, followed name by name. The reference is a
package (``transformer_lm/instructor/reference/``, a module per concept); :func:`reference_source` gives it
as the one module the run's ``reference`` is: its modules' definitions, each module after those
it imports from, without the imports between them. The names are followed through that one text,
across the modules, as through one file: the split into modules changes nothing of what a run gets.

Two rules keep later answers out:

* a stand-in that looks up a name another item defines (``GPT.generate`` calls
  ``generate_tokens``) looks up the student's at run time (:class:`autograder.running.harness.run.CourseCode`),
  so such names are not followed;
* a reference class that a stand-in subclasses loses the methods the stand-in replaces (the
  stand-in ``GPT`` has its own ``generate``, so the reference's, which is the answer to the
  generation items, is not sent; a method that calls ``super()``'s stays).
"""

from __future__ import annotations

import ast
import copy
from pathlib import Path

DEFINITIONS = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef, ast.Assign, ast.AnnAssign)
REFERENCE_MODULE = "reference"
"""How the stand-ins name the reference module (``from transformer_lm import reference``)."""
REFERENCE_PACKAGE = "transformer_lm.instructor.reference"
"""The reference's package, whose modules :func:`reference_source` joins into one."""


def _defined(node: ast.stmt) -> list[str]:
    """The names a top-level statement defines."""
    if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
        return [node.name]
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return [t.id for t in targets if isinstance(t, ast.Name)]


def _used(node: ast.AST) -> tuple[set[str], set[str]]:
    """The plain names a definition reads, and the attributes it reads of the reference module."""
    names, of_reference = set(), set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load):
            names.add(sub.id)
        elif (isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name)
              and sub.value.id == REFERENCE_MODULE):
            of_reference.add(sub.attr)
    return names, of_reference


class _Module:
    """A module's top-level statements: its imports, and its definitions by name."""

    def __init__(self, source: str):
        self.tree = ast.parse(source)
        self.imports = [n for n in self.tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        self.by_name = {name: node for node in self.tree.body if isinstance(node, DEFINITIONS)
                        for name in _defined(node)}

    def closure(self, start: set[str], skip: set[str], trimmed: dict[str, set[str]]) -> tuple[set[str], set[str]]:
        """The definitions ``start`` needs (names of this module, not following ``skip``), and the
        reference attributes they read; ``trimmed`` names methods left out of a class."""
        needed, of_reference, todo = set(), set(), [n for n in start if n in self.by_name]
        while todo:
            name = todo.pop()
            if name in needed:
                continue
            needed.add(name)
            names, attrs = _used(_trim(self.by_name[name], trimmed.get(name, set())))
            of_reference |= attrs
            todo += [n for n in names if n in self.by_name and n not in skip and n not in needed]
        return needed, of_reference

    def source(self, needed: set[str], trimmed: dict[str, set[str]]) -> str:
        """The imports and the ``needed`` definitions, in the module's order, as source."""
        kept = [n for n in self.tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
                or (isinstance(n, DEFINITIONS) and set(_defined(n)) & needed)]
        body = [_trim(n, trimmed.get(_defined(n)[0], set())) if isinstance(n, ast.ClassDef) else n for n in kept]
        return ast.unparse(ast.Module(body=body, type_ignores=[])) + "\n"


def _trim(node: ast.stmt, methods: set[str]) -> ast.stmt:
    """A class without the methods ``methods`` (other definitions as they are)."""
    if not methods or not isinstance(node, ast.ClassDef):
        return node
    trimmed = copy.copy(node)
    trimmed.body = [n for n in node.body
                    if not (isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name in methods)] or [ast.Pass()]
    return trimmed


def _calls_super(method: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether a method calls the method it overrides (``super().<its name>``)."""
    return any(isinstance(n, ast.Attribute) and n.attr == method.name and isinstance(n.value, ast.Call)
               and isinstance(n.value.func, ast.Name) and n.value.func.id == "super" for n in ast.walk(method))


def _overridden(stand_ins: _Module, names: set[str]) -> dict[str, set[str]]:
    """For each reference class that a needed stand-in subclasses, the methods it replaces
    (overrides without calling the reference's)."""
    found: dict[str, set[str]] = {}
    for name in names:
        node = stand_ins.by_name.get(name)
        if not isinstance(node, ast.ClassDef):
            continue
        methods = {n.name for n in node.body
                   if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _calls_super(n)}
        for base in node.bases:
            if isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name) and base.value.id == REFERENCE_MODULE:
                found.setdefault(base.attr, set()).update(methods)
    return found


def _sibling(node: ast.stmt) -> str | None:
    """The module of the reference package that an import takes names from
    (``from transformer_lm.instructor.reference.attention import ...``: ``attention``); None for an import of
    anything else. Another way to import the package or its modules is refused: in the one text of
    :func:`reference_source` there is no package to import."""
    prefix = REFERENCE_PACKAGE + "."
    if isinstance(node, ast.Import):
        modules = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        if not node.level and (node.module or "").startswith(prefix):
            return node.module[len(prefix):]
        modules = [REFERENCE_PACKAGE if node.level else node.module or ""]  # a relative import is of the package
    else:
        return None
    if any(module == REFERENCE_PACKAGE or module.startswith(prefix) for module in modules):
        raise ValueError(f"{ast.unparse(node)!r}: a module of {REFERENCE_PACKAGE} takes another's names with "
                         f"'from {prefix}<module> import ...'")
    return None


def _in_order(trees: dict[str, ast.Module]) -> list[str]:
    """The modules' names, each after those it imports from, otherwise by name."""
    order: list[str] = []

    def visit(name: str, trail: list[str]) -> None:
        if name in trail:
            raise ValueError(f"{REFERENCE_PACKAGE}: its modules import one another: {' -> '.join(trail + [name])}")
        if name not in order:
            for node in trees[name].body:
                if (sibling := _sibling(node)) is not None:
                    visit(sibling, trail + [name])
            order.append(name)

    for name in sorted(trees):
        visit(name, [])
    return order


def reference_source(folder: Path) -> str:
    """The reference package in ``folder`` (``transformer_lm/instructor/reference/``) as the source of one
    module, for :func:`for_names`: its modules' top-level statements, each module after those it
    imports from, under one ``from __future__`` import, and without the imports between its modules
    (the names they import are defined in the same text), their docstrings, and an import that an
    earlier module made already. A name that two modules define is refused: in one text the later
    would replace the earlier."""
    trees = {path.stem: ast.parse(path.read_text(), str(path))
             for path in sorted(folder.glob("*.py")) if path.name != "__init__.py"}
    futures, body, where, imported = [], [], {}, set()
    for name in _in_order(trees):
        tree = trees[name]
        for node in tree.body[1:] if ast.get_docstring(tree, clean=False) is not None else tree.body:
            if isinstance(node, ast.ImportFrom) and node.module == "__future__":
                futures += [a.name for a in node.names if a.name not in futures]
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                if _sibling(node) is None and ast.dump(node) not in imported:
                    imported.add(ast.dump(node))
                    body.append(node)
            else:
                for defined in _defined(node) if isinstance(node, DEFINITIONS) else []:
                    if defined in where:
                        raise ValueError(f"{REFERENCE_PACKAGE}: {defined} is defined by {where[defined]} and {name}")
                    where[defined] = name
                body.append(node)
    head = [ast.ImportFrom("__future__", [ast.alias(f) for f in futures], 0)] if futures else []
    return ast.unparse(ast.Module(body=head + body, type_ignores=[])) + "\n"


def for_names(reference_source: str, stand_ins_source: str, names: list[str], defined_by_items: set[str]) -> dict:
    """The course's code that stands in for ``names`` (names that items define), for a run
    (:class:`autograder.running.harness.run.CourseCode`): ``reference`` and ``stand_ins`` as source, and
    ``names``, every name the items define (the stand-ins look up the student's for the others)."""
    stand_ins, reference = _Module(stand_ins_source), _Module(reference_source)
    others = defined_by_items - set(names)
    needed, of_reference = stand_ins.closure(set(names), others, {})
    overridden = _overridden(stand_ins, needed)
    kept, _ = reference.closure(of_reference, set(), overridden)
    return {"reference": reference.source(kept, overridden), "stand_ins": stand_ins.source(needed, {}),
            "names": sorted(defined_by_items)}
