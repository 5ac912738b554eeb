"""Code that runs next to student code: in the student's kernel and inside the grading sandbox.

Only this folder (and the package's empty ``__init__.py``) is copied into the sandbox, so its
modules import torch, safetensors, matplotlib and each other, and nothing else of
``transformer_lm``: the reference and the checks must stay out of reach of student code there.
"""

PROBE_MODULES = ("probes", "score_blocks", "student_objects", "tensor_trace", "call_trace", "wire")
"""The modules of the probes: the calls, what they do with a student's objects, their traces and how a
call and its record travel. The grader trusts them in the sandbox, and a probe's message may use
their words."""
