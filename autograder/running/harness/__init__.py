"""The harness: the only code of the grader that runs inside the sandbox, next to student code.

The trusted side copies this package into the sandbox as ``harness`` and starts
:mod:`~autograder.running.harness.serve` there. It imports only the standard library, torch,
safetensors, IPython and ``transformer_lm/sandboxed``; never the grader, the hidden checks or the
reference, and it judges nothing.

* :mod:`~autograder.running.harness.serve`: the warm server, one per sandbox, that starts every run;
* :mod:`~autograder.running.harness.isolate`: each run's namespaces, starting state and resource watch;
* :mod:`~autograder.running.harness.run`: a run: the notebook's cells and the probes of its items;
* :mod:`~autograder.running.harness.report`: how a run reports to the server, which alone writes results.
"""
