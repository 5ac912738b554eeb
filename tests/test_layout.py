"""The package layout keeps its promises: no import cycles, and a sandbox that can reach only
``transformer_lm/sandboxed`` (never the reference, the checks or the grader)."""

import ast
import json

import pytest

from autograder.running import runner, sandbox
from package_imports import PACKAGES, imports, modules


def test_no_module_of_either_package_imports_itself_back():
    """A walk of every import, those inside functions included: an import cycle hides an order
    that only works by accident, and lazy imports that dodge one are cycles all the same."""
    graph = {name: imports(path, set(modules())) for name, path in modules().items()}
    graph = {name: {m for m in targets if m not in PACKAGES or m == name} for name, targets in graph.items()}
    cycles = []

    def visit(name, trail):
        if name in trail:
            cycles.append(trail[trail.index(name):] + [name])
            return
        for target in sorted(graph.get(name, ())):
            if target != name:
                visit(target, trail + [name])

    for start in sorted(graph):
        visit(start, [])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles[:5])


SANDBOX_SIDE = {"transformer_lm", "transformer_lm.sandboxed", "transformer_lm.sandboxed.probes",
                "transformer_lm.sandboxed.student_objects", "transformer_lm.sandboxed.tensor_trace",
                "transformer_lm.sandboxed.call_trace", "transformer_lm.sandboxed.wire",
                "transformer_lm.sandboxed.test_values", "transformer_lm.sandboxed.viz",
                "transformer_lm.sandboxed.decoder", "transformer_lm.sandboxed.memory_cap",
                "transformer_lm.sandboxed.score_blocks"}


def test_the_sandbox_library_holds_only_the_sandboxed_folder(tmp_path):
    """In a real sandbox, with the library a grading worker gets, every module of the sandboxed
    folder imports, and every other module of both packages (reference, mistakes, checks, kinds,
    adapters, each grader module) is unreachable."""
    isolation = sandbox.detect_isolation()
    if isolation.name != "bubblewrap":
        pytest.skip(f"needs bubblewrap: {isolation.detail}")
    library = runner.sandbox_library(tmp_path / "lib")
    names = sorted(name for name in modules() if not name.endswith("__main__"))  # that one runs the CLI
    assert SANDBOX_SIDE <= set(names)
    probe = ("import importlib, json, sys\n"
             "result = {}\n"
             "for name in sys.argv[1:]:\n"
             "    try:\n"
             "        importlib.import_module(name)\n"
             "        result[name] = 'imported'\n"
             "    except ImportError as error:\n"
             "        result[name] = type(error).__name__\n"
             "print('RESULT', json.dumps(result))\n")
    lib = runner.MOUNTS["lib"]
    done = sandbox.run_sandboxed(["python", "-c", probe, *names], readonly={str(library): lib}, writable={},
                                 limits=sandbox.Limits(wall_seconds=120), env={"PYTHONPATH": lib, "MPLBACKEND": "Agg"},
                                 cwd="/tmp", isolation=isolation)
    line = next((line for line in done.output.splitlines() if line.startswith("RESULT ")), None)
    assert done.returncode == 0 and line, done.output[-3000:]
    result = json.loads(line.removeprefix("RESULT "))
    assert {n for n, how in result.items() if how == "imported"} == SANDBOX_SIDE, result
    assert result["transformer_lm.instructor.reference"] == "ModuleNotFoundError"
    assert result["autograder.judging.grading"] == "ModuleNotFoundError"


@pytest.mark.parametrize("name", sorted(SANDBOX_SIDE))
def test_sandboxed_modules_import_nothing_else_of_the_course(name):
    """What the sandbox runs imports only the standard library, torch, safetensors, matplotlib,
    and the sandboxed folder itself."""
    path = modules()[name]
    outside = {m for m in imports(path, set(modules())) if m not in SANDBOX_SIDE}
    assert not outside, f"{name} imports {outside}"


def test_no_function_of_either_package_is_over_fifty_lines():
    long = [f"{name}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for name, path in modules().items() for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 50]
    assert not long


def test_no_module_of_either_package_is_over_four_hundred_lines():
    """A module over 400 lines mixes concerns; split it by what each part is about."""
    long = [f"{name} ({len(path.read_text().splitlines())} lines)" for name, path in modules().items()
            if len(path.read_text().splitlines()) > 400]
    assert not long


def test_no_module_uses_another_modules_underscore_names():
    """A name with a leading underscore is its module's own: another module that needs it needs a
    public name."""
    known = set(modules())
    used = []
    for name, path in modules().items():
        tree = ast.parse(path.read_text())
        ours = {}  # local name -> one of our modules
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module in known:
                used += [f"{name}: {node.module}.{a.name}" for a in node.names
                         if a.name.startswith("_") and not a.name.startswith("__")]
            if isinstance(node, ast.ImportFrom) and node.module:  # from autograder import runner
                ours.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names
                             if f"{node.module}.{a.name}" in known})
            if isinstance(node, ast.Import):
                ours.update({a.asname: a.name for a in node.names if a.asname and a.name in known})
        used += [f"{name}: {ours[node.value.id]}.{node.attr}" for node in ast.walk(tree)
                 if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ours
                 and node.attr.startswith("_") and not node.attr.startswith("__")]
    assert not used
