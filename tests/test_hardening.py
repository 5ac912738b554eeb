"""Grader hardening: every attack, fault and malformed notebook of the hostile class gets the
grade it must get, with a named status and a message; the batch carries on; grades repeat."""

import contextlib
import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from html.parser import HTMLParser

import nbformat

import hostile_class
import notebook_tools as tools
from autograder.reading.results import STATUSES
from conftest import CELL_TIMEOUT, fingerprint

A = hostile_class.A


def report(root, student):
    return json.loads((root / "reports" / A / f"{student}.json").read_text())


def test_every_case_gets_the_grade_it_must_get(graded_class):
    root, cases, _ = graded_class
    problems = []
    for student, case in cases.items():
        got = report(root, student)
        items = {i["grade_id"]: i for i in got["items"]}
        total_ok = got["total"] <= case.total if case.at_most else got["total"] == case.total
        if not total_ok:
            problems.append(f"{student}: total {got['total']}, expected {'at most ' if case.at_most else ''}{case.total}")
        for item, allowed in case.statuses.items():
            if items[item]["status"] not in allowed:
                problems.append(f"{student}: {item} is {items[item]['status']} ({items[item]['message'][:200]}), "
                                f"expected {sorted(allowed)}")
        for item, text in case.message.items():
            if text not in items[item]["message"]:
                problems.append(f"{student}: {item}'s message lacks {text!r}: {items[item]['message'][:200]}")
        for item in got["items"]:
            if item["status"] not in STATUSES or not item["message"]:
                problems.append(f"{student}: {item['grade_id']} has status {item['status']!r} or no message")
    assert not problems, "\n".join(problems)


def test_extra_and_unreadable_notebooks_are_named_in_the_flags_and_get_a_feedback_page(graded_class):
    """A solved copy beside a blank notebook, and a notebook that cannot be read: the report's flags
    say so by name, and the student's feedback page says what happened."""
    root, _, _ = graded_class
    assert (f"Extra notebook '{hostile_class.NB.replace('.ipynb', '-Copy1.ipynb')}' in the submission: it was not "
            f"graded. It holds answers, while the graded {hostile_class.NB} is blank") in " ".join(
        report(root, "bad_copy")["flags"])
    stem = hostile_class.NB.removesuffix(".ipynb")
    for student, problem in (("bad_truncated", "not valid JSON"), ("nothing", "No notebook")):
        assert any(flag.startswith(f"{stem}: not graded: ") and problem in flag
                   for flag in report(root, student)["flags"]), report(root, student)["flags"]
        page = root / "feedback" / student / A / f"{stem}.html"
        assert problem in page.read_text(), student


def test_notebooks_that_break_the_schema_are_graded_with_a_flag_that_says_where(graded_class):
    """Each repaired notebook's report says what was wrong and where (a cell's number), and its
    autograded notebook is one that nbformat validates."""
    root, _, _ = graded_class
    for student in hostile_class.MALFORMED[:2]:
        flags = report(root, student)["flags"]
        assert any("breaks nbformat's schema" in flag and "cell " in flag for flag in flags), (student, flags)
        nbformat.validate(nbformat.read(root / "autograded" / student / A / hostile_class.NB, as_version=4))
    assert any("lost its nbgrader metadata; its cell id shows it is 'softmax_stable'" in flag
               for flag in report(root, "bad_metadata_list")["flags"])


def test_no_message_carries_text_that_the_students_code_made_on_a_hidden_input(graded_class):
    """An exception named after the hidden input's shape is reported as the built-in type it
    derives from; a ProbeError raised by the student's own code as an exception, not as the
    probe's words. Neither the report nor the feedback page holds the text the code made."""
    root, _, _ = graded_class
    stem = hostile_class.NB.removesuffix(".ipynb")
    for student in hostile_class.LEAKS:
        got = report(root, student)
        assert "LEAK" not in json.dumps(got), [i["message"] for i in got["items"] if "LEAK" in i["message"]]
        assert "LEAK" not in (root / "feedback" / student / A / f"{stem}.html").read_text()


def test_the_autograded_notebook_keeps_the_demonstrations_figures_and_text_and_nothing_active(graded_class):
    """formgrader shows the autograded notebook: the TA sees the figures and printed text of the
    student's skip-grading cells, and no HTML or JavaScript from them."""
    root, _, _ = graded_class
    nb = json.loads((root / "autograded" / "demo_outputs" / A / hostile_class.NB).read_text())
    demos = [c for c in nb["cells"] if "skip-grading" in c["metadata"].get("tags", [])]
    assert demos and all(c["outputs"] for c in demos)
    for cell in demos:
        assert [o["output_type"] for o in cell["outputs"]] == ["stream", "display_data"]
        data = {mime: "".join(value) for mime, value in cell["outputs"][1]["data"].items()}   # nbformat splits lines
        assert data == {"image/png": hostile_class.PNG, "text/plain": "<Figure size 640x480 with 1 Axes>"}
    assert "alert(" not in json.dumps(nb)


def test_forbidden_calls_out_of_the_answers_text_are_flagged(graded_class):
    """The library softmax reached through a getattr string, torch.ops.aten or a helper cell: the
    trace of what ran makes softmax_stable ``forbidden`` (checked with every case above) and flags
    the submission for a TA."""
    root, _, _ = graded_class
    for student in ("fbd_getattr", "fbd_ops", "fbd_helper"):
        flags = report(root, student)["flags"]
        assert any(flag.endswith("ran softmax (seen in what ran, not in its text).") for flag in flags), flags


def test_honest_code_named_like_the_library_is_never_flagged(graded_class):
    """A helper called ``softmax`` and an ``isinstance`` check: full marks, no flag."""
    root, _, _ = graded_class
    assert report(root, "honest_named_softmax")["flags"] == []


def test_the_batch_carries_on_and_every_student_and_item_is_in_grades_csv(graded_class):
    root, cases, _ = graded_class
    with (root / "reports" / A / "grades.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {(r["student"], r["grade_id"]) for r in rows} == {(s, i) for s in cases for i in hostile_class.ITEMS}


def test_nothing_a_submission_wrote_reached_the_course(graded_class):
    root, _, before = graded_class
    assert fingerprint(before) == before


def descendants(pid: int) -> list[str]:
    """The command lines of every process below ``pid``, read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], list(children.get(pid, []))
    while todo:
        child = todo.pop()
        with contextlib.suppress(OSError):
            found.append(Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        todo += children.get(child, [])
    return found


def test_no_process_outlives_its_run(graded_class):
    """Once grading is over, nothing it started runs: no sandbox, no server, and none of what
    students started (the class has a submission that leaves ``sleep 300`` behind)."""
    assert descendants(os.getpid()) == []


# Faults that each run until a time limit: one of them (fault_loop) is enough to show that a
# timeout repeats, and with one worker each costs its limit again.
SLOW_FAULTS = {"fault_swallow", "fault_fork", "fault_slow_bad", "fault_memory", "fault_disk"}


def test_grades_repeat_with_one_worker_and_run_after_run(graded_class, tmp_path):
    """The same submissions graded again, in a copy of the course with one worker, get the same
    grades, statuses and messages (every case but the slow faults other than one timeout)."""
    root, cases, _ = graded_class
    again = tmp_path / "again"
    shutil.copytree(root, again, ignore=shutil.ignore_patterns("reports", "autograded", "feedback", "gradebook.db"))
    students = sorted(set(cases) - SLOW_FAULTS)
    tools.grade_course(again, A, workers=1, cell_timeout=float(CELL_TIMEOUT), students=students)
    for student in students:
        first, second = report(root, student), report(again, student)
        assert first["items"] == second["items"], student
        assert first["total"] == second["total"] and first["flags"] == second["flags"], student


class Collector(HTMLParser):
    """Everything a browser could run: script bodies, event-handler attributes, javascript: links."""

    def __init__(self):
        super().__init__()
        self.active, self.text, self._in_script = [], [], False

    def handle_starttag(self, tag, attrs):
        self._in_script = tag == "script"
        for name, value in attrs:
            if name.startswith("on") or (value or "").strip().lower().startswith("javascript:"):
                self.active.append(f"{tag} {name}={value}")
        if tag in ("iframe", "object", "embed"):
            self.active.append(tag)

    def handle_endtag(self, tag):
        self._in_script = False

    def handle_data(self, data):
        (self.active if self._in_script else self.text).append(data)


def test_feedback_holds_no_hidden_checks_no_hidden_inputs_and_no_active_content(graded_class, tmp_path):
    root, _, _ = graded_class
    # A submission whose written text tries to run in the TA's and the student's browser.
    payload = "<script>alert('owned')</script><img src=x onerror=\"alert('owned')\"><a href=\"javascript:alert(1)\">x</a>"
    nb = hostile_class.add_cell(hostile_class.solution(), "x = 1", "softmax_stable")
    nb["cells"].insert(0, {"cell_type": "markdown", "id": "evil", "metadata": {}, "source": payload})
    folder = root / "submitted" / "zz_html" / A
    folder.mkdir(parents=True)
    (folder / hostile_class.NB).write_text(json.dumps(nb))
    bad = hostile_class.replace(hostile_class.solution(), "causal_attention",
                                hostile_class.WRONG_CAUSAL.replace("# wrong: no attention at all", payload))
    (root / "submitted" / "zz_html2" / A).mkdir(parents=True)
    (root / "submitted" / "zz_html2" / A / hostile_class.NB).write_text(json.dumps(bad))
    tools.grade_course(root, A, students=["zz_html", "zz_html2"], cell_timeout=float(CELL_TIMEOUT))
    hidden = (hostile_class.REPO / "autograder" / "checks" / f"{A}.py").read_text()
    hidden_lines = [line.strip() for line in hidden.splitlines() if len(line.strip()) > 30]
    secret = (root / ".grading" / "secret").read_text().strip()

    def check_pages(who):
        pages = list((root / "feedback").glob(f"zz_html*/{A}/attention_basics.html"))
        assert len(pages) == 2, who
        for page in pages:
            html = page.read_text()
            collector = Collector()
            collector.feed(html)
            assert not any("owned" in a or "alert(1)" in a for a in collector.active), (who, page, collector.active)
            assert not any(line in html for line in hidden_lines), (who, page)
            assert secret not in html and "AttentionCase(" not in html, (who, page)

    check_pages("autograder's feedback")
    # What formgrader shows a TA: its own exporter and template on the autograded notebook.
    from nbconvert import HTMLExporter
    from nbgrader.server_extensions.formgrader import handlers

    exporter = HTMLExporter(template_name="formgrade", extra_template_basedirs=[handlers.template_path])
    for student in ("zz_html", "zz_html2"):
        resources = {"assignment_id": A, "notebook_id": "attention_basics", "submission_id": "x", "index": 0,
                     "total": 1, "base_url": "", "student": student, "last_name": "", "first_name": "",
                     "notebook_path": ""}
        html, _ = exporter.from_filename(str(root / "autograded" / student / A / hostile_class.NB), resources=resources)
        (root / "feedback" / student / A / "formgrade.html").write_text(html)

    def check_formgrader():
        for student in ("zz_html", "zz_html2"):
            html = (root / "feedback" / student / A / "formgrade.html").read_text()
            collector = Collector()
            collector.feed(html)
            assert not any("owned" in a or "alert(1)" in a for a in collector.active), ("formgrader", collector.active)
            assert not any(line in html for line in hidden_lines) and secret not in html

    check_formgrader()
    for student in ("zz_html", "zz_html2"):  # what formgrader and released feedback render
        done = subprocess.run([sys.executable, "-m", "nbgrader", "generate_feedback", A, "--student", student,
                               "--force"], cwd=root, env=hostile_class.demo.nbgrader_env(), capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
    check_pages("nbgrader generate_feedback")
