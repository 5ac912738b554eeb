"""`autograder grade --regrade`: after the hidden checks change, only the reports graded with
other checks are graded again, and changes.csv says who gained or lost what, and why.

The demo's class of assignment 01 is graded, then its course's hidden checks change in two
ways whose effect is certain: softmax_stable expects ``softmax + 1``, which no answer gives
(ada_solution and cy_mistake lose its point), and causal_attention keeps only a single-token
case, where softmax over dim=1 (cy_mistake's mistake) and over the last dim agree (cy_mistake
gains its point, and loses the wrapper's: graded with the course's CausalAttention while its own
failed, the wrapper is now graded on its own, whose mistake it shows). bo_blank and dee_cheater
fail both items before and after.
"""

import contextlib
import csv
import io
import json

import pytest

import notebook_tools as tools
from autograder.commands import demo
from autograder.running import sandbox
from autograder.commands.cli import main
from autograder.reading.course import Course, checks_version
from autograder.recording.regrade import compare
from autograder.reading.results import ItemResult, SubmissionResult

A = demo.ASSIGNMENT
MISTAKE = "softmax over the wrong dimension"
CHANGED_CHECKS = '''

# The test's change of the hidden checks (tests/test_regrade.py).
import dataclasses

import torch

from transformer_lm.instructor import adapters
from transformer_lm.instructor.cases import AttentionCase
from transformer_lm.instructor.kinds import AttentionCheck, CallCheck

NOBODY_PASSES = (CallCheck("softmax_stable", lambda x: torch.softmax(x, dim=-1) + 1,
                           lambda g: {"x": torch.randn(4, 9, generator=g)}),)
ONE_TOKEN = (AttentionCheck("CausalAttention", adapters.CAUSAL_ATTENTION,
                            AttentionCase(batch=2, seq=1, d_in=3, d_out=2, causal=True, bias=True)),)
CHANGED = {"softmax_stable": NOBODY_PASSES, "causal_attention": ONE_TOKEN}
ITEMS = [dataclasses.replace(item, checks=CHANGED.get(item.grade_id, item.checks)) for item in ITEMS]
'''


def run(*argv) -> str:
    """What ``autograder`` prints (the progress bar goes to stderr)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(argv)) == 0
    return out.getvalue()


@pytest.fixture(scope="module")
def regraded(tmp_path_factory):
    """The demo course graded, its checks changed, then regraded: the course folder, the two
    versions, and what the regrade printed. bo_blank's report is deleted before the regrade (a
    submission never graded) and dee_cheater's loses its version (a report from before versions)."""
    if sandbox.detect_isolation().name != "bubblewrap":
        pytest.skip(f"needs bubblewrap: {sandbox.detect_isolation().detail}")
    root = tmp_path_factory.mktemp("regrade")
    demo.build_course(root)
    tools.grade_course(root, A, workers=2)
    course = Course(root)
    old = checks_version(course, A)
    with course.checks_file(A).open("a") as f:
        f.write(CHANGED_CHECKS)
    reports = course.reports(A)
    (reports / "bo_blank.json").unlink()
    dee = json.loads((reports / "dee_cheater.json").read_text())
    del dee["checks_version"]
    (reports / "dee_cheater.json").write_text(json.dumps(dee))
    printed = run("grade", A, "--regrade", "--workers", "2", "--course", str(root))
    return root, old, checks_version(course, A), printed


def test_changes_csv_lists_exactly_the_changed_items(regraded):
    root, _, _, _ = regraded
    rows = list(csv.DictReader((root / "reports" / A / "changes.csv").open(newline="")))
    assert [(r["student"], r["grade_id"], r["old_score"], r["new_score"], r["old_status"], r["new_status"])
            for r in rows] == [("ada_solution", "softmax_stable", "1", "0", "passed", "failed"),
                               ("cy_mistake", "softmax_stable", "1", "0", "passed", "failed"),
                               ("cy_mistake", "causal_attention", "0", "1", "failed", "passed"),
                               ("cy_mistake", "multihead_wrapper", "1", "0", "passed", "failed")]
    assert rows[2]["old_mistake"] == MISTAKE and rows[2]["new_message"] == "All hidden checks passed."
    assert all(r["new_message"] for r in rows)


def test_regrade_prints_who_gained_or_lost_what_and_why(regraded):
    _, _, new, printed = regraded
    assert (f"Regraded 4 submissions of {A} with hidden checks {new} (1 without an earlier report); "
            "0 were current and skipped.") in printed
    assert "\nada_solution: -1 point\n  softmax_stable: 1 (passed) -> 0 (failed): " in printed
    assert ("\ncy_mistake: -1 point\n  softmax_stable: 1 (passed) -> 0 (failed): " in printed
            and "\n  causal_attention: 0 (failed) -> 1 (passed): All hidden checks passed.\n" in printed)
    assert "bo_blank:" not in printed.split("skipped.")[1] and "dee_cheater:" not in printed.split("skipped.")[1]


def test_regrade_records_the_new_grades_with_their_version(regraded):
    root, old, new, _ = regraded
    assert old != new
    reports = {p.stem: json.loads(p.read_text()) for p in (root / "reports" / A).glob("*.json")}
    assert {s: r["checks_version"] for s, r in reports.items()} == dict.fromkeys(
        ["ada_solution", "bo_blank", "cy_mistake", "dee_cheater"], new)
    totals = {s: r["total"] for s, r in reports.items()}
    assert totals == {"ada_solution": 9, "bo_blank": 0, "cy_mistake": 8, "dee_cheater": 0}
    grades = {(r["student"], r["grade_id"]): r["score"]
              for r in csv.DictReader((root / "reports" / A / "grades.csv").open(newline=""))}
    assert grades[("ada_solution", "softmax_stable")] == "0.0" and grades[("cy_mistake", "causal_attention")] == "1"


def test_a_second_regrade_regrades_nobody(regraded):
    root, _, new, _ = regraded
    before = (root / "reports" / A / "changes.csv").read_text()
    printed = run("grade", A, "--regrade", "--course", str(root))
    assert printed.strip() == (f"Every report of {A} was graded with the current hidden checks ({new}): "
                               "nothing to regrade (4 skipped).")
    assert (root / "reports" / A / "changes.csv").read_text() == before


def test_report_names_the_version(regraded):
    root, _, new, _ = regraded
    run("report", A, "--course", str(root))
    assert f"All submissions were graded with hidden checks <b>{new}</b>." in (
        root / "reports" / A / "report.html").read_text()


def item(grade_id, score, status="passed", mistake=None):
    return ItemResult(grade_id, "nb", score, 1.0, status, "message", mistake=mistake)


def test_compare_counts_items_only_one_side_has_and_students_without_a_report():
    old = {"a": SubmissionResult("a", A, 1, 2, items=[item("x", 1), item("gone", 0, "failed")])}
    new = [SubmissionResult("a", A, 1, 2, items=[item("x", 1), item("added", 0, "failed")]),
           SubmissionResult("b", A, 0, 2, items=[item("x", 0, "failed")])]
    outcome = compare("v2", ["a", "b", "c"], old, new)
    assert (outcome.regraded, outcome.skipped, outcome.first) == (["a", "b"], ["c"], ["b"])
    assert [(c.student, c.grade_id, c.old is None, c.new is None) for c in outcome.changes] == [
        ("a", "added", True, False), ("a", "gone", False, True)]


def test_reports_from_before_versions_still_load():
    data = SubmissionResult("a", A, 1, 1, items=[item("x", 1)]).to_json()
    del data["checks_version"]
    assert SubmissionResult.from_json(data).checks_version == ""


def test_stored_values_written_again_unchanged_keep_the_checks_version(tmp_path):
    """safetensors writes a header's metadata in an order of its own: the same values stored again
    must not read as new checks (every report out of date), while a changed value must."""
    import torch
    from safetensors.torch import save_file

    from autograder.reading.course import content_digest

    values, metadata = {"a": torch.arange(4.0), "b": torch.ones(2, 3)}, {"seed": "2024", "made_by": "a script"}
    save_file(values, tmp_path / "one.safetensors", metadata=metadata)
    save_file(values, tmp_path / "two.safetensors", metadata=dict(reversed(list(metadata.items()))))
    save_file({**values, "a": torch.arange(4.0) + 1}, tmp_path / "changed.safetensors", metadata=metadata)
    digests = [content_digest(tmp_path / f"{name}.safetensors") for name in ("one", "two", "changed")]
    assert digests[0] == digests[1] != digests[2]
