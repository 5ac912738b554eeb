"""Similar answers: a class of assignment 01 (tests/similarity_class.py) compared with the real tools,
read as data (nothing is graded or run); its page in a real browser; and what students never see.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import sys

import pytest
from copydetect.utils import filter_code

import browser_tools
import notebook_tools as tools
import similarity_class as sc
from autograder.commands.cli import main
from autograder.reading.course import Course
from autograder.commands.demo import make_course
from autograder.recording.fingerprints import K, fingerprint
from autograder.reading.notebook_data import read_notebook
from autograder.reading.results import ItemResult, SubmissionResult, write_report
from autograder.recording.similarity import CLASSMATE, PUBLIC, REFERENCE, code_answer_cells
from autograder.recording.similarity_report import write_similarity

A, NB = sc.A, sc.NB
ARTIFACTS = tools.REPO_ROOT / "artifacts" / "similarity"
CAUSAL = "causal_attention"


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("similarity")
    sc.write_class(root)
    return Course(root)


@pytest.fixture(scope="module")
def written(course):
    """The class's similarity report, written as ``autograder similarity`` writes it."""
    return write_similarity(course, A)


def cell(written, name):
    return next(c for c in written.result.cells if c.cell == name)


def starter(name):
    data, _ = read_notebook(tools.REPO_ROOT / "release" / A / NB)
    return code_answer_cells(data["cells"])[name]


def test_three_students_sharing_an_answer_under_renames_and_reorderings_are_one_group(written):
    causal = cell(written, CAUSAL)
    assert sc.GROUP in causal.groups
    among = {(p.a.owner, p.b.owner): p.similarity for p in causal.pairs if p.b.source == CLASSMATE}
    assert among[("ann", "ben")] == 1.0   # renamed and reordered: the same code
    assert among[("ann", "cat")] >= 0.7 and among[("ben", "cat")] >= 0.7   # cat also wrote the mask in one line
    assert not any(p.weak for p in causal.pairs if p.a.owner in sc.GROUP)


def test_the_reference_with_renamed_variables_is_similar_to_the_reference(written):
    causal = cell(written, CAUSAL)
    to_reference = {p.a.owner: p.similarity for p in causal.pairs if p.b.source == REFERENCE}
    assert to_reference == {"rex": 1.0, sc.HOSTILE: 1.0}   # and the student who copied rex's answer
    assert [sorted(["rex", sc.HOSTILE])] == [g for g in causal.groups if "rex" in g]
    assert causal.closest["rex"].b.source == REFERENCE   # a tie goes to the reference, which explains it


def test_independent_answers_in_different_styles_are_not_similar(written):
    causal = cell(written, CAUSAL)
    assert {p.b.owner for p in causal.pairs} | {p.a.owner for p in causal.pairs} == {*sc.GROUP, "rex", sc.HOSTILE,
                                                                                     REFERENCE}
    for student in sc.INDEPENDENT:   # einsum, loops, torch.matmul with a tril mask
        closest = causal.closest.get(student)
        assert closest is None or closest.similarity < 0.1, (student, closest.b.owner, closest.similarity)
    public = next(o for o in causal.others if o.source == PUBLIC)   # the book chapter's style, written for us
    assert public.owner == "book_chapter_style.py" and causal.count(PUBLIC) == 0


def test_starter_code_shared_by_all_never_counts(written):
    assert not fingerprint(starter(CAUSAL), starter(CAUSAL)).hashes   # the release's cell holds nothing to compare
    for c in written.result.cells:
        assert not {a.owner for a in c.answers} & set(sc.BLANK)   # a blank answer is compared with nobody
    assert [c.cell for c in written.result.cells if c.answers] == ["softmax_stable", CAUSAL]
    given = {line.strip() for line in starter(CAUSAL).splitlines() if line.strip()}
    page = written.page.read_text()
    for marked in re.findall(r"<mark>(.*?)</mark>", page, re.S):
        assert marked.strip() not in given   # no line of the release is ever marked as a match


def test_reordered_statements_give_the_same_fingerprint(written):
    """Winnowing keeps matches inside statements; once names are one letter, most statements here
    are shorter than a k-gram, so a reordering loses the k-grams that span them. In written order,
    ben's forward shares 70% of its k-grams with ann's; in canonical order, everything."""
    ann, ben = (source.split(sc.FORWARD)[1] for source in (sc.ANN, sc.BEN))
    grams = [{text[i:i + K] for i in range(len(text) - K + 1)}
             for text in (filter_code(ann, "a.py", "python")[0], filter_code(ben, "b.py", "python")[0])]
    assert 2 * len(grams[0] & grams[1]) / (len(grams[0]) + len(grams[1])) < 0.75
    assert fingerprint(sc.ANN, starter(CAUSAL)).hashes == fingerprint(sc.BEN, starter(CAUSAL)).hashes


def test_an_answer_deeper_than_python_parses_is_compared_as_written_or_left_out_when_too_long(written):
    """The similarity report (and the class report, which runs it) reads every answer: one that
    Python's parser refuses is compared as written, and one too long to compare in a second is left
    out with a note, never a crash."""
    notes = "\n".join(written.result.notes)
    assert f"{sc.UNPARSABLE}: the answer causal_attention holds 4" in notes and "more than 50,000" in notes
    assert f"{sc.UNPARSABLE}: the answer softmax_stable" not in notes


@pytest.mark.parametrize("source", [
    "y = " + "(" * 5000 + "1" + ")" * 5000,                    # more parentheses than Python allows
    "z = [" + "0, " * 10_000 + "]\n",                          # a long literal
    "w = 'caf\u00e9'\nfor i in range(3):\n    w = w + w.upper()\n\x00",   # a null byte
])
def test_an_answer_python_cannot_parse_is_fingerprinted_as_written(source):
    found = fingerprint(source)
    assert found.size > 0 and found.hashes


def test_fingerprints_are_the_same_in_every_process():
    """copydetect's own k-gram hash is Python's, salted anew in each process; ours is the same in
    every process, so a report repeats."""
    script = ("import io, sys; from copydetect import CodeFingerprint; "
              "from autograder.recording.fingerprints import fingerprint; "
              "text = sys.stdin.read(); print(sorted(fingerprint(text).hashes)); "
              "print(sorted(CodeFingerprint('a.py', 25, 6, fp=io.StringIO(text)).hashes))")
    ours, theirs = zip(*(subprocess.run([sys.executable, "-c", script], input=sc.ANN, capture_output=True, text=True,
                                        check=True, env={**os.environ, "PYTHONHASHSEED": seed}).stdout.splitlines()
                         for seed in ("1", "2")))
    assert ours[0] == ours[1] and len(ours[0]) > 100
    assert theirs[0] != theirs[1]


def test_short_answers_are_shown_as_weak_evidence(written):
    softmax = cell(written, "softmax_stable")
    assert softmax.pairs and all("short answer" in p.weak for p in softmax.pairs)
    assert sc.GROUP in softmax.groups   # shown all the same
    page = written.page.read_text()
    assert "Weak evidence: a short answer" in page


def test_unreadable_notebooks_are_left_out_with_a_note(written):
    notes = "\n".join(written.result.notes)
    assert "zed: attention_basics.ipynb was not compared. The notebook is not valid JSON" in notes
    assert "yan" not in notes   # its metadata is repaired as it is read; blank, it matches no one
    assert not any("yan" in (p.a.owner, p.b.owner) for result in written.result.cells for p in result.pairs)
    assert len(written.result.students) == 13


def test_csv_has_a_row_per_student_and_three_columns_per_answer_cell(written):
    rows = {row["student"]: row for row in csv.DictReader(written.csv.open(newline=""))}
    students = {*sc.CAUSAL, *sc.BLANK, "zed", "yan", sc.UNPARSABLE} - {sc.HOSTILE}
    assert set(rows) == students | {"'" + sc.HOSTILE}  # not a formula
    assert rows["ben"]["causal_attention_similarity"] == "1.00" and rows["ben"]["causal_attention_with"] == "ann"
    assert rows["rex"]["causal_attention_with"] == "the course's reference"
    assert rows["ann"]["answers_at_or_above_threshold"] == "2" and rows["kim"]["answers_at_or_above_threshold"] == "0"
    assert rows["ann"]["softmax_stable_weak_evidence"].startswith("a short answer")
    assert rows["bo"]["causal_attention_similarity"] == "" and rows["kim"]["causal_attention_similarity"] == "0.00"
    header = next(csv.reader(written.csv.open(newline="")))
    assert header[2:5] == ["softmax_stable_similarity", "softmax_stable_with", "softmax_stable_weak_evidence"]


def test_the_page_says_similar_and_never_more(written):
    text = re.sub(r"<[^>]+>", " ", written.page.read_text()).lower()
    assert "similar" in text
    for verdict in ("cheat", "plagiar", "guilty", "dishonest", "misconduct"):
        assert verdict not in text


def test_command_line(course, capsys, tmp_path):
    root = tmp_path / "copy"   # the shared course keeps its page, at the default threshold
    shutil.copytree(course.root, root)
    assert main(["similarity", A, "--course", str(root), "--threshold", "0.9"]) == 0
    out = capsys.readouterr().out
    assert "causal_attention: 2 with a classmate, 2 with the reference, 0 with public code (0 weak evidence); " \
           "groups of 2, 2 students" in out   # cat (0.74) falls below 0.9
    assert "Note: zed: attention_basics.ipynb was not compared." in out
    assert main(["similarity", "01_attention", "--course", str(root)]) == 2
    assert "has no assignment '01_attention'. Did you mean 01_attention_basics?" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    make_course(empty, A, generate=False)
    assert main(["similarity", A, "--course", str(empty)]) == 1
    assert f"No submissions of {A}" in capsys.readouterr().out
    assert not (empty / "reports").exists()


def test_the_report_has_a_section_and_feedback_pages_never_show_similarity(course, tmp_path):
    """After grading (here, reports written as grading writes them), ``autograder report`` writes the
    similarity report and a section that counts its pairs; the feedback pages students get are the
    same, byte for byte, before and after, and say nothing of it."""
    root = tmp_path / "graded"
    shutil.copytree(course.root, root)
    readable, graded = [*sc.CAUSAL, *sc.BLANK], Course(root)
    for student in readable:
        item = ItemResult(CAUSAL, "attention_basics", 1.0, 1.0, "passed", "Correct.", answer=CAUSAL)
        write_report(graded, SubmissionResult(student, A, 1.0, 1.0, items=[item]))
        folder = root / "autograded" / student / A
        folder.mkdir(parents=True)
        shutil.copy(root / "submitted" / student / A / NB, folder / NB)

    def feedback_pages():
        assert main(["feedback", A, "--course", str(root)]) == 0
        return {s: (root / "feedback" / s / A / "attention_basics.html").read_text() for s in readable}

    before = feedback_pages()
    assert main(["report", A, "--course", str(root)]) == 0
    report = (root / "reports" / A / "report.html").read_text()
    assert "<h2>Similar answers</h2>" in report and "<b>similarity.html</b>" in report
    assert '<tr><td>causal_attention</td><td class="n">6</td><td class="n">4</td><td class="n">2</td>' in report
    assert (root / "reports" / A / "similarity.html").exists() and (root / "reports" / A / "similarity.csv").exists()
    assert feedback_pages() == before
    assert "def forward" in before["ann"] and not any("similar" in page.lower() for page in before.values())


def test_page_in_a_real_browser(written):
    """The page as a TA opens it: pairs highest first per cell, the two answers side by side with the
    matches marked, weak evidence marked, a hostile student id and answer shown as text, nothing active."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with browser_tools.chromium() as browser:
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        errors = []
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        try:
            page.goto(written.page.as_uri())
            causal = page.locator(f"section.pair[id^='pair-{CAUSAL}-']")
            headings = causal.locator("h3").all_inner_texts()
            scores = [float(h.rsplit(" ", 1)[1]) for h in headings]
            assert scores == sorted(scores, reverse=True) and len(scores) == 6
            first = causal.filter(has_text="ann and ben: similarity 1.00")
            assert first.locator(".sides > div").count() == 2
            assert first.locator("pre").first.bounding_box()["x"] < first.locator("pre").last.bounding_box()["x"]
            marked = first.locator("mark").all_inner_texts()
            assert "torch.bmm(self.dropout(att), v)" in " ".join(marked) and "def forward" not in " ".join(marked)
            assert first.locator("mark").first.evaluate("m => getComputedStyle(m).backgroundColor") != "rgba(0, 0, 0, 0)"
            assert page.locator(f"#groups-{CAUSAL}").inner_text().startswith("Similar answers of 3 students: ann, ben, cat")
            weak = page.locator("section.pair.weak .weak-evidence")
            assert weak.count() == 6 and "a short answer" in weak.first.inner_text()
            assert page.get_by_text(sc.HOSTILE, exact=True).count() >= 2   # a pair's heading and its side, as text
            assert page.locator("img, script, iframe, [onerror], [onmouseover]").count() == 0
            assert any("</pre><script>alert(1)</script>" in text for text in page.locator("pre").all_inner_texts())
            page.screenshot(path=ARTIFACTS / "similarity.png")
            first.screenshot(path=ARTIFACTS / "pair.png")
        except BaseException:
            page.screenshot(path=ARTIFACTS / "failure.png", full_page=True)
            raise
    assert not errors, errors
