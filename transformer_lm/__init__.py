"""The course's package, in two parts that differ in where they may run.

``transformer_lm/sandboxed/`` (probes, public test values, heat maps) is the only code that runs
next to student code inside the grading sandbox: it imports torch, safetensors and matplotlib,
nothing else of this package. Everything at this level (the reference, the catalogue of mistakes,
the cases and check kinds, the visible checks) runs in the student's own kernel, where it only
helps, and in the grader's trusted process, where it judges; it is never copied into the sandbox.
The grader itself lives in the ``autograder`` package, which students are never given.

This file imports nothing: it is copied into the sandbox as it is.
"""
