"""nbgrader configuration of the course; run nbgrader from the repository root.

The repository is the course folder: solution notebooks in source/, generated student
notebooks in release/. Grading state (gradebook.db, submitted/, autograded/, feedback/)
is created here too and never committed.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nbconvert.preprocessors import ClearMetadataPreprocessor  # noqa: E402
from nbgrader.preprocessors import (AssignLatePenalties, CheckCellMetadata, IgnorePattern,  # noqa: E402
                                    LimitOutput, SaveAutoGrades)

from autograder.commands.nbgrader_hooks import TrustedGrading  # noqa: E402

c = get_config()  # noqa: F821 - injected by traitlets

c.CourseDirectory.course_id = "self-attention"
c.CourseDirectory.root = str(Path(__file__).resolve().parent)
c.CourseDirectory.source_directory = "source"
c.CourseDirectory.release_directory = "release"
c.CourseDirectory.db_url = "sqlite:///" + str(Path(__file__).resolve().parent / "gradebook.db")
# What the exchange copies (release_assignment, fetch_assignment, submit, collect).
# Data files that travel with the notebooks (none yet) are listed per assignment;
# everything else in source/ stays there. `submit` adds timestamp.txt and
# submission_secret.txt to each submission, and `collect` must keep them: `autograde` reads
# the first (late penalties), `release_feedback` needs both.
c.CourseDirectory.include = ["*.ipynb", "timestamp.txt", "submission_secret.txt"]

# `nbgrader zip_collect` of a Canvas "Download Submissions" zip (in downloaded/<assignment>/archive/).
# Canvas names each file <name>[_LATE]_<user id>_<file id>_<file name>, with -1, -2, ... added to
# a file name the student uploaded before. The student id is the Canvas user id: names are not
# unique, and the id is what Canvas's grade import matches. The pattern is matched against the
# extracted file's whole path.
c.FileNameCollectorPlugin.named_regexp = (
    r".*/[^/]*?(?:_LATE)?_(?P<student_id>\d+)_\d+_(?P<file_id>[^/]+?)(?:-\d+)?\.ipynb$")

# What students see in place of solutions.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Student notebooks run top to bottom well within this; a cell that needs longer is stuck.
c.ExecutePreprocessor.timeout = 120
c.Execute.timeout = 120

# Markdown and outputs from submissions are untrusted: strip active content from the
# HTML that nbgrader renders (formgrader, feedback).
c.HTMLExporter.sanitize_html = True

# `nbgrader autograde` would run hidden tests in the student's own kernel, where one line of
# student code can fake a pass. Here its execute step is the trusted pipeline of `autograder
# grade` (sandboxed run, trusted comparison); nbgrader's other steps record the result.
c.TrustedGrading.course_root = str(Path(__file__).resolve().parent)
c.Autograde.autograde_preprocessors = [
    TrustedGrading, IgnorePattern, ClearMetadataPreprocessor, LimitOutput, SaveAutoGrades, AssignLatePenalties,
    CheckCellMetadata,
]
