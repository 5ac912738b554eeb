"""A fault of the grader itself costs one notebook, never the class.

Grading reads every notebook as untrusted data (:mod:`autograder.notebook_data`), so no
submission should make the grader raise; if one still does, that is the grader's bug. The
submission is then graded 0 where the fault struck, with a flag for the TA, the notebook stays
as it was submitted, and the traceback goes to ``reports/<assignment>/grader_faults.log`` for
the instructor. The students after it are graded as usual.
"""

from __future__ import annotations

import threading
import time
import traceback
from pathlib import Path

LOG_NAME = "grader_faults.log"
_WRITING = threading.Lock()


def log_fault(folder: Path, student: str, what: str, error: BaseException) -> str:
    """Appends ``error``'s traceback to ``folder/grader_faults.log`` and returns the flag for the
    submission of ``student``, saying what failed (``what``) and where the details are."""
    folder.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    entry = f"--- {stamp} {student}: {what}\n{''.join(traceback.format_exception(error))}\n"
    with _WRITING, (folder / LOG_NAME).open("a") as log:
        log.write(entry)
    return (f"The grader itself failed while {what} ({type(error).__name__}); the notebook is kept as submitted. "
            f"Grade it by hand, and send the traceback in {folder.name}/{LOG_NAME} to the course's developers.")
