"""nbgrader configuration of the course; run nbgrader from the repository root.

The repository is the course folder: solution notebooks in source/, generated student
notebooks in release/. Grading state (gradebook.db, submitted/, autograded/, feedback/)
is created here too and never committed.
"""

import sys
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nbconvert.preprocessors import ClearMetadataPreprocessor  # noqa: E402
from nbgrader.preprocessors import (AssignLatePenalties, CheckCellMetadata, ClearOutput, IgnorePattern,  # noqa: E402
                                    LimitOutput, OverwriteCells, OverwriteKernelspec)

from autograder.commands.nbgrader_feedback import GraderPages, ReleaseFeedback  # noqa: E402
from autograder.commands.nbgrader_hooks import (CanvasCollector, DropDuplicateIds, TrustedGrading,  # noqa: E402
                                                copy_renamed_notebook)

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
# extracted file's whole path. Canvas gives no time, only the _LATE mark: the course's collector
# writes a timestamp.txt one second past the student's due date for it (set the due date first).
c.ZipCollectApp.collector_plugin = CanvasCollector
c.FileNameCollectorPlugin.named_regexp = (
    r".*/[^/]*?(?P<late>_LATE)?_(?P<student_id>\d+)_\d+_(?P<file_id>[^/]+?)(?:-\d+)?\.ipynb$")

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
# student code can fake a pass. Here its execute and save steps are the trusted pipeline of
# `autograder grade` (sandboxed run, trusted comparison, the same recording); nbgrader's own steps
# record the submission's time and the late penalty, for both commands alike. A lone notebook under
# another name is graded by both: autograde grades a copy under the release's name. A pasted graded
# cell is an ordinary cell to both (nbgrader's own DeduplicateIds would stop the class).
c.TrustedGrading.course_root = str(Path(__file__).resolve().parent)
c.Autograde.autograde_preprocessors = [
    TrustedGrading, IgnorePattern, ClearMetadataPreprocessor, LimitOutput, AssignLatePenalties, CheckCellMetadata,
]
c.Autograde.sanitize_preprocessors = [
    ClearOutput, DropDuplicateIds, OverwriteKernelspec, OverwriteCells, CheckCellMetadata,
]
c.Autograde.pre_convert_hook = partial(copy_renamed_notebook, str(Path(__file__).resolve().parent))

# Late work (nbgrader's own settings, which `autograder grade` applies too): a due date per assignment
# (nbgrader db assignment add NAME --duedate="2026-01-20 17:00:00 UTC"), extensions per student in the
# gradebook (nbgrader's Gradebook.grant_extension), and the penalty, nbgrader's LateSubmissionPlugin:
# c.LateSubmissionPlugin.penalty_method = "zero" takes all of a late notebook's points ("none", the
# default, takes none), and c.AssignLatePenalties.plugin_class = "module.ClassName" puts a plugin of
# the course's own in its place.

# formgrader's "Generate Feedback" button (nbgrader's GenerateFeedback, as `nbgrader generate_feedback`)
# writes the pages that `autograder feedback` writes, in place of nbgrader's own over them.
c.GenerateFeedback.exporter_class = GraderPages
c.GenerateFeedback.preprocessors = []
c.GraderPages.course_root = str(Path(__file__).resolve().parent)
# `nbgrader release_feedback` releases every student it can and names those it cannot (no timestamp.txt
# or submission_secret.txt: a submission that did not come through the exchange), where nbgrader's own
# stops the class at the first of them.
c.ExchangeFactory.release_feedback = ReleaseFeedback
