"""The grading service: students check a notebook against the hidden checks before the deadline.

``autograder serve`` runs as a JupyterHub service. Its parts, one job each:

- :mod:`~autograder.service.policy`: what the instructor allows, per assignment (``c.CheckService``).
- :mod:`~autograder.service.store`: every request and result, in SQLite; the queue and its fair order.
- :mod:`~autograder.service.worker`: a process that grades requests one after another in a warm sandbox.
- :mod:`~autograder.service.supervisor`: keeps the workers running and puts a dead worker's request back.
- :mod:`~autograder.service.web`: the pages and the API, behind JupyterHub's OAuth.
"""
