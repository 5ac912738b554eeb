"""How `make test` shares the test files between its two workers: pytest-xdist's ``--dist loadfile``
(each file whole, so its module fixtures are made once), with two refinements that keep both
cores busy to the end.

- The files that use one of the session's costly fixtures (``SHARED``: the hostile class, graded;
  the student kit, set up and its notebooks run) go to one worker together, so that each is made
  once per run, not once per worker. A file that uses two joins their groups into one.
- The tests of ``SPLIT_FILES`` share no fixture and each takes tens of seconds or more; each is a
  unit of its own, so that both workers take them.

Units are handed out in the order of the collection, which conftest sorts longest first (with
``--no-loadscope-reorder``; xdist otherwise sorts units by their number of tests).
"""

import ast
from pathlib import Path

from xdist.scheduler import LoadFileScheduling

TESTS = Path(__file__).resolve().parent
SHARED = {"the hostile class": {"graded_class"},
          "the student kit": {"kit", "course_folder", "kit_python", "kit_runs", "solved", "released_run"}}
"""Each session fixture that takes minutes to make, by the fixtures through which a file uses it
(conftest.py, tests/kit_fixtures.py)."""
SPLIT_FILES = {"test_audit.py", "test_visible_and_hidden_agree.py", "test_outside_truth_visible.py"}


def arguments(tree: ast.AST) -> set[str]:
    """The argument names of every function defined in ``tree``: the fixtures its tests and
    fixtures take."""
    return {arg.arg for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            for arg in node.args.args}


def fixtures_used(path: Path) -> set[str]:
    """What the test file's functions take, with what the tests take that it adds from
    ``assignment_tests.tests_for`` at its top level."""
    tree = ast.parse(path.read_text())
    used = arguments(tree)
    calls = [node for statement in tree.body for node in ast.walk(statement)
             if isinstance(statement, ast.Expr) and isinstance(node, ast.Call)]
    if any(getattr(call.func, "attr", getattr(call.func, "id", None)) == "tests_for" for call in calls):
        used |= arguments(ast.parse((TESTS / "assignment_tests.py").read_text()))
    return used


def shared_units() -> dict[str, str]:
    """Each test file that uses a fixture of ``SHARED``, to the name of its unit: the groups joined
    wherever one file uses fixtures of two."""
    used = {path.name: fixtures_used(path) for path in TESTS.glob("test_*.py")}
    groups = {file: {name for name, fixtures in SHARED.items() if fixtures & found} for file, found in used.items()}
    joined = {name: {name} for name in SHARED}
    for found in groups.values():
        merged = set().union(*(joined[name] for name in found))
        for name in merged:
            joined[name] = merged
    return {file: " and ".join(sorted(joined[next(iter(found))])) for file, found in groups.items() if found}


class CourseScheduling(LoadFileScheduling):
    """Whole files, except the files of each shared fixture (one unit) and SPLIT_FILES (a unit per test)."""

    def __init__(self, config, log=None):
        super().__init__(config, log)
        self.shared = shared_units()

    def _split_scope(self, nodeid: str) -> str:
        file = nodeid.split("::", 1)[0]
        name = Path(file).name
        if name in self.shared:
            return f"the files that use {self.shared[name]}"
        if name in SPLIT_FILES:
            return nodeid
        return file
