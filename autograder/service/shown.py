"""What a student may see of a graded item before the deadline.

The feedback pages after grading show each check's full message, which names the hidden inputs
it failed on (sizes, positions, values). A check before the deadline must not: those inputs are
what keeps a student from fitting an answer to the checks, and a run's own report could carry
them out word for word. So an item shows its status and points, and, where the assignment shows
hints, the name of its catalogued mistake and the mistake's hint (texts of the catalog, the same
for everyone), and a text of the closed catalogue of :mod:`autograder.reading.messages`: the worker
keeps an item's text, as ``public``, only where the catalogue holds it (a pass, a time or memory
limit, a forbidden call, a stop as tampered); a failure or an error becomes the catalogue's sentence
for what kind of problem it was, with at most the name of one of Python's exceptions.
"""

from __future__ import annotations

from autograder.reading import messages


def public_message(item: dict) -> str:
    """The text of graded ``item`` that a student may read, without anything that shows a hidden input:
    the worker's ``public`` (:func:`autograder.reading.messages.public`), or, for a result stored before the
    worker kept one, the same made without the course's names."""
    return item.get("public") or messages.public(item["status"], str(item.get("message") or ""), ())


def public_item(item: dict, show: str) -> dict:
    """The fields of a graded ``item`` that a student sees; ``show`` is the assignment's 'status' or 'hint'."""
    shown = {key: item[key] for key in ("grade_id", "status", "score", "max_score")}
    if show == "hint":
        shown.update(message=public_message(item), mistake=item.get("mistake") or "",
                     hint=item.get("hint") or "", deduction=item.get("deduction") or "")
    return shown
