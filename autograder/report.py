"""Reports for instructors and exports for an LMS, made from the per-submission JSON reports.

Everything here reads ``reports/<assignment>/<student>.json`` (what ``autograder grade``
writes), so a report can be remade anywhere those files are, without grading again or
loading the hidden checks. The page follows :mod:`autograder.feedback`: every string is
escaped (student ids come from folder names, messages quote student code), there is no
script, and a Content-Security-Policy forbids everything but inline style and the embedded
plots (PNG data URIs, drawn by matplotlib's Agg canvas).
"""

from __future__ import annotations

import base64
import csv
import io
import json
import statistics
from collections import Counter
from html import escape
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from autograder.grading import STATUSES, Course, SubmissionResult, load_results
from autograder.record import item_message

# Gradescope shows a submission's results once the instructor publishes the grades, as
# nbgrader's release_feedback hands out feedback only when the instructor does.
GRADESCOPE_VISIBILITY = "after_published"
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
STYLE = """
body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; color: #1b1b1b; }
table { border-collapse: collapse; margin: 1rem 0; } td, th { border: 1px solid #ccc; padding: .3rem .5rem; }
td.n { text-align: right; } img { max-width: 100%; }
"""


def item_order(results: list[SubmissionResult]) -> list[str]:
    """The items in the order grading listed them (release notebooks, then the hidden checks)."""
    return list(dict.fromkeys(item.grade_id for result in results for item in result.items))


def _png(fig: Figure) -> str:
    """A figure as a data URI: the page then stands alone and carries no markup from matplotlib."""
    buffer = io.BytesIO()
    FigureCanvasAgg(fig).print_png(buffer)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _bars(labels: list[str], values: list[float], xlabel: str, title: str, xmax: float | None = None) -> str:
    """Horizontal bars, first label on top, whole numbers on the axis; labels are drawn as
    plain text (a ``$`` in a title starts no mathtext)."""
    fig = Figure(figsize=(8, 1.5 + 0.35 * len(labels)), layout="constrained")
    ax = fig.add_subplot()
    ax.barh(range(len(labels)), values, color="#4878a8")
    ax.set_yticks(range(len(labels)), labels, parse_math=False)
    ax.invert_yaxis()
    ax.set(xlabel=xlabel, title=title)
    ax.xaxis.get_major_locator().set_params(integer=True)
    if xmax is not None:
        ax.set_xlim(0, xmax)
    return _png(fig)


def _histogram(totals: list[float], max_total: float) -> str:
    """One bar per total that occurs: exact for fractional totals, which fixed bins would round."""
    values = sorted(set(totals))
    gaps = [b - a for a, b in zip(values, values[1:])]
    fig = Figure(figsize=(8, 3), layout="constrained")
    ax = fig.add_subplot()
    ax.bar(values, [totals.count(v) for v in values], width=0.8 * min([1.0, *gaps]), color="#4878a8")
    ax.set(xlabel="total points", ylabel="submissions", title="Score distribution", xlim=(-0.5, max_total + 0.5))
    ax.yaxis.get_major_locator().set_params(integer=True)
    return _png(fig)


def _table(table_id: str, head: list[str], rows: list[list[str]]) -> str:
    """A table of cells already made by :func:`_text`, :func:`_number` or :func:`_list`."""
    return (f'<table id="{table_id}"><tr>' + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr>"
            + "".join("<tr>" + "".join(row) + "</tr>" for row in rows) + "</table>")


def _text(text: str) -> str:
    return f"<td>{escape(text)}</td>"


def _number(number: str) -> str:
    return f'<td class="n">{escape(number)}</td>'


def _list(texts: list[str]) -> str:
    return "<td><ul>" + "".join(f"<li>{escape(t)}</li>" for t in texts) + "</ul></td>"


def _img(alt: str, uri: str) -> str:
    return f'<img alt="{escape(alt)}" src="{uri}">'


def render(assignment: str, results: list[SubmissionResult]) -> str:
    """The instructor's page: headline numbers, score distribution, pass rate per item,
    named mistakes, how often each status occurs, and flags per student."""
    n = len(results)
    totals = [r.total for r in results]
    max_total = max(r.max_total for r in results)
    items = [i for r in results for i in r.items]
    order = item_order(results)
    points = {i.grade_id: i.max_score for i in items}
    passed = Counter(i.grade_id for i in items if i.status == "passed")
    mean_score = {g: sum(i.score for i in items if i.grade_id == g) / n for g in order}
    mistakes = Counter(i.mistake for i in items if i.mistake).most_common()
    statuses = Counter(i.status for i in items)
    hit = Counter(status for r in results for status in {i.status for i in r.items})
    flagged = [r for r in results if r.flags]

    parts = [
        f"<h1>{escape(assignment)}: class report</h1>",
        f"<p><b>{n}</b> submissions; mean <b>{statistics.mean(totals):.2f}</b>, "
        f"median <b>{statistics.median(totals):.2f}</b> of {max_total:g} automatically graded points.</p>",
        _img("Histogram of the totals", _histogram(totals, max_total)),
        "<h2>Items</h2>",
        _img("Pass rate per item", _bars(order, [100 * passed[g] / n for g in order], "% of submissions that passed",
                                         "Pass rate per item", xmax=100)),
        _table("items", ["item", "points", "passed", "pass rate", "mean score"],
               [[_text(g), _number(f"{points[g]:g}"), _number(f"{passed[g]}/{n}"),
                 _number(f"{100 * passed[g] / n:.0f}%"), _number(f"{mean_score[g]:.2f}")] for g in order]),
        "<h2>Named mistakes</h2>",
    ]
    if mistakes:
        parts += [_img("Named mistakes", _bars([m for m, _ in mistakes], [c for _, c in mistakes], "items",
                                               "How often each named mistake occurs")),
                  _table("mistakes", ["mistake", "items"], [[_text(m), _number(str(c))] for m, c in mistakes])]
    else:
        parts.append("<p>No answer was recognised as a catalogued mistake.</p>")
    parts += ["<h2>Statuses</h2>",
              _table("statuses", ["status", "items", "submissions"],
                     [[_text(s), _number(str(statuses[s])), _number(str(hit[s]))] for s in STATUSES if statuses[s]]),
              "<h2>Flags</h2>"]
    if flagged:
        parts.append(_table("flags", ["student", "total", "flags"],
                            [[_text(r.student), _number(f"{r.total:g}"), _list(r.flags)] for r in flagged]))
    else:
        parts.append("<p>No submission was flagged.</p>")
    return ("<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
            f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">"
            f"<title>{escape(assignment)}: class report</title><style>{STYLE}</style></head><body>"
            + "".join(parts) + "</body></html>\n")


def _spreadsheet_safe(text: str) -> str:
    """A cell that a spreadsheet opening the export will not run as a formula (a folder name
    such as ``=HYPERLINK(...)`` would otherwise be one)."""
    return "'" + text if text.startswith(("=", "+", "-", "@", "\t", "\r")) else text


def write_lms_csv(path: Path, results: list[SubmissionResult]) -> Path:
    """One row per student, one column per item: the shape an LMS gradebook imports.
    (``grades.csv``, written by ``autograder grade``, is the long shape: a row per student and item.)"""
    order = item_order(results)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["student", "total", "max_total", *order])
        for result in results:
            scores = {i.grade_id: i.score for i in result.items}
            writer.writerow([_spreadsheet_safe(result.student), f"{result.total:g}", f"{result.max_total:g}",
                             *(f"{scores[g]:g}" if g in scores else "" for g in order)])
    return path


def gradescope_results(result: SubmissionResult) -> dict:
    """Gradescope's autograder ``results.json`` for one submission: a test per item, its
    output the same text that formgrader and the autograded notebook show."""
    return {
        "score": result.total,
        "output": "\n".join(result.flags),
        "output_format": "text",  # messages quote student code: shown as text, never as markdown or HTML
        "test_output_format": "text",
        "visibility": GRADESCOPE_VISIBILITY,
        "tests": [{"name": item.grade_id, "number": str(number), "score": item.score, "max_score": item.max_score,
                   "status": "passed" if item.status == "passed" else "failed", "output": item_message(item)}
                  for number, item in enumerate(result.items, 1)],
    }


def write_reports(course: Course, assignment: str) -> dict[str, Path] | None:
    """Writes ``report.html``, ``lms.csv`` and ``gradescope/<student>/results.json`` under
    ``reports/<assignment>/``; None when there is no graded submission to report on."""
    results = load_results(course, assignment)
    if not results:
        return None
    folder = course.reports(assignment)
    html = folder / "report.html"
    html.write_text(render(assignment, results))
    gradescope = folder / "gradescope"
    for result in results:
        path = gradescope / result.student / "results.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(gradescope_results(result), indent=2) + "\n")
    return {"report": html, "lms": write_lms_csv(folder / "lms.csv", results), "gradescope": gradescope}
