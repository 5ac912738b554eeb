"""How `make test` shares the test files between its two workers: pytest-xdist's ``--dist loadfile``
(each file whole, so its module fixtures are made once), with two refinements that keep both
cores busy to the end.

- The files that use the session's hostile class (conftest's ``graded_class``) go to one worker
  together, so that the class is graded once per run, not once per worker.
- The tests of ``SPLIT_FILES`` share no fixture and each takes tens of seconds or more; each is a
  unit of its own, so that both workers take them.

Units are handed out in the order of the collection, which conftest sorts longest first (with
``--no-loadscope-reorder``; xdist otherwise sorts units by their number of tests).
"""

from pathlib import Path

from xdist.scheduler import LoadFileScheduling

TESTS = Path(__file__).resolve().parent
SHARED_FIXTURE = "graded_class"
SPLIT_FILES = {"test_audit.py", "test_visible_and_hidden_agree.py", "test_outside_truth_visible.py"}


def files_using(fixture: str) -> set[str]:
    """The test files that name ``fixture``."""
    return {path.name for path in TESTS.glob("test_*.py") if fixture in path.read_text()}


class CourseScheduling(LoadFileScheduling):
    """Whole files, except the hostile class's files (one unit) and SPLIT_FILES (a unit per test)."""

    def __init__(self, config, log=None):
        super().__init__(config, log)
        self.sharing = files_using(SHARED_FIXTURE)

    def _split_scope(self, nodeid: str) -> str:
        file = nodeid.split("::", 1)[0]
        name = Path(file).name
        if name in self.sharing:
            return f"the files that use {SHARED_FIXTURE}"
        if name in SPLIT_FILES:
            return nodeid
        return file
