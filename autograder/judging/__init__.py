"""Stage 3, judging: a submission graded, its items judged on the trusted side.

:mod:`~autograder.judging.grading` grades one submission and a class (preflight, runs, judging);
:mod:`~autograder.judging.judge` turns what a run sent back into an item's status, score and message.
"""
