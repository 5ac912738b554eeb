"""The grading service: students check a notebook against the hidden checks before the deadline.

``autograder serve`` runs as a JupyterHub service. Its parts, one job each:

- :mod:`~autograder.service.policy`: what the instructor allows, per assignment (``c.CheckService``).
- :mod:`~autograder.service.roster`: who gets checks, the students of nbgrader's gradebook.
- :mod:`~autograder.service.body`: a POST's body, written to a file under a cap as it comes.
- :mod:`~autograder.service.intake`: what a body sends, a notebook of the course or a refusal (a function of the bytes).
- :mod:`~autograder.service.reading`: runs the intake in child processes bounded in time and memory.
- :mod:`~autograder.service.store`: every request and result, in SQLite; the queue and its fair order.
- :mod:`~autograder.service.worker`: a process that grades requests one after another in a warm sandbox.
- :mod:`~autograder.service.supervisor`: keeps the workers running and puts a dead worker's request back.
- :mod:`~autograder.service.web`: the pages and the API, behind JupyterHub's OAuth.
"""
