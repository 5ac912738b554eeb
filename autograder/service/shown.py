"""What a student may see of a graded item before the deadline.

The feedback pages after grading show each check's full message, which names the hidden inputs
it failed on (sizes, positions, values). A check before the deadline must not: those inputs are
what keeps a student from fitting an answer to the checks, and a run's own report could carry
them out word for word. So an item shows its status and points, and, where the assignment shows
hints, the name of its catalogued mistake and the mistake's hint (texts of the catalog, the same
for everyone), and a text of the closed catalogue of :mod:`autograder.messages`: the worker
keeps an item's text, as ``public``, only where the catalogue holds it (a pass, a time or memory
limit, a forbidden call, a stop as tampered); a failure or an error becomes a sentence that says
what kind of problem it was, with at most the name of a Python exception.
"""

from __future__ import annotations

import re

from autograder.messages import STATUS_SENTENCES
from autograder.results import NOT_WRITTEN
from transformer_lm.judging import is_builtin_exception

NAMES = r"[A-Za-z_][A-Za-z0-9_.]*(?:(?:, | and )[A-Za-z_][A-Za-z0-9_.]*)*"
COURSE_CODE = re.compile(rf"^(With the course's {NAMES} in place of yours: )(.*)$", re.S)
EXCEPTION = re.compile(r"\b([A-Z][A-Za-z]*(?:Error|Exception))\b")
NOT_WRITTEN_TEXT = f"{NOT_WRITTEN}: the answer still raises NotImplementedError."


def public_message(item: dict) -> str:
    """The text of graded ``item`` that a student may read, without anything that shows a hidden input."""
    status, message = item["status"], str(item.get("message") or "")
    if status in STATUS_SENTENCES:
        return item.get("public") or STATUS_SENTENCES[status]  # an older result has no catalogue text
    prefix, rest = "", message
    course_code = COURSE_CODE.match(message)
    if course_code:
        prefix, rest = course_code.groups()
    if rest.startswith(NOT_WRITTEN):
        return prefix + NOT_WRITTEN_TEXT
    if status == "error":
        exception = next((name for name in EXCEPTION.findall(rest) if is_builtin_exception(name)), None)
        return prefix + (f"Your code raised {exception} on a hidden check." if exception else
                         "Your code failed on a hidden check.") + " Run the visible checks to see it happen."
    return prefix + "A hidden check found results that differ from the reference's."


def public_item(item: dict, show: str) -> dict:
    """The fields of a graded ``item`` that a student sees; ``show`` is the assignment's 'status' or 'hint'."""
    shown = {key: item[key] for key in ("grade_id", "status", "score", "max_score")}
    if show == "hint":
        shown.update(message=public_message(item), mistake=item.get("mistake") or "",
                     hint=item.get("hint") or "", deduction=item.get("deduction") or "")
    return shown
