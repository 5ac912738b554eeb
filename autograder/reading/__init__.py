"""Stage 1, reading: the course and its submissions as data; nothing here runs student code.

The course folder and its settings (:mod:`~autograder.reading.course`, :mod:`~autograder.reading.config`), an
assignment's hidden checks loaded and prepared (:mod:`~autograder.reading.spec`, :mod:`~autograder.reading.assignment`,
:mod:`~autograder.reading.course_code`), notebooks read as untrusted JSON (:mod:`~autograder.reading.notebook_data`,
:mod:`~autograder.reading.cells`), the preflight (:mod:`~autograder.reading.preflight`,
:mod:`~autograder.reading.forbidden`), and the words every later stage may say: results, the closed catalogue
of messages, faults and sanitised text.
"""
