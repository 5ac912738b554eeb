"""Which library objects an answer's code calls, its names resolved as Python resolves them, read
from the syntax tree and never run.

An exercise that asks for softmax forbids PyTorch's, not the word: a helper the notebook calls
``softmax`` (as d2l writes one), an ``isinstance(mha, nn.MultiheadAttention)`` or a weight copy from
a library layer calls nothing forbidden. So a name counts only through what it is bound to. An
import binds it to the library object it names (``import torch.nn.functional as F``,
``from torch import softmax as sm``); a ``def``, a class, an assignment, a parameter or any other
binding in the notebook makes it the notebook's own, which is never the library's. Python's scopes
are kept: a function's names are its own wherever in it they are bound, ``global`` sends a name to
the module, and a class body's names are not seen by its methods. An attribute chain is followed
on the object itself (``F.softmax`` on the module ``torch.nn.functional``), in the process that
reads, so every alias of the object is the object: ``torch.softmax`` is
``torch._C._VariableFunctions.softmax``.

A use is **certain** when a call's function is a forbidden object, whichever name reached it. It is
**unsure** when the reading cannot settle it and a forbidden object may be reached: a name bound
both by an import of a forbidden object and by the notebook, a forbidden object used without a
call (``sm = F.softmax``), a library layer built whose ``forward`` is forbidden, or a method named
like the forbidden function on a value the reading cannot know (``scores.softmax(-1)``). An
unsure use costs nothing here: the run that checks the item takes the forbidden kernels away,
and what runs decides.
"""

from __future__ import annotations

import ast
import builtins
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass

from transformer_lm.source_scan import parse_cell

OWN = "own"
"""A binding of the notebook's own: a function, a class, a variable, a parameter."""
UNKNOWN = "unknown"
"""A value the reading cannot know: what a call returns, a module that is not loaded."""

Outer = Callable[[str], list]
"""The values a module-level name may have beyond the cell read: from the notebook's other cells
(:func:`notebook_bindings`) or from the namespace the answer runs in."""


@dataclass(frozen=True)
class Use:
    """A use of a forbidden object: its line in the cell, the forbidden name, and whether it is certain."""

    line: int
    name: str
    certain: bool


@dataclass
class Forbidden:
    """What an item forbids, as objects: each with its forbidden name, the classes whose ``forward``
    is forbidden, and the names of the ATen operators of their families."""

    objects: dict[int, str]
    layers: dict[int, str]
    operators: dict[str, str]
    methods: dict[str, str]
    """Attribute names a forbidden function is also a method under (``Tensor.softmax``)."""

    def name_of(self, value) -> str | None:
        """The forbidden name ``value`` is, as an object or as an operator of a family (an ATen
        operator, or torch's own Python binding of one, which bears the operator's name); None otherwise."""
        if id(value) in self.objects:
            return self.objects[id(value)]
        if isinstance(value, (types.BuiltinFunctionType, types.MethodDescriptorType)) and _bound_by_torch(value):
            return self.operators.get(f"aten::{value.__name__}")
        schema_name = getattr(getattr(value, "_schema", None), "name", None) or getattr(value, "_qualified_op_name",
                                                                                         None)
        return self.operators.get(schema_name) if isinstance(schema_name, str) else None


def _bound_by_torch(value) -> bool:
    """Whether a built-in function or method is one of torch's bindings of its ATen operators."""
    owner = getattr(value, "__objclass__", None)
    return (getattr(value, "__module__", None) or "").startswith("torch") or \
        owner is not None and (owner.__module__ or "").startswith("torch")


def _module(name: str):
    """A module the reading process has loaded, or :data:`UNKNOWN`: a module is never imported on a
    notebook's word, since importing runs its code."""
    return sys.modules.get(name, UNKNOWN)


def _attribute(value, attribute: str):
    """``value.attribute`` for a library object, without importing a submodule that is not loaded;
    an attribute of a value the notebook made, or of one the reading cannot know, is :data:`UNKNOWN`."""
    if value in (OWN, UNKNOWN):
        return UNKNOWN
    if isinstance(value, types.ModuleType):
        found = vars(value).get(attribute, sys.modules.get(f"{value.__name__}.{attribute}", UNKNOWN))
        return found
    try:
        return getattr(value, attribute)
    except Exception:  # noqa: BLE001 - an attribute the object does not have: nothing the library gives
        return UNKNOWN


def _imported(node: ast.Import | ast.ImportFrom) -> list[tuple[str, object]]:
    """The names an import binds, each with its value (or ``("*", module)`` for a star import)."""
    if isinstance(node, ast.Import):
        return [(alias.asname or alias.name.split(".")[0], _module(alias.name if alias.asname else
                                                                   alias.name.split(".")[0]))
                for alias in node.names]
    module = _module(node.module or "") if node.level == 0 else UNKNOWN
    found = []
    for alias in node.names:
        if alias.name == "*":
            found.append(("*", module))
        else:
            value = _attribute(module, alias.name)
            if value is UNKNOWN and module is not UNKNOWN:
                value = _module(f"{node.module}.{alias.name}")
            found.append((alias.asname or alias.name, value))
    return found


SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp, ast.SetComp, ast.DictComp,
          ast.GeneratorExp)


class Scopes(ast.NodeVisitor):
    """Every scope of a cell, with the names bound in it and the values they may have."""

    def __init__(self, tree: ast.Module):
        self.parent: dict[ast.AST, ast.AST | None] = {tree: None}
        self.bound: dict[ast.AST, dict[str, list]] = {tree: {}}
        self.globals: dict[ast.AST, set[str]] = {tree: set()}
        self.stars: list = []
        self.scope_of: dict[int, ast.AST] = {}
        self.current = tree
        self.tree = tree
        self.generic_visit(tree)

    def bind(self, name: str, value, scope: ast.AST | None = None) -> None:
        scope = scope or self.current
        if name in self.globals[scope]:
            scope = self.tree
        self.bound[scope].setdefault(name, []).append(value)

    def visit(self, node):
        self.scope_of[id(node)] = self.current
        return super().visit(node)

    def _enter(self, node, arguments: ast.arguments | None) -> None:
        outer = self.current
        self.parent[node], self.bound[node], self.globals[node] = outer, {}, set()
        self.current = node
        for argument in (arguments.posonlyargs + arguments.args + arguments.kwonlyargs +
                         [a for a in (arguments.vararg, arguments.kwarg) if a]) if arguments else ():
            self.bind(argument.arg, OWN)
        self.globals[node] |= {name for child in ast.walk(node) if isinstance(child, ast.Global)
                               for name in child.names}
        body = getattr(node, "body", [])
        body = body if isinstance(body, list) else [body]
        for child in body:
            self.visit(child)
        for generator in getattr(node, "generators", ()):
            self.visit(generator)
        for part in ("elt", "key", "value"):
            if isinstance(getattr(node, part, None), ast.AST) and not isinstance(node, ast.ClassDef):
                self.visit(getattr(node, part))
        self.current = outer

    def visit_FunctionDef(self, node):
        for outside in (*node.decorator_list, *node.args.defaults, *[d for d in node.args.kw_defaults if d]):
            self.visit(outside)
        self.bind(node.name, OWN)
        self._enter(node, node.args)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        for outside in (*node.decorator_list, *node.bases, *[k.value for k in node.keywords]):
            self.visit(outside)
        self.bind(node.name, OWN)
        self._enter(node, None)

    def visit_Lambda(self, node):
        for outside in (*node.args.defaults, *[d for d in node.args.kw_defaults if d]):
            self.visit(outside)
        self._enter(node, node.args)

    def visit_ListComp(self, node):
        self._enter(node, None)

    visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_ListComp

    def visit_Import(self, node):
        for name, value in _imported(node):
            if name == "*":
                self.stars.append(value)
            else:
                self.bind(name, value)

    visit_ImportFrom = visit_Import

    def visit_Name(self, node):
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self.bind(node.id, OWN)

    def visit_NamedExpr(self, node):
        scope = self.current
        while isinstance(scope, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            scope = self.parent[scope]
        self.bind(node.target.id, OWN, scope)
        self.visit(node.value)

    def visit_ExceptHandler(self, node):
        if node.name:
            self.bind(node.name, OWN)
        self.generic_visit(node)

    def visit_MatchAs(self, node):
        if node.name:
            self.bind(node.name, OWN)
        self.generic_visit(node)

    def visit_MatchStar(self, node):
        if node.name:
            self.bind(node.name, OWN)

    def visit_MatchMapping(self, node):
        if node.rest:
            self.bind(node.rest, OWN)
        self.generic_visit(node)

    def module_values(self, name: str) -> list:
        return list(self.bound[self.tree].get(name, []))

    def values(self, name: str, scope: ast.AST, outer: Outer) -> list:
        """What ``name`` may be, read in ``scope``: the innermost binding as Python finds it, then
        the module's (this cell's and ``outer``'s), star imports and builtins."""
        here, first = scope, True
        if name not in self.globals[scope]:
            while here is not self.tree:
                if (first or not isinstance(here, ast.ClassDef)) and name in self.bound[here]:
                    return self.bound[here][name]
                first, here = False, self.parent[here]
        found = self.module_values(name) + outer(name)
        if found:
            return found
        starred = [vars(m)[name] for m in self.stars if isinstance(m, types.ModuleType) and name in vars(m)]
        if starred or any(m is UNKNOWN for m in self.stars):
            return starred + ([UNKNOWN] if any(m is UNKNOWN for m in self.stars) else [])
        return [getattr(builtins, name)] if hasattr(builtins, name) else [UNKNOWN]


def _values(node: ast.AST, scopes: Scopes, outer: Outer) -> list:
    """What an expression may be: a name's values, an attribute of each, or :data:`UNKNOWN`."""
    if isinstance(node, ast.Name):
        return scopes.values(node.id, scopes.scope_of.get(id(node), scopes.tree), outer)
    if isinstance(node, ast.Attribute):
        return [_attribute(value, node.attr) for value in _values(node.value, scopes, outer)]
    return [UNKNOWN]


def notebook_bindings(sources: list[str]) -> Outer:
    """The module-level bindings of a notebook's code cells, read statically: an import gives the
    object it names, every other binding makes the name the notebook's own."""
    bound: dict[str, list] = {}
    for source in sources:
        tree = parse_cell(source)
        try:
            cell = Scopes(tree).bound[tree] if tree is not None else {}
        except RecursionError:  # nested deeper than a walk of Python's can follow: its bindings are unread
            cell = {}
        for name, values in cell.items():
            bound.setdefault(name, []).extend(values)
    return lambda name: bound.get(name, [])


def namespace_bindings(namespace: dict) -> Outer:
    """The module-level bindings of a running kernel: each name's value, as it is now."""
    return lambda name: [namespace[name]] if name in namespace else []


def forbidden_uses(source: str, forbidden: Forbidden, outer: Outer) -> list[Use]:
    """The uses of forbidden objects in a cell's code, certain or unsure (see the module's
    docstring), in the order of the code. A cell that does not parse, or is nested deeper than a
    walk of Python's can follow, has none: the run's absence of the forbidden operators decides."""
    tree = parse_cell(source)
    try:
        return [] if tree is None else _uses(tree, forbidden, outer)
    except RecursionError:
        return []


def _uses(tree: ast.Module, forbidden: Forbidden, outer: Outer) -> list[Use]:
    scopes = Scopes(tree)
    uses: dict[tuple[int, str], bool] = {}
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}

    def note(node, name, certain):
        key = (node.lineno, name)
        uses[key] = uses.get(key, False) or certain

    for node in ast.walk(tree):
        if not isinstance(node, (ast.Name, ast.Attribute)) or not isinstance(node.ctx, ast.Load):
            continue
        values = _values(node, scopes, outer)
        names = {forbidden.name_of(v) for v in values} - {None}
        if id(node) in called:
            layers = {forbidden.layers[id(v)] for v in values if id(v) in forbidden.layers}
            for name in names:
                note(node, name, len(names) == 1 and all(forbidden.name_of(v) for v in values))
            for name in layers:
                note(node, name, False)
            if not names and isinstance(node, ast.Attribute) and node.attr in forbidden.methods and UNKNOWN in values:
                note(node, forbidden.methods[node.attr], False)
        else:
            for name in names:
                note(node, name, False)
            if not names and isinstance(node, ast.Attribute) and node.attr in forbidden.methods and UNKNOWN in values:
                note(node, forbidden.methods[node.attr], False)
    return [Use(line, name, certain) for (line, name), certain in sorted(uses.items())]
