"""The course's hooks into nbgrader's feedback commands, set in ``nbgrader_config.py``.

* formgrader's "Generate Feedback" button runs nbgrader's ``GenerateFeedback`` (as
  ``nbgrader generate_feedback`` does), which would write nbgrader's own pages over the grader's
  without a word, losing the mistakes the grader named and its flags. :class:`GraderPages` is the
  exporter it uses instead, so that each page it writes is the one ``autograder feedback`` writes.
* nbgrader's ``release_feedback`` reads ``timestamp.txt`` and ``submission_secret.txt`` from each
  student's feedback folder and stops the whole class at the first folder without them. A
  submission that did not come through nbgrader's exchange (``zip_collect``, a copy by hand) has
  neither, and without the secret ``fetch_feedback`` could not find its pages anyway:
  :class:`ReleaseFeedback` leaves such students out, names them, and releases the others.
"""

from __future__ import annotations

import glob
import json
import os
import re
from pathlib import Path

from nbconvert.exporters import Exporter
from nbgrader.exchange.default.release_feedback import ExchangeReleaseFeedback
from traitlets import Unicode, default


class GraderPages(Exporter):
    """Exports an autograded notebook as the grader's feedback page of that notebook, written by
    the same code as ``autograder feedback``: the report's verdicts and the gradebook's hand grades
    and comments, never the notebook's own outputs."""

    course_root = Unicode("", help="The course folder (where nbgrader_config.py is).").tag(config=True)
    output_mimetype = "text/html"

    @default("file_extension")
    def _file_extension_default(self) -> str:
        return ".html"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        # Each submission's pages by notebook, written once per run: nbgrader exports notebooks one by one.
        self._pages: dict[tuple[str, str], dict[str, Path]] = {}

    def from_notebook_node(self, nb, resources=None, **kw):
        _, resources = super().from_notebook_node(nb, resources, **kw)
        info = resources["nbgrader"]
        key = (info["assignment"], info["student"])
        if key not in self._pages:
            self._pages[key] = {page.stem: page for page in self._write_pages(*key)}
        pages = self._pages[key]
        # A notebook of another name (renamed, or an extra copy) gets the page of the assignment's only
        # notebook, which says how it was graded; fetch_feedback looks for a page by the submitted name.
        page = pages.get(info["notebook"]) or (next(iter(pages.values())) if len(pages) == 1 else None)
        if page is None:
            raise LookupError(f"the grader wrote no feedback page for {info['notebook']!r} of {info['student']}; "
                              f"it wrote {', '.join(sorted(pages)) or 'none'}")
        return page.read_bytes(), resources

    def _write_pages(self, assignment: str, student: str) -> list[Path]:
        """The submission's pages, written into its feedback folder with the receipts that
        ``release_feedback`` needs, by the function that writes them for ``autograder feedback``."""
        # Imported here: nbgrader loads this module with the course's config for every command.
        from autograder.reading.config import load_settings
        from autograder.reading.course import Course
        from autograder.reading.errors import GradingError
        from autograder.reading.results import SubmissionResult
        from autograder.recording.pipeline import write_pages

        root = Path(self.course_root)
        course = Course(root, load_settings(root, config=self.config))
        report = course.reports(assignment) / f"{student}.json"
        if not report.is_file():
            raise GradingError(f"{student} has no report of {assignment} ({report}), so the grader has no feedback "
                               f"for them: grade the submission first (autograder grade {assignment} --student "
                               f"{student})")
        notes: list[str] = []
        pages = write_pages(course, assignment, [SubmissionResult.from_json(json.loads(report.read_text()))], notes)
        for note in notes:
            self.log.warning(note)
        return pages


class ReleaseFeedback(ExchangeReleaseFeedback):
    """nbgrader's ``release_feedback``, which goes on past a student whose feedback folder lacks
    the exchange's receipts, and names them."""

    def copy_files(self):
        unreleasable = self.without_receipts()
        for student, (folder, missing) in unreleasable.items():
            self.log.warning(f"Feedback of {student} not released: {folder} has no {' or '.join(missing)}, which "
                             "nbgrader's exchange writes when a student submits through it. Hand them the pages in "
                             "that folder another way.")
        excluded = self.coursedir.student_id_exclude
        self.coursedir.student_id_exclude = ",".join(filter(None, [excluded, *unreleasable]))
        try:
            super().copy_files()
        finally:
            self.coursedir.student_id_exclude = excluded

    def without_receipts(self) -> dict[str, tuple[str, list[str]]]:
        """The students whose feedback folder holds pages but lacks a receipt: their folder and
        the receipts it lacks."""
        from autograder.reading.course import RECEIPTS  # imported here: it imports torch

        pattern = self.coursedir.format_path(self.coursedir.feedback_directory, "(?P<student_id>.*)",
                                             self.coursedir.assignment_id, escape=True)
        found = {}
        for folder in sorted(glob.glob(self.src_path)):
            missing = [name for name in RECEIPTS if not os.path.isfile(os.path.join(folder, name))]
            named = re.fullmatch(pattern, folder)
            if missing and named and glob.glob(os.path.join(glob.escape(folder), "*.html")):
                found[named["student_id"]] = (folder, missing)
        return found
