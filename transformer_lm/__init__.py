"""The course's package, in three parts that differ in who has them and where they may run.

``transformer_lm/sandboxed/`` (probes, public test values, heat maps, the decoder scaffold) is the
only code that runs next to student code inside the grading sandbox: it imports torch,
safetensors and matplotlib, nothing else of this package.

The student part (everything in this folder but ``instructor/``: the visible checks and their
stored values, the judges, the catalogue of mistakes in words, the forbidden-call checks, the "Check
with the grader" extension) runs in the student's kernel, where it only helps, and in the grader's
trusted process, where it judges. It is what students receive: the student kit's wheel is built
from this folder without ``instructor/`` (``autograder/commands/student_kit.py``).

The instructor's part, ``transformer_lm/instructor/`` (the reference, what each mistake computes,
the cases and kinds of check, the table of visible checks and the script that stores them),
prepares checks with the reference; it stays with the instructor and the grader, and nothing of
the student part imports it. The grader itself lives in the ``autograder`` package, which students
are never given.

This file imports nothing: it is copied into the sandbox as it is.
"""
