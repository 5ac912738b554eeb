"""Trusted grading of the course's notebooks, never handed to students.

Its folders follow one submission through grading, each importing only the folders before it
(``tests/test_layout.py`` holds that order):

1. :mod:`autograder.reading`: the course, its settings and hidden checks, and the submissions, read as data;
   the preflight that runs nothing.
2. :mod:`autograder.running`: untrusted code in the sandbox: the sandbox itself, the harness that runs
   inside it, the plan of a run and its reply.
3. :mod:`autograder.judging`: a submission's items judged on the trusted side, from what its runs sent back.
4. :mod:`autograder.recording`: the gradebook, reports, feedback pages, the similarity of answers, and the
   pipeline that grades a class and records it.
5. :mod:`autograder.service`: the grading service on JupyterHub, checks before the deadline.
6. :mod:`autograder.commands`: the command line, the demo, the audit, the student kit, nbgrader's hook.

The hidden checks are in ``autograder/checks/`` (one module per assignment), the TA's container in
``autograder/Dockerfile``.
"""

import sys

# jsonschema, which nbformat imports, compiles a grammar of IRIs when ``rfc3987_syntax`` is installed
# (jupyter-events asks for it): 0.7 s, and as much again in garbage collection, at the start of every
# grader process. The grader validates no IRI (nbformat's schemas name no format), so its processes
# do without it, and jsonschema leaves the "iri" format unchecked in them. Importing the pipeline took
# 3.2 s with it and takes 1.9 s (docs/benchmarks.md, "Where a submission's time goes").
sys.modules.setdefault("rfc3987_syntax", None)
