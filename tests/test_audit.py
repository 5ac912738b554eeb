"""``autograder audit``: for every assignment with an audit bank, each catalogued mistake of each
item loses the item's points and is named, and each correct alternative keeps them, through the
real pipeline; a gap is allowed only where the bank names it, with why, and while it happens."""

import shutil

import pytest

import notebook_tools as tools
from autograder.commands import audit
from autograder.running import sandbox
from autograder.reading.config import load_settings
from autograder.recording.feedback_texts import TEMPLATES, Catalogue
from autograder.reading.course import Course
from autograder.reading.results import ItemResult

BANKS = tools.REPO_ROOT / "autograder" / "checks" / "audit"
pytestmark = pytest.mark.timeout(1500)  # assignment 05's bank: each submission runs its capped calls at T=16384
ASSIGNMENTS = sorted(path.stem for path in BANKS.glob("[0-9]*.py"))


def course_copy(root, assignment: str) -> Course:
    """The assignment's source, release, hidden checks and bank in a course folder of the test's
    own, so that nothing is written into the repository."""
    shutil.copy2(tools.REPO_ROOT / "nbgrader_config.py", root / "nbgrader_config.py")
    for folder in ("source", "release"):
        shutil.copytree(tools.REPO_ROOT / folder / assignment, root / folder / assignment)
    Course(tools.REPO_ROOT).copy_checks(assignment, root, audit_bank=True)
    return Course(root, load_settings(root, workers=2))


@pytest.mark.skipif(sandbox.detect_isolation().name != "bubblewrap", reason="needs bubblewrap")
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_mutant_is_caught_and_named_and_every_alternative_keeps_its_points(assignment, tmp_path):
    course = course_copy(tmp_path, assignment)
    audits, found = audit.run(course, assignment)
    assert all(item.alternatives for item in audits), "every item needs correct alternatives in the bank"
    unexplained = [f"{p.grade_id}: {p.text}" for p in found if not p.known]
    assert not unexplained, "\n".join(unexplained)
    gaps = audit.load_bank(course, assignment, audit.solution_of(course, assignment)[1]).known_gaps
    closed = set(gaps) - {(p.grade_id, p.label) for p in found}
    assert not closed, f"known gaps that no longer happen; take them out of the bank: {sorted(closed)}"
    written = audit.write(course, assignment, audits, found)
    assert "| **all** |" in written["audit"].read_text() and written["figure"].stat().st_size > 0
    assert_the_documentation_shows(assignment, audit.table(audits))


def assert_the_documentation_shows(assignment: str, table: str) -> None:
    """The audit's tables in the documentation are this audit's: the item by item table in
    docs/grading.md, and its whole-assignment row in the README's table of every assignment."""
    assert table in (tools.REPO_ROOT / "docs" / "grading.md").read_text(), \
        f"docs/grading.md does not show the audit of {assignment} as it is now:\n{table}"
    whole = table.splitlines()[-1].replace("| **all** |", f"| `{assignment}` |")
    assert whole in (tools.REPO_ROOT / "README.md").read_text().splitlines(), \
        f"the README's audit table does not hold this row:\n{whole}"


def case(kind: str, label: str, score: float, mistake: str | None = None) -> audit.Case:
    graded = audit.Case(kind, "item", label)
    graded.items = {"item": ItemResult("item", "nb", score, 1.0, "passed" if score else "failed", "why", "",
                                       mistake)}
    return graded


def test_a_missed_mutant_a_wrong_name_a_mistake_charged_twice_and_a_lost_alternative_are_each_a_problem():
    """The audit can fail: what it counts as caught, named, charged once and kept, on made-up results."""
    twice = case("mutant", "no_scaling", 0.0, "scores not scaled by 1/sqrt(d_k)")
    twice.items["later"] = ItemResult("later", "nb", 0.0, 2.0, "failed", "wrong values")
    items = [audit.ItemAudit("item", [case("mutant", "no_scaling", 0.0, "scores not scaled by 1/sqrt(d_k)"),
                                      case("mutant", "softmax_wrong_dim", 1.0),
                                      case("mutant", "mask_filled_with_zero", 0.0, "the boolean mask is inverted"),
                                      twice],
                             [case("alternative", "einsum", 1.0), case("alternative", "loops", 0.0)],
                             [case("library", "by name", 0.0), case("library", "by getattr", 1.0)])]
    items[0].library[0].item.status = "forbidden"
    assert (items[0].caught, items[0].named, items[0].kept, items[0].refused) == (3, 2, 1, 1)
    found = audit.problems(items, {("item", "loops"): "a known gap"})
    assert [(p.label, bool(p.known)) for p in found] == [("softmax_wrong_dim", False),
                                                         ("mask_filled_with_zero", False), ("no_scaling", False),
                                                         ("by getattr", False), ("loops", True)]
    assert "cost later too" in found[2].text and "was not refused" in found[3].text
    assert "| `item` | 3/4 (75%) | 2/4 (50%) | 1/2 (50%) | 1/2 (50%) | 1 |" in audit.table(items)


def test_a_text_not_made_of_the_catalogue_is_a_problem():
    """A check that says what no template says (a run's words, or a sentence written outside the
    catalogue) fails the audit; the catalogue's texts, the course's words and the student's own
    lines do not."""
    texts = Catalogue(TEMPLATES, {"softmax_stable(x)", "output"})
    said = {"kept": "softmax_stable(x): output has shape (2, 3), expected (2, 4).",
            "own line": "ValueError (line 1 of its cell: y = x.exp())",
            "run's words": "softmax_stable(x): output has shape (2, 3), expected LEAK.",
            "written outside": "The output is wrong."}
    cases = []
    for label, message in said.items():
        graded = audit.Case("mutant", "item", label, "y = x.exp()")
        graded.items = {"item": ItemResult("item", "nb", 0.0, 1.0, "failed", message)}
        cases.append(graded)
    found = audit.outside_catalogue([audit.ItemAudit("item", cases, [])], texts, [])
    assert [problem.label for problem in found] == ["run's words", "written outside"]
