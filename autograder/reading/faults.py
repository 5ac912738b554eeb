"""A fault of the grader itself costs one notebook, never the class.

Grading reads every notebook as untrusted data (:mod:`autograder.reading.notebook_data`), so no
submission should make the grader raise; if one still does, that is the grader's bug. The
submission is then graded 0 where the fault struck, with a flag for the TA, the notebook stays
as it was submitted, and the traceback goes to ``reports/<assignment>/grader_faults.log`` for
the instructor. The students after it are graded as usual. The steps that read the class's notebooks
after grading do the same: in similarity and feedback a fault leaves that student's notebook out of the
step (:func:`costs_one`), with a note and the traceback in the same log, and in the class report it
leaves out the section on similar answers, never the report.
"""

from __future__ import annotations

import contextlib
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

from autograder.reading.sanitize import STORABLE

LOG_NAME = "grader_faults.log"
GRADE_BY_HAND = "the notebook is kept as submitted. Grade it by hand"
"""What grading does instead of what failed, as its flag says."""
_WRITING = threading.Lock()


def log_fault(folder: Path, student: str, what: str, error: BaseException, instead: str = GRADE_BY_HAND) -> str:
    """Appends ``error``'s traceback to ``folder/grader_faults.log`` and returns the flag for the
    submission of ``student``, saying what failed (``what``), what was done ``instead`` and where
    the details are."""
    folder.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    entry = f"--- {stamp} {student}: {what}\n{''.join(traceback.format_exception(error))}\n"
    with _WRITING, (folder / LOG_NAME).open("a", **STORABLE) as log:
        log.write(entry)
    return (f"The grader itself failed while {what} ({type(error).__name__}); {instead}, "
            f"and send the traceback in {folder.name}/{LOG_NAME} to the course's developers.")


@contextlib.contextmanager
def costs_one(folder: Path, student: str, what: str, instead: str, notes: list[str]) -> Iterator[None]:
    """Runs the body, a step of one student's notebook: a fault of the grader in it ends the body,
    is logged (:func:`log_fault`) and noted in ``notes`` under the student's id, and the caller
    goes on with the next student."""
    try:
        yield
    except Exception as error:  # noqa: BLE001 - the grader's own fault costs this student's notebook, not the class
        notes.append(f"{student}: {log_fault(folder, student, what, error, instead)}")
