"""The course's hook into ``nbgrader autograde``: the trusted pipeline in place of ``Execute``.

nbgrader would run the hidden tests inside the student's kernel, where a patched
``torch.allclose`` or an input transformer earns full marks. In this course the autograde
step instead grades the submitted notebook the way ``autograder grade`` does (preflight,
sandboxed run, trusted comparison) and writes each item's verdict into its visible test
cell: a passed item as plain text, anything else as an error output. nbgrader's own
``SaveAutoGrades`` then gives full points to a test cell without an error and none to one
with an error, which is exactly the grader's all-or-nothing score per item; so the
gradebook, formgrader and feedback see the same grades either way.
"""

from __future__ import annotations

from pathlib import Path

from nbconvert.preprocessors import Preprocessor
from nbformat.v4 import new_output
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
    """Grades the notebook with the trusted pipeline and records the results in its test cells."""

    course_root = Unicode("", help="The course folder (where nbgrader_config.py is).").tag(config=True)
    enabled = Bool(True, help="nbconvert skips preprocessors that are not enabled: this one must run.")

    def preprocess(self, nb, resources):
        # Imported here: nbgrader loads this module with the course's config for every command.
        from autograder.recording import pipeline
        from autograder.judging.grading import grade_class
        from autograder.reading.results import write_report
        from autograder.reading.sanitize import neutralize_student_markdown

        info = resources.get("nbgrader", {})
        assignment_name, student, notebook = info.get("assignment"), info.get("student"), info.get("notebook")
        root = Path(self.course_root or ".").resolve()
        course = _course(root, self.config)
        isolation = pipeline.isolation_for(course)
        assignment = _assignment(course, assignment_name)
        # Only the grading half of the pipeline and the JSON report: the autograded notebook, the
        # gradebook and the feedback are nbgrader's to write in this flow.
        [(result, _)] = grade_class(course, assignment, [student], isolation)
        write_report(course, result)
        items = [item for item in result.items if item.notebook == notebook]
        neutralize_student_markdown(nb.cells, assignment.release[notebook])
        verdicts = {f"{item.grade_id}_test": item for item in items}
        for cell in nb.cells:
            item = verdicts.get(grade_id(cell))
            if item is None:
                continue
            text = f"[{item.status}] {item.message}" + (f"\nHint: {item.hint}" if item.hint else "")
            if item.status == "passed" and item.deduction:
                # nbgrader reads a number in a test cell's result as partial credit.
                cell.outputs = [new_output("stream", name="stdout", text=f"{text}\nDeduction, {item.deduction}\n"),
                                new_output("execute_result", data={"text/plain": f"{item.score:g}"}, execution_count=1)]
            elif item.status == "passed":
                cell.outputs = [new_output("stream", name="stdout", text=text + "\n")]
            else:
                cell.outputs = [new_output("error", ename=item.status, evalue=text, traceback=[text])]
        return nb, resources
