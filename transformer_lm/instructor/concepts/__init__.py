"""Concepts added to the course after its first six assignments, one module each.

A concept's module holds its reference (the one correct implementation) and, beside it, its
mistakes: a :class:`transformer_lm.instructor.mistake_family.MistakeFamily` of each mistake's words and the
twin that computes it. Its hidden checks configure the generic kinds
(:class:`transformer_lm.instructor.kinds.CallCheck`,
:class:`transformer_lm.instructor.kinds.ModuleCheck`) with both. Like the reference, these modules stay on the
instructor's side: students receive what :mod:`transformer_lm.instructor.make_test_values` stores from them.
docs/adding-an-assignment.md ("A new concept") gives the steps.
"""
