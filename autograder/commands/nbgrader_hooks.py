"""The course's hooks into nbgrader, so that its commands grade as ``autograder grade`` does.

* :class:`TrustedGrading`, in ``nbgrader autograde``, in place of ``Execute`` and ``SaveAutoGrades``:
  nbgrader would run the hidden tests inside the student's kernel, where a patched
  ``torch.allclose`` or an input transformer earns full marks. Here the submission is graded the
  way ``autograder grade`` grades it (preflight, sandboxed run, trusted comparison), each item's
  verdict is written into its visible test cell for formgrader to show, and the scores and
  comments go into the gradebook through the same function as ``autograder grade``'s
  (:func:`autograder.recording.record.record_in_gradebook`). nbgrader's own steps around it
  record the submission's time and apply the late penalty, as they do for ``autograder grade``
  (:mod:`autograder.recording.lateness`).
* :class:`DropDuplicateIds`, in autograde's sanitizing steps in place of ``DeduplicateIds``: a
  pasted graded cell no longer stops the class.
* :func:`copy_renamed_notebook`, autograde's pre-convert hook: a lone notebook under another name
  is graded by both commands.
* :class:`CanvasCollector`, ``zip_collect``'s collector: Canvas's ``_LATE`` mark becomes a time.
"""

from __future__ import annotations

import datetime
import logging
import shutil
from pathlib import Path

from nbconvert.preprocessors import Preprocessor
from nbformat.v4 import new_output
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.plugins import FileNameCollectorPlugin
from nbgrader.preprocessors import DeduplicateIds
from traitlets import Bool, Unicode

from autograder.reading.cells import grade_id

_PREPARED: dict = {}
"""Each assignment's prepared hidden checks, by course folder and name."""


def _course(root: Path, config):
    """The course with the settings nbgrader loaded from its ``nbgrader_config.py``: the same
    ones ``autograder grade`` reads."""
    from autograder.reading.config import load_settings
    from autograder.reading.course import Course

    return Course(root, load_settings(root, config=config))


def _assignment(course, name: str):
    """The assignment's hidden checks, prepared once per ``nbgrader autograde`` run rather than
    once per notebook."""
    from autograder.reading.assignment import Assignment

    key = (course.root, name)
    if key not in _PREPARED:
        _PREPARED[key] = Assignment.load(course, name)
    return _PREPARED[key]


class TrustedGrading(Preprocessor):
    """Grades the notebook with the trusted pipeline, shows the results in its test cells and
    records them in the gradebook."""

    course_root = Unicode("", help="The course folder (where nbgrader_config.py is).").tag(config=True)
    enabled = Bool(True, help="nbconvert skips preprocessors that are not enabled: this one must run.")

    def preprocess(self, nb, resources):
        # Imported here: nbgrader loads this module with the course's config for every command.
        from autograder.recording import pipeline, record
        from autograder.judging.grading import grade_class
        from autograder.reading.results import write_report
        from autograder.reading.sanitize import neutralize_student_markdown

        info = resources.get("nbgrader", {})
        assignment_name, student, notebook = info.get("assignment"), info.get("student"), info.get("notebook")
        root = Path(self.course_root or ".").resolve()
        course = _course(root, self.config)
        isolation = pipeline.isolation_for(course)
        assignment = _assignment(course, assignment_name)
        # The autograded notebook and the feedback are nbgrader's and `autograder feedback`'s to write in this flow.
        [(result, pres)] = grade_class(course, assignment, [student], isolation)
        write_report(course, result)
        unchanged = {name: record.unchanged_answers(pre.notebook["cells"], assignment.release[name])
                     for name, pre in pres.items() if pre.notebook}
        with record.gradebook(course) as gb:
            record.record_in_gradebook(gb, result, unchanged)
            gb.db.commit()
        neutralize_student_markdown(nb.cells, assignment.release[notebook])
        verdicts = {item.test_id: item for item in result.items if item.notebook == notebook}
        for cell in nb.cells:
            item = verdicts.get(grade_id(cell))
            if item is None:
                continue
            text = record.item_message(item)
            cell.outputs = ([new_output("stream", name="stdout", text=text + "\n")] if item.status == "passed" else
                            [new_output("error", ename=item.status, evalue=text, traceback=[text])])
        return nb, resources


class DropDuplicateIds(DeduplicateIds):
    """nbgrader's ``DeduplicateIds``, which keeps the last of the cells that share a ``grade_id``
    (a pasted cell) and empties the others' nbgrader metadata, whose own ``CheckCellMetadata`` then
    reads the empty metadata as a schema too old and stops ``nbgrader autograde`` for the whole
    class ("nbgrader update ."). This one takes the emptied metadata away, so that the copy is an
    ordinary cell, as it is to ``autograder grade`` (whose preflight reports it)."""

    def preprocess_cell(self, cell, resources, cell_index):
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        if cell.metadata.get("nbgrader") == {}:
            del cell.metadata["nbgrader"]
        return cell, resources


def copy_renamed_notebook(root: str, assignment: str, student: str, notebooks: list[str]) -> None:
    """``nbgrader autograde``'s pre-convert hook (``c.Autograde.pre_convert_hook``), for one
    submission, whose notebooks' paths are ``notebooks`` (``assignment`` and ``student`` are what
    the command line named: patterns). Where the submission lacks the assignment's one notebook
    and holds one other notebook (students rename files), ``autograder grade`` grades that one in
    its place, while nbgrader would skip it and stop at "No notebooks found". So that both grade it,
    it is copied beside itself under the release's name, the student's file left as it is, and
    nbgrader grades the copy; the command's log says so."""
    from autograder.judging.grading import find_notebook

    folder = Path(notebooks[0]).parent
    expected = {path.stem for path in (Path(root) / "release" / folder.name).glob("*.ipynb")}
    for name in expected:
        found = find_notebook(folder, name, expected, [])
        if found is not None and found.stem != name:
            target = folder / f"{name}.ipynb"
            shutil.copyfile(found, target)
            notebooks.append(str(target))
            logging.getLogger("AutogradeApp").warning(
                "%s is not named %s: graded as a copy named %s beside it, as `autograder grade` grades it",
                found, target.name, target.name)


class CanvasCollector(FileNameCollectorPlugin):
    """``nbgrader zip_collect``'s collector (``c.ZipCollectApp.collector_plugin``) for a Canvas
    download. Canvas names a file handed in after its due date ``<name>_LATE_<user id>_...`` and
    gives no time; the course's ``named_regexp`` catches that mark as ``(?P<late>_LATE)``. Where it
    is there, the submission's ``timestamp.txt`` says one second past the student's due date in the
    gradebook (the assignment's, plus the student's extension), so that nbgrader's late rules count
    it late, by the least they can. Without a due date nothing is late, and the log says so."""

    def collect(self, submitted_file: str) -> dict | None:
        info = super().collect(submitted_file)
        if info and info.pop("late", None):
            info["timestamp"] = self.past_due(info["student_id"], submitted_file)
        return info

    def past_due(self, student: str, submitted_file: str) -> datetime.datetime | None:
        """One second past ``student``'s due date, or None (with a warning) where there is none."""
        coursedir = self.parent.coursedir
        due = None
        with Gradebook(coursedir.db_url, coursedir.course_id) as gb:
            try:
                due = gb.find_assignment(coursedir.assignment_id).duedate
                due = gb.find_submission(coursedir.assignment_id, student).duedate  # with the extension
            except MissingEntry:
                pass
        if due is None:
            self.log.warning("Canvas marks %s late, and the gradebook has no due date for %s: it is not late. Set "
                             "one (nbgrader db assignment add %s --duedate=...) and run zip_collect again for the "
                             "mark to count.", submitted_file, coursedir.assignment_id, coursedir.assignment_id)
            return None
        return due + datetime.timedelta(seconds=1)
