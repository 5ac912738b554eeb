"""Stage 2, running: untrusted code, in a sandbox, on the course's hidden inputs.

:mod:`~autograder.running.sandbox` confines a process (bubblewrap, its own uid, its limits);
:mod:`~autograder.running.harness` runs inside it and never imports the trusted side;
:mod:`~autograder.running.run_plan` says what a run does, :mod:`~autograder.running.runner` drives a warm
sandbox per worker, and :mod:`~autograder.running.run_reply` and :mod:`~autograder.running.journal` read what
came back as untrusted data.
"""
