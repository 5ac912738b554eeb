"""The course's hooks into nbgrader's own commands."""

from nbconvert.preprocessors import Preprocessor


class RefuseInKernelGrading(Preprocessor):
    """Stands in for nbgrader's ``Execute`` step in ``nbgrader autograde``.

    nbgrader would run the hidden tests inside the student's kernel, where a patched
    ``torch.allclose`` or an input transformer earns full marks. This course grades through
    a sandbox and a trusted comparison instead, so the in-kernel path stops here and says
    what to run.
    """

    def preprocess(self, nb, resources):
        assignment = resources.get("nbgrader", {}).get("assignment", "ASSIGNMENT")
        raise RuntimeError(
            "This course does not grade inside the student's kernel. Run the trusted grader "
            f"instead:  autograder grade {assignment}   (see README, 'Grading')."
        )
