"""Trusted grading of the course's notebooks: preflight, sandboxed run, compare, record.

Never handed to students: the hidden checks in ``autograder/checks`` live here.
"""
