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

import functools
from pathlib import Path

from nbconvert.preprocessors import Preprocessor
from nbformat.v4 import new_output
from traitlets import Bool, Unicode


@functools.cache
def _assignment(root: Path, name: str):
    """The assignment's hidden checks, prepared once per ``nbgrader autograde`` run rather than
    once per notebook."""
    from autograder import grading

    return grading.Assignment.load(grading.Course(root), name)


class TrustedGrading(Preprocessor):
    """Grades the notebook with the trusted pipeline and records the results in its test cells."""

    course_root = Unicode("", help="The course folder (where nbgrader_config.py is).").tag(config=True)
    enabled = Bool(True, help="nbconvert skips preprocessors that are not enabled: this one must run.")

    def preprocess(self, nb, resources):
        from autograder import grading, record, runner, sandbox

        info = resources.get("nbgrader", {})
        assignment_name, student, notebook = info.get("assignment"), info.get("student"), info.get("notebook")
        isolation = sandbox.detect_isolation()
        if isolation.name == "none":
            raise RuntimeError(f"No sandbox for student code ({isolation.detail}). Install bubblewrap, or use "
                               f"`autograder grade {assignment_name} --unsafe-no-sandbox` inside a container.")
        course = grading.Course(Path(self.course_root or "."))
        assignment = _assignment(course.root, assignment_name)
        path = course.submission_folder(assignment_name, student) / f"{notebook}.ipynb"
        with runner.Worker(runner.RunSettings(), isolation) as worker:
            items, _ = grading.grade_notebook(assignment, notebook, path if path.exists() else None, worker)
        record.neutralize_student_markdown(nb.cells, assignment.release[notebook])
        verdicts = {f"{item.grade_id}_test": item for item in items}
        for cell in nb.cells:
            item = verdicts.get(cell.metadata.get("nbgrader", {}).get("grade_id"))
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
