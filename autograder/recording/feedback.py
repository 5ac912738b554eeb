"""Feedback pages for students, built only from structured results and their own code.

No hidden check source, no hidden inputs, and nothing a submission produced goes into a
page as markup: the page is a template (``templates/feedback.html.j2``) that escapes every
value put into it, it has no script, and the student's code is shown as plain text. The layout matches nbgrader's
(``feedback/<student>/<assignment>/<notebook>.html``) so that ``nbgrader release_feedback``
hands the pages out.
"""

from __future__ import annotations

from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from autograder.reading.course import Course
from autograder.recording.record import Marking, feedback_stamp, marking_digest
from autograder.reading.results import SubmissionResult
from autograder.reading.sanitize import STORABLE

# The pages' templates (autograder/recording/templates/), shared with autograder.recording.report: every value
# put into a page is escaped, so no string from a submission becomes markup. They are found
# beside this file, not through the package's import spec: a course folder's own
# autograder/checks/ can make ``autograder`` a namespace package where nbgrader runs.
PAGES = Environment(loader=FileSystemLoader(Path(__file__).with_name("templates")), autoescape=True,
                    undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)


def render(result: SubmissionResult, notebook: str, answers: list[tuple[str, str]], marking=None) -> str:
    """The feedback page of one notebook of one submission; ``answers`` are the student's
    ``(grade_id, source)`` answer cells, ``marking`` what the gradebook holds besides the grader's
    verdicts (:class:`autograder.recording.record.Marking`): written answers' grades, comments,
    lateness, and an item's score set by a TA (a deduction), shown beside the grader's."""
    items = [i for i in result.items if i.notebook == notebook]
    marking = marking or Marking()
    here = Marking([hand for hand in marking.written if hand.notebook == notebook])  # this notebook's written answers
    comments = {name: text for (nb, name), text in marking.comments.items()
                if nb == notebook and name not in {hand.grade_id for hand in here.written}}
    by_ta = {i.grade_id: score for i in items if (score := marking.item_score(i)) != i.score}
    return PAGES.get_template("feedback.html.j2").render(
        result=result, notebook=notebook, items=items, answers=answers, written=here.written, comments=comments,
        by_ta=by_ta, got=sum(by_ta.get(i.grade_id, i.score) for i in items), total=sum(i.max_score for i in items),
        hand_got=here.score, hand_total=here.max_score, waiting=len(here.waiting), flags=flags_of(result, notebook),
        late=marking.late_note(notebook))


def flags_of(result: SubmissionResult, notebook: str) -> list[str]:
    """The flags a notebook's page shows: those of the whole submission first (a renamed notebook,
    an extra one beside it), which name no notebook of the assignment and so belong on each of its
    pages, then the notebook's own (a cell restored, the notebook missing or unreadable). The
    student then reads why an answer they wrote elsewhere is not graded, where the report tells the
    instructor."""
    prefixes = tuple(f"{name}:" for name in dict.fromkeys(item.notebook for item in result.items))
    whole = [flag for flag in result.flags if not flag.startswith(prefixes)]
    return whole + [flag for flag in result.flags if flag.startswith(f"{notebook}:")]


def write_feedback(course: Course, result: SubmissionResult, answers: dict[str, list[tuple[str, str]]],
                   marking=None) -> list[Path]:
    """Writes one page per notebook; ``answers`` maps a notebook to its answer cells, ``marking``
    holds the hand grades and comments recorded so far."""
    folder = course.root / "feedback" / result.student / result.assignment
    folder.mkdir(parents=True, exist_ok=True)
    course.copy_receipts(result.assignment, result.student, folder)
    written = []
    for notebook, cells in answers.items():
        path = folder / f"{notebook}.html"
        path.write_text(render(result, notebook, cells, marking), **STORABLE)
        written.append(path)
    stamp = feedback_stamp(course, result.assignment, result.student)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(marking_digest(marking))  # which hand grades the pages hold: record.stale_feedback
    return written
