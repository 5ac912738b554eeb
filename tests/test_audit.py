"""``autograder audit``: for every assignment with an audit bank, each catalogued mistake of each
item loses the item's points and is named, each correct alternative keeps them, and each hidden
check is needed by some mistake (without it, a mutant would keep its points), through the real
pipeline; a gap is allowed only where the bank names it, with why, and while it happens. The
README's and docs/grading.md's audit tables are what the audit writes."""

import fcntl
import os
import pty
import shutil
import struct
import subprocess
import sys
import termios

import pytest

import notebook_tools as tools
from autograder.commands import audit, audit_tables
from autograder.running import sandbox
from autograder.reading.config import load_settings
from autograder.recording.feedback_texts import TEMPLATES, Catalogue
from autograder.reading.course import Course
from autograder.reading.errors import GradingError
from autograder.reading.results import ItemResult
from autograder.reading.spec import Also, Item
from transformer_lm.instructor.kinds import ParametersCheck, RaisesCheck

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
    assert all(item.checks for item in audits), "every item has a graded check"
    unexplained = [f"{p.grade_id}: {p.text}" for p in found if not p.known]  # a check no mutant needs is one
    assert not unexplained, "\n".join(unexplained)
    gaps = audit.load_bank(course, assignment, audit.solution_of(course, assignment)[1]).known_gaps
    closed = set(gaps) - {(p.grade_id, p.label) for p in found}
    assert not closed, f"known gaps that no longer happen; take them out of the bank: {sorted(closed)}"
    written = audit.write(course, assignment, audits, found)
    assert "| **all** |" in written["audit"].read_text() and written["figure"].stat().st_size > 0
    stale = audit_tables.stale(tools.REPO_ROOT, assignment, audit.table(audits))
    assert not stale, (f"{', '.join(p.name for p in stale)} do not show this audit of {assignment}: run "
                       f"`autograder audit {assignment} --tables` in the repository\n{audit.table(audits)}")


ONE_ITEM_SHORT = """
import importlib.util

spec = importlib.util.spec_from_file_location("full_bank", {path!r})
full = importlib.util.module_from_spec(spec)
spec.loader.exec_module(full)


def mutants(answer):
    every = full.mutants(answer)
    return {{item: {{"softmax_wrong_dim": every[item]["softmax_wrong_dim"]}}
             for item in ("softmax_stable", "context_vectors")}}


def alternatives(answer):
    return {{}}
"""


def run_on_a_terminal(command: list[str]) -> tuple[int, str, str]:
    """Runs ``command`` with its stderr on a terminal, as a TA's would be (a progress bar draws only
    there): its exit status, stdout and what the terminal showed."""
    terminal, its_end = pty.openpty()
    fcntl.ioctl(its_end, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a new terminal is 0 wide
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=its_end, cwd=tools.REPO_ROOT)
    os.close(its_end)
    shown = b""
    while True:
        try:
            chunk = os.read(terminal, 4096)
        except OSError:  # the command has ended and closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    os.close(terminal)
    out = process.stdout.read().decode()
    return process.wait(timeout=60), out, shown.decode(errors="replace")


@pytest.mark.skipif(sandbox.detect_isolation().name != "bubblewrap", reason="needs bubblewrap")
def test_a_check_no_mutant_needs_fails_the_audit_and_is_named(tmp_path):
    """Without the naive softmax's overflow, the check at scores in the hundreds (softmax_stable's
    second) is needed by no mutant: the softmax over the wrong dimension fails the first check too.
    ``autograder audit`` fails and names that check; context_vectors' first check, which its mutant
    fails alone, is needed. It shows its progress on the terminal as ``autograder grade`` does.
    (A bank of two mutants, so that it grades two submissions, not the whole bank.)"""
    course_copy(tmp_path, "01_attention_basics")
    bank = tmp_path / "autograder" / "checks" / "audit" / "01_attention_basics.py"
    full = tmp_path / "full_bank.py"
    shutil.copy2(bank, full)
    bank.write_text(ONE_ITEM_SHORT.format(path=str(full)))
    status, out, shown = run_on_a_terminal([sys.executable, "-m", "autograder.commands.cli", "audit",
                                            "01_attention_basics", "--course", str(tmp_path), "--workers", "2"])
    assert status == 1, out + shown
    assert ("- `softmax_stable`: no mistake of the bank needs check 2 of softmax_stable (CallCheck of "
            "softmax_stable)") in out
    assert "needs check 1 of context_vectors" not in out and "needs check 2 of context_vectors" in out
    assert "| `softmax_stable` | 1/1 (100%) | 1/1 (100%) | 0/2 (0%) |" in out
    assert "| `context_vectors` | 1/1 (100%) | 1/1 (100%) | 1/2 (50%) |" in out
    assert "grading the audit bank of 01_attention_basics" in shown and "2/2" in shown, shown


def test_the_tables_go_between_their_markers_and_a_second_write_changes_nothing(tmp_path):
    """``--tables`` writes an assignment's whole row into the README's table, in the order of the
    assignments, and its table into docs/grading.md, each between its marker lines; a file
    without them is refused with a sentence that says what to add."""
    (tmp_path / "docs").mkdir()
    for name in (audit_tables.README, audit_tables.GRADING):
        shutil.copy2(tools.REPO_ROOT / name, tmp_path / name)
    table = "| item | a |\n|---|---|\n| `x` | 1/2 (50%) |\n| **all** | 1/2 (50%) |"
    both = [tmp_path / audit_tables.README, tmp_path / audit_tables.GRADING]
    assert audit_tables.write(tmp_path, "02_multihead_attention", table) == both
    assert audit_tables.write(tmp_path, "02_multihead_attention", table) == []
    readme = (tmp_path / "README.md").read_text().split("\n")
    start = readme.index(audit_tables.README_MARKERS[0])
    assert readme[start + 1:start + 4] == ["| assignment | a |", "|---|---|", readme[start + 3]]
    assert readme[start + 3].startswith("| `01_attention_basics` |")
    assert readme[start + 4] == "| `02_multihead_attention` | 1/2 (50%) |"
    assert f"{audit_tables.grading_markers('02_multihead_attention')[0]}\n{table}\n<!--" in \
        (tmp_path / audit_tables.GRADING).read_text()
    (tmp_path / "README.md").write_text("no markers")
    with pytest.raises(GradingError, match="README.md needs the line"):
        audit_tables.write(tmp_path, "02_multihead_attention", table)


def test_tables_outside_the_repository_are_refused_before_the_audit_runs(tmp_path):
    """A course folder without the README is told so, with exit status 2, at once."""
    course_copy(tmp_path, "01_attention_basics")
    done = subprocess.run([sys.executable, "-m", "autograder.commands.cli", "audit", "01_attention_basics",
                           "--tables", "--course", str(tmp_path)], capture_output=True, text=True, timeout=120,
                          cwd=tools.REPO_ROOT)
    assert done.returncode == 2, done.stderr
    assert f"No README.md in {tmp_path}" in done.stderr and "Traceback" not in done.stderr


def case(kind: str, label: str, score: float, mistake: str | None = None, failed: list[int] = ()) -> audit.Case:
    graded = audit.Case(kind, "item", label)
    graded.items = {"item": ItemResult("item", "nb", score, 1.0, "passed" if score else "failed", "why", "",
                                       mistake, failed_checks=list(failed))}
    return graded


def test_a_missed_mutant_a_wrong_name_a_mistake_charged_twice_and_a_lost_alternative_are_each_a_problem():
    """The audit can fail: what it counts as caught, named, charged once and kept, on made-up results."""
    twice = case("mutant", "no_scaling", 0.0, "scores not scaled by 1/sqrt(d_k)")
    twice.items["later"] = ItemResult("later", "nb", 0.0, 2.0, "failed", "wrong values")
    items = [audit.ItemAudit("item", [case("mutant", "no_scaling", 0.0, "scores not scaled by 1/sqrt(d_k)", [1]),
                                      case("mutant", "softmax_wrong_dim", 1.0),
                                      case("mutant", "mask_filled_with_zero", 0.0, "the boolean mask is inverted",
                                           [0, 1]),
                                      twice],
                             [case("alternative", "einsum", 1.0), case("alternative", "loops", 0.0)],
                             [case("library", "by name", 0.0), case("library", "by getattr", 1.0)],
                             {0: "CallCheck of f", 1: "CallCheck of f", 2: "CallCheck of f"})]
    items[0].library[0].item.status = "forbidden"
    assert (items[0].caught, items[0].named, items[0].kept, items[0].refused) == (3, 2, 1, 1)
    found = audit.problems(items, {("item", "loops"): "a known gap"})
    assert [(p.label, bool(p.known)) for p in found] == [("softmax_wrong_dim", False),
                                                         ("mask_filled_with_zero", False), ("no_scaling", False),
                                                         ("by getattr", False), ("loops", True)]
    assert "cost later too" in found[2].text and "was not refused" in found[3].text
    assert items[0].needed == {1}, "a check is needed by the mutant that failed it alone"
    unneeded = audit.unneeded_checks(items, {("item", "check 3"): "a known gap"})
    assert [(p.label, bool(p.known)) for p in unneeded] == [("check 1", False), ("check 3", True)]
    assert "no mistake of the bank needs check 1 of item (CallCheck of f)" in unneeded[0].text
    assert "| `item` | 3/4 (75%) | 2/4 (50%) | 1/3 (33%) | 1/2 (50%) | 1/2 (50%) | 1 |" in audit.table(items)


def test_the_cases_of_one_check_are_counted_and_needed_as_one_check():
    """A case wrapped in ``Also`` belongs to the check before it: the item numbers it with that
    check, and the audit lists the check once, as the kind of its first case."""
    sizes = [{"input_size": 4, "hidden": hidden, "num_heads": 4} for hidden in (10, 6, 9)]
    item = Item("item", points=1, checks=(RaisesCheck("A", sizes[0]), Also(RaisesCheck("A", sizes[1])),
                                          ParametersCheck("A", sizes[2], {"q.weight": (9, 4)})))
    assert item.check_numbers == [0, 0, 1]
    assert audit.graded_checks(item) == {0: "RaisesCheck of A", 1: "ParametersCheck of A"}


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
