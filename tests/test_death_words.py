"""How a run ended is told in fixed words: a run that ends itself by a signal, or by an exit code,
chooses that number, so a number would carry a hidden input out (``os.kill(os.getpid(), 34 + T % 30)``
showed the hidden T as "killed (signal 39)" before the deadline). A run is killed by its own code with
each signal from 1 to 64 in a warm sandbox, and its ending is read as the runner reads it
(:func:`autograder.running.run_reply.ending`): the text is always one of the catalogue's fixed deaths,
and never holds the number.
"""

import pytest

import warm_runs
from autograder.reading.messages import DEATH
from autograder.running import journal, runner, sandbox
from autograder.running.run_reply import ending

ISOLATION = sandbox.detect_isolation()
CELL_SECONDS = 5.0
FIXED = {DEATH["crashed"], DEATH["killed"], DEATH["exited"], DEATH["lost"],
         DEATH["too_long"].replace("{seconds:number}", f"{CELL_SECONDS:.0f}")}


@pytest.fixture(scope="module")
def worker():
    if ISOLATION.name != "bubblewrap":
        pytest.skip(ISOLATION.detail)
    with runner.Worker(runner.RunSettings(), ISOLATION) as worker:
        warm_runs.run(worker, "pass")   # the sandbox starts (and imports torch) outside the runs' few seconds
        yield worker


def told(worker, source: str) -> tuple[str, str]:
    """The status and words the runner gives a run whose only cell is ``source`` (``finished`` and no
    words when the run ended as planned)."""
    plan = warm_runs.plan(source)
    reply, read = worker.run(plan, {}, CELL_SECONDS, None)
    reading = journal.read(worker.events(read), plan)
    if reading.done:
        return "finished", ""   # a signal whose default is to be ignored
    status, message, _ = ending(reading, reply, False, CELL_SECONDS, runner.RunSettings().memory_bytes)
    if reply.timed_out:
        warm_runs.run(worker, "pass")   # a run out of time ends its sandbox: the next starts outside the few seconds
    return status, message


def test_every_signal_a_run_sends_itself_is_told_in_fixed_words(worker):
    seen = {}
    for number in range(1, 65):
        seen[number] = told(worker, f"import os\nos.kill(os.getpid(), {number})\n")
    strange = {n: told_ for n, told_ in seen.items() if told_[1] not in FIXED | {""}}
    assert not strange, strange
    assert seen[11] == ("killed", DEATH["crashed"]) and seen[9] == ("killed", DEATH["killed"])
    assert seen[39] == ("killed", DEATH["killed"]) and seen[19][0] == "timeout"   # a stopped run runs out of time
    assert seen[17] == ("finished", "")


@pytest.mark.parametrize("code", [0, 3, 39, 255])
def test_an_exit_code_a_run_chooses_is_never_told(worker, code):
    status, message = told(worker, f"import os\nos._exit({code})\n")
    assert (status, message) == ("error", DEATH["exited"]) and str(code) not in message
