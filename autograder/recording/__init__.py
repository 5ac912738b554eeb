"""Stage 4, recording and publishing what grading found.

nbgrader's gradebook and the CSVs (:mod:`~autograder.recording.record`), reports and feedback pages
(:mod:`~autograder.recording.report`, :mod:`~autograder.recording.feedback`, ``templates/``), regrading
(:mod:`~autograder.recording.regrade`), the similarity of answers (:mod:`~autograder.recording.similarity`),
and :mod:`~autograder.recording.pipeline`, which grades a class and records it: the one entry point
of the commands and the service.
"""
