"""Feedback pages for students, built only from structured results and their own code.

No hidden check source, no hidden inputs, and nothing a submission produced goes into a
page as markup: every piece of text is escaped, the page has no script, and the student's
code is shown as plain text. The layout matches nbgrader's
(``feedback/<student>/<assignment>/<notebook>.html``) so that ``nbgrader release_feedback``
hands the pages out.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

from autograder.grading import Course, SubmissionResult

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; color: #1b1b1b; }
table { border-collapse: collapse; width: 100%; } td, th { border: 1px solid #ccc; padding: .4rem; vertical-align: top; }
.passed { background: #e7f6e7; } .failed, .error, .timeout, .killed, .missing, .forbidden, .tampered { background: #fdecea; }
pre { background: #f6f6f6; padding: .6rem; overflow-x: auto; white-space: pre-wrap; }
.flag { color: #8a5300; }
"""


def render(result: SubmissionResult, notebook: str, answers: list[tuple[str, str]]) -> str:
    """The feedback page of one notebook of one submission; ``answers`` are the student's
    ``(grade_id, source)`` answer cells."""
    items = [i for i in result.items if i.notebook == notebook]
    got, total = sum(i.score for i in items), sum(i.max_score for i in items)
    rows = []
    for item in items:
        hint = f"<p><b>Likely mistake: {escape(item.mistake or '')}.</b> {escape(item.hint)}</p>" if item.hint else ""
        if item.deduction:
            hint += f"<p><b>Deduction</b>, {escape(item.deduction)}</p>"
        rows.append(f'<tr class="{escape(item.status)}"><td>{escape(item.grade_id)}</td>'
                    f"<td>{item.score:g} / {item.max_score:g}</td><td>{escape(item.status)}</td>"
                    f"<td><pre>{escape(item.message)}</pre>{hint}</td></tr>")
    flags = "".join(f'<li class="flag">{escape(f)}</li>' for f in result.flags if f.startswith(notebook + ":"))
    code = [f"<h3>{escape(grade_id)}</h3><pre>{escape(source)}</pre>" for grade_id, source in answers]
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
        "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src 'unsafe-inline'\">"
        f"<title>{escape(result.assignment)}: {escape(notebook)}</title><style>{STYLE}</style></head><body>"
        f"<h1>{escape(result.assignment)} / {escape(notebook)}</h1>"
        f"<p>Student <b>{escape(result.student)}</b>: <b>{got:g} / {total:g}</b> automatically graded points. "
        "Written answers, if any, are graded by hand and are not counted here.</p>"
        + (f"<h2>Notes</h2><ul>{flags}</ul>" if flags else "")
        + "<h2>Items</h2><table><tr><th>item</th><th>points</th><th>status</th><th>what the grader found</th></tr>"
        + "".join(rows) + "</table><h2>Your answers</h2>" + "".join(code) + "</body></html>\n"
    )


def answers_of(cells: list[dict]) -> list[tuple[str, str]]:
    """The ``(grade_id, source)`` of every answer cell (code or written) of a notebook's cells."""
    found = []
    for cell in cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("solution") and meta.get("grade_id"):
            source = cell.get("source", "")
            found.append((meta["grade_id"], "".join(source) if isinstance(source, list) else source))
    return found


def write_feedback(course: Course, result: SubmissionResult, answers: dict[str, list[tuple[str, str]]]) -> list[Path]:
    """Writes one page per notebook; ``answers`` maps a notebook to its answer cells."""
    folder = course.root / "feedback" / result.student / result.assignment
    folder.mkdir(parents=True, exist_ok=True)
    course.copy_receipts(result.assignment, result.student, folder)
    written = []
    for notebook, cells in answers.items():
        path = folder / f"{notebook}.html"
        path.write_text(render(result, notebook, cells))
        written.append(path)
    return written
