"""Runs of plain cells in a warm sandbox (``runner.Worker``), for the tests that attack what runs
share: a plan of cells without probes, the errors and output of a run, and a value it printed."""

import textwrap


def plan(*sources):
    return {"cells": [{"index": i, "source": textwrap.dedent(s), "probes": []} for i, s in enumerate(sources)],
            "calls": {}, "skip_cells": [], "skip_probes": [], "watch": {}}


def run(worker, *sources):
    """Runs the cells; returns their errors and what they printed."""
    reply, read = worker.run(plan(*sources), {}, 60, None)
    events = worker.events(read)
    errors = [e["error"] for e in events if e["event"] == "cell_end" and e.get("error")]
    assert any(e["event"] == "done" for e in events), (reply, errors)
    return errors, reply.output


def printed(output, key):
    line = next(line for line in output.splitlines() if line.startswith(key))
    return eval(line[len(key) + 1:])  # a literal printed by the cell
