"""The instructor's side of the course package: it stays with the instructor and the grader.

The reference (the one correct implementation of each concept), what each catalogued mistake
computes, the cases and kinds of check that prepare hidden and visible checks with the reference,
the table of visible checks and the script that stores the public values
(``python -m transformer_lm.instructor.make_test_values``). The student package (``transformer_lm``
outside this folder) never imports it; ``tests/test_layout.py`` holds that.
"""
