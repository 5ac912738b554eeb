"""Stage 6, the commands: what instructors and TAs type.

:mod:`~autograder.commands.cli` (``autograder ...``), :mod:`~autograder.commands.demo`,
:mod:`~autograder.commands.audit`, :mod:`~autograder.commands.validate`, :mod:`~autograder.commands.student_kit`,
:mod:`~autograder.commands.k8s_jobs` (with the manifests in ``k8s/``) and nbgrader's autograde hook
(:mod:`~autograder.commands.nbgrader_hooks`).
"""
