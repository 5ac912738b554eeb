"""The modules of the course's two packages and the imports between them, read from their code
(``tests/test_layout.py`` and ``tests/test_stages.py`` hold rules over them)."""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("autograder", "transformer_lm")


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    """Every module of both packages; not the hidden checks, loaded by path and never imported by
    name, nor the public code the similarity report compares answers with, which is data."""
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            top = path.relative_to(REPO / package).parts[0]
            if package != "autograder" or top not in ("checks", "similarity_corpus"):
                found[module_name(path)] = path
    return found


def imports(path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``path`` imports anywhere in its code (in functions too)."""
    tree = ast.parse(path.read_text())
    package = module_name(path).rsplit(".", 1)[0] if path.name != "__init__.py" else module_name(path)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found - {module_name(path)}
