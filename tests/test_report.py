"""The instructor's report and the LMS exports, checked against the per-student JSON reports.

They read the reports of the hostile class (the `graded_class` fixture) copied into a course
folder of their own, with one more report whose every string is hostile markup, so nothing is
graded again and the shared course stays as grading left it.
"""

import csv
import json
import re
import shutil
import statistics
from collections import Counter
from html.parser import HTMLParser

import numpy
import pytest

import hostile_class
from autograder.commands.cli import main
from autograder.recording.report import item_statistics, render
from autograder.reading.results import ItemResult, SubmissionResult

A = hostile_class.A
HOSTILE = "=<img src=x onerror=alert(1)>&amp;\"'"  # a folder name: every character a page or a sheet cares about
SCRIPT = "</td><script>alert('mistake')</script> $x^2$"
ALLOWED_TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "b", "img", "table", "tr", "th",
                "td", "ul", "li"}


class Page(HTMLParser):
    """The tags, attributes, text and tables (by id: rows of cell texts) of a page."""

    def __init__(self, html):
        super().__init__(convert_charrefs=True)
        self.tags, self.attrs, self.text, self.tables = [], [], [], {}
        self._table = self._row = None
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs.extend(attrs)
        if tag == "table":
            self._table = self.tables.setdefault(dict(attrs)["id"], [])
        elif tag == "tr":
            self._row = []
            self._table.append(self._row)
        elif tag in ("td", "th"):
            self._row.append("")

    def handle_data(self, data):
        self.text.append(data)
        if self._row is not None and self._row:
            self._row[-1] += data

    def handle_endtag(self, tag):
        if tag == "table":
            self._table = self._row = None


@pytest.fixture(scope="module")
def reported(graded_class, tmp_path_factory):
    """A course folder with the graded class's reports plus a hostile one, after `autograder report`."""
    source, _, _ = graded_class
    root = tmp_path_factory.mktemp("report")
    shutil.copy(source / "nbgrader_config.py", root)
    folder = root / "reports" / A
    folder.mkdir(parents=True)
    for path in (source / "reports" / A).glob("*.json"):
        shutil.copy(path, folder)
    hostile = json.loads((folder / "cy_mistake.json").read_text())
    hostile["student"] = HOSTILE
    hostile["flags"] = [SCRIPT]
    for item in hostile["items"]:
        if item["mistake"]:
            item.update(mistake=SCRIPT, message=SCRIPT, hint=SCRIPT)
    (folder / f"{HOSTILE}.json").write_text(json.dumps(hostile))
    reports = {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}
    assert main(["report", A, "--course", str(root)]) == 0
    return root, reports


def test_page_numbers_are_the_reports_numbers(reported):
    root, reports = reported
    page = Page((root / "reports" / A / "report.html").read_text())
    totals = [r["total"] for r in reports.values()]
    text = "".join(page.text)
    assert (f"{len(reports)} submissions; mean {statistics.mean(totals):.2f}, "
            f"median {statistics.median(totals):.2f} of 10") in text
    items = [i for r in reports.values() for i in r["items"]]
    n, points = len(reports), {i["grade_id"]: i["max_score"] for i in reports["ada_solution"]["items"]}
    passed = Counter(i["grade_id"] for i in items if i["status"] == "passed")
    mean = {g: sum(i["score"] for i in items if i["grade_id"] == g) / n for g in points}
    assert page.tables["items"][1:] == [[g, f"{points[g]:g}", f"{passed[g]}/{n}", f"{100 * passed[g] / n:.0f}%",
                                         f"{mean[g]:.2f}"] for g in points]  # in the assignment's order
    mistakes = Counter(m for r in reports.values() for m in {i["mistake"] for i in r["items"] if i["mistake"]})
    assert {m: int(c) for m, c in page.tables["mistakes"][1:]} == mistakes and SCRIPT in mistakes  # per student

    def outcome(item):   # a failed item whose answer still raises NotImplementedError was not attempted
        return "not attempted" if item["status"] == "failed" and item["message"].startswith("Not written yet") \
            else item["status"]
    statuses = Counter(outcome(i) for i in items)
    assert statuses["not attempted"] and statuses["failed"]
    hit = Counter(s for r in reports.values() for s in {outcome(i) for i in r["items"]})
    assert {s: (int(c), int(k)) for s, c, k in page.tables["statuses"][1:]} == {s: (statuses[s], hit[s]) for s in hit}
    assert [row[0] for row in page.tables["flags"][1:]] == [r["student"] for r in reports.values() if r["flags"]]


def test_page_is_inert_and_shows_hostile_strings_as_text(reported):
    root, _ = reported
    html = (root / "reports" / A / "report.html").read_text()
    page = Page(html)
    assert set(page.tags) <= ALLOWED_TAGS and page.tags.count("img") == 3
    assert not [name for name, _ in page.attrs if name.startswith("on")]
    assert all(value.startswith("data:image/png;base64,") for name, value in page.attrs if name == "src")
    assert ("http-equiv", "Content-Security-Policy") in page.attrs
    assert page.text.count(HOSTILE) == 1 and page.text.count(SCRIPT) == 2  # as whole texts: mistake and flag
    assert "<script" not in html.lower() and "<img src=x" not in html


def test_scores_csv_is_a_row_per_student_and_a_column_per_item(reported):
    root, reports = reported
    rows = list(csv.DictReader((root / "reports" / A / "scores.csv").open(newline="")))
    order = [i["grade_id"] for i in reports["ada_solution"]["items"]]
    assert list(rows[0]) == ["student", "total", "max_total", "late_penalty", "waiting", *order]   # no written answers
    assert [row["student"] for row in rows] == [("'" if s == HOSTILE else "") + s for s in reports]  # not a formula
    for row, r in zip(rows, reports.values()):
        assert float(row["total"]) == r["total"] and float(row["max_total"]) == r["max_total"]
        assert row["late_penalty"] == row["waiting"] == "0"   # the gradebook holds no submission of these reports
        assert {g: float(row[g]) for g in order} == {i["grade_id"]: i["score"] for i in r["items"]}


def test_gradescope_results_per_submission(reported):
    root, reports = reported
    for student, r in reports.items():
        results = json.loads((root / "reports" / A / "gradescope" / student / "results.json").read_text())
        assert results["score"] == r["total"] == sum(t["score"] for t in results["tests"])
        assert [(t["name"], t["score"], t["max_score"]) for t in results["tests"]] == [
            (i["grade_id"], i["score"], i["max_score"]) for i in r["items"]]
        assert [t["status"] for t in results["tests"]] == [
            "passed" if i["status"] == "passed" else "failed" for i in r["items"]]
    causal = json.loads((root / "reports" / A / "gradescope" / "cy_mistake" / "results.json").read_text())["tests"][5]
    item = reports["cy_mistake"]["items"][5]
    assert causal["name"] == "causal_attention" and causal["output"].startswith("[failed] 0/1 points.")
    assert item["message"] in causal["output"] and f"Hint ({item['mistake']}): {item['hint']}" in causal["output"]


def test_without_reports_it_says_to_grade_first(tmp_path, capsys):
    shutil.copy(hostile_class.REPO / "nbgrader_config.py", tmp_path)
    shutil.copytree(hostile_class.REPO / "release" / A, tmp_path / "release" / A)   # released, not graded
    assert main(["report", A, "--course", str(tmp_path)]) == 1
    assert f"run `autograder grade {A}` first" in capsys.readouterr().out
    assert not (tmp_path / "reports" / A / "report.html").exists()


def tiny_class(versions=("v1",) * 5):
    """Five students, four items: a discriminates, b and c run against the rest, everyone passes d."""
    scores = {"a": [1, 1, 0, 0, 1], "b": [1, 0, 1, 0, 1], "c": [2, 2, 0, 2, 0], "d": [1] * 5}
    mistakes = {("a", 2): "m2", ("b", 1): "m", ("b", 3): "m"}
    results = []
    for s, version in enumerate(versions):
        items = [ItemResult(g, "nb", scores[g][s], 2 if g == "c" else 1,
                            "passed" if scores[g][s] else "failed", "message", mistake=mistakes.get((g, s)))
                 for g in scores]
        results.append(SubmissionResult(f"s{s}", A, sum(i.score for i in items), 5, items=items,
                                        checks_version=version))
    return scores, results


def test_item_statistics_match_numbers_by_hand():
    scores, results = tiny_class()
    totals = numpy.sum([scores[g] for g in scores], axis=0)
    stats = {s.grade_id: s for s in item_statistics(results)}
    for g in "abc":
        expected = numpy.corrcoef(scores[g], totals - numpy.array(scores[g]))[0, 1]
        assert stats[g].discrimination == pytest.approx(expected)
    assert stats["a"].discrimination == pytest.approx(0.327327, abs=1e-6) and not stats["a"].suspect
    assert stats["b"].suspect and stats["c"].suspect
    assert stats["d"].discrimination is None and not stats["d"].suspect  # nobody differs: undefined, not suspect
    assert [stats[g].pass_rate for g in "abcd"] == [0.6, 0.6, 0.6, 1.0]
    assert (stats["a"].mistakes, stats["b"].mistakes, stats["c"].mistakes) == ([("m2", 0.2)], [("m", 0.4)], [])


def test_page_shows_item_statistics_and_marks_suspect_checks():
    _, results = tiny_class()
    html = render(A, results)
    page = Page(html)
    assert page.tables["item-statistics"] == [
        ["item", "pass rate", "discrimination", "named mistakes (share of students)"],
        ["a", "60%", "0.33", "20% m2"], ["b", "60%", "-0.49", "40% m"], ["c", "60%", "-0.33", ""],
        ["d", "100%", "n/a", ""]]
    assert re.findall(r'<tr class="suspect"><td>([^<]*)</td>', html) == ["b", "c"]
    assert "this check may be suspect" in "".join(page.text)
    assert "All submissions were graded with hidden checks v1." in "".join(page.text)


def test_page_says_when_the_class_was_graded_with_different_checks():
    _, results = tiny_class(("v2", "v2", "v2", "v1", ""))
    text = " ".join("".join(Page(render(A, results)).text).split())
    assert ("graded with different versions of the hidden checks: v2 (3 submissions), v1 (1 submission), "
            f"unrecorded (1 submission). autograder grade {A} --regrade") in text


def test_reported_page_has_the_item_statistics_of_its_reports(reported):
    root, reports = reported
    page = Page((root / "reports" / A / "report.html").read_text())
    results = [SubmissionResult.from_json(r) for r in reports.values()]
    assert [row[:3] for row in page.tables["item-statistics"][1:]] == [
        [s.grade_id, f"{100 * s.pass_rate:.0f}%", "n/a" if s.discrimination is None else f"{s.discrimination:.2f}"]
        for s in item_statistics(results)]
