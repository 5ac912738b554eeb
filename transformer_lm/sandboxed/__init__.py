"""Code that runs next to student code: in the student's kernel and inside the grading sandbox.

Only this folder (and the package's empty ``__init__.py``) is copied into the sandbox, so its
modules import torch, safetensors, matplotlib and each other, and nothing else of
``transformer_lm``: the reference and the checks must stay out of reach of student code there.
"""
