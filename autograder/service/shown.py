"""What a student may see of a graded item before the deadline.

The feedback pages after grading show each check's full message, which names the hidden inputs
it failed on (sizes, positions, values). A check before the deadline must not: those inputs are
what keeps a student from fitting an answer to the checks. So an item shows its status and
points, and, where the assignment shows hints, the name of its catalogued mistake and the
mistake's hint (texts of the catalog, the same for everyone), and a message only where ours says
nothing about the inputs: a pass, an answer not written yet, a time or memory limit, a forbidden
call. Any other message becomes a sentence that says what kind of problem it was.
"""

from __future__ import annotations

import re

from autograder.results import NOT_WRITTEN
from transformer_lm.judging import is_builtin_exception

COURSE_CODE = re.compile(r"^(With the course's .+? in place of yours: )(.*)$", re.S)
EXCEPTION = re.compile(r"\b([A-Z][A-Za-z]*(?:Error|Exception))\b")
KEPT = ("passed", "timeout", "killed", "missing", "forbidden", "tampered")


def public_message(status: str, message: str) -> str:
    """``message`` of an item of ``status``, without anything that shows a hidden input."""
    if status in KEPT:
        return message
    prefix, rest = "", message
    course_code = COURSE_CODE.match(message)
    if course_code:
        prefix, rest = course_code.groups()
    if rest.startswith(NOT_WRITTEN):
        return message
    if status == "error":
        exception = next((name for name in EXCEPTION.findall(rest) if is_builtin_exception(name)), None)
        return prefix + (f"Your code raised {exception} on a hidden check." if exception else
                         "Your code failed on a hidden check.") + " Run the visible checks to see it happen."
    return prefix + "A hidden check found results that differ from the reference's."


def public_item(item: dict, show: str) -> dict:
    """The fields of a graded ``item`` that a student sees; ``show`` is the assignment's 'status' or 'hint'."""
    shown = {key: item[key] for key in ("grade_id", "status", "score", "max_score")}
    if show == "hint":
        shown.update(message=public_message(item["status"], item["message"]), mistake=item.get("mistake") or "",
                     hint=item.get("hint") or "", deduction=item.get("deduction") or "")
    return shown
