"""The one error the grader raises for a problem of the course or the command.

A submission's faults never raise: they become statuses of its items. What does raise is
what stops a whole run (no sandbox, no hidden checks for the assignment, a damaged release,
a gradebook nbgrader cannot prepare), and its message says what to do. Only the command line
turns it into an exit status; through ``nbgrader autograde`` it reaches nbgrader's own error
handling like any other exception.
"""


class GradingError(Exception):
    """The course or the command is not ready to grade; the message says what to do."""
