"""The strongest student's attacks on the grader (``tests/attack_class.py``), graded for real:
no attack gives its author a point it did not earn, and none changes another student's grade.

The class is graded once, with one worker, so that every victim is graded in the sandbox of the
attack just before it; the exhaustion test grades an attacker and two victims side by side, with
two workers, on a machine the attacker tries to take for itself.
"""

import json
from pathlib import Path

import nbformat
import pytest

import attack_class
import notebook_tools as tools
from autograder.running import sandbox

A = attack_class.A
pytestmark = pytest.mark.timeout(1800)  # the first test grades the class (about 60 submissions, one worker)


def write_class(root: Path, submissions: dict) -> None:
    from autograder.commands.demo import make_course

    make_course(root, A, generate=False)
    for student, notebook in submissions.items():
        folder = root / "submitted" / student / A
        folder.mkdir(parents=True)
        nbformat.write(nbformat.from_dict(notebook), folder / attack_class.NB)


def reports(root: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (root / "reports" / A).glob("*.json")}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    if sandbox.detect_isolation().name != "bubblewrap":
        pytest.skip(f"needs bubblewrap: {sandbox.detect_isolation().detail}")
    root = tmp_path_factory.mktemp("attacks")
    good = json.loads((attack_class.REPO_SOURCE / attack_class.NB).read_text())
    blank = json.loads((tools.REPO_ROOT / "release" / A / attack_class.NB).read_text())
    attacks = attack_class.attacks(good, blank)
    write_class(root, {attack.student: attack.notebook for attack in attacks})
    tools.grade_course(root, A, workers=1, cell_timeout=20)
    return attacks, reports(root)


def test_there_are_at_least_fifteen_attacks_of_every_kind(graded):
    attacks, _ = graded
    kinds = {prefix: [a for a in attacks if a.student.startswith(prefix) and not a.victim] for prefix in "irt"}
    assert sum(len(found) for found in kinds.values()) >= 15
    assert all(len(found) >= 2 for found in kinds.values()), {k: len(v) for k, v in kinds.items()}


@pytest.mark.parametrize("attack", [a.student for a in attack_class.attacks(
    json.loads((attack_class.REPO_SOURCE / attack_class.NB).read_text()), {}) if not a.victim])
def test_an_attack_earns_nothing(graded, attack):
    attacks, found = graded
    case = next(a for a in attacks if a.student == attack)
    report = found[attack]
    items = {item["grade_id"]: item for item in report["items"]}
    for gid in case.lost:
        assert items[gid]["status"] in attack_class.NOT_PASSED, (gid, items[gid])
        assert items[gid]["score"] == 0, (gid, items[gid])
    if case.flagged:
        assert any(flag.split(": ", 1)[-1].startswith(("Tampering", "Forbidden call", "Refused")) for flag in report["flags"]), \
            report["flags"]


def test_no_victim_loses_a_point_to_the_attack_before_it(graded):
    attacks, found = graded
    victims = [a.student for a in attacks if a.victim]
    assert len(victims) >= 6
    for student in victims:
        report = found[student]
        assert report["total"] == report["max_total"] == 10, (student, [i for i in report["items"]
                                                                        if i["status"] != "passed"])
        assert report["flags"] == [], (student, report["flags"])


def test_no_message_from_a_run_carries_text_the_student_made(graded):
    """Every item message of the class names at most a built-in exception, the line of the
    submitted cell, or the course's own words: the forged event's text and the attacks' own
    strings never appear."""
    _, found = graded
    for report in found.values():
        for item in report["items"]:
            assert "poisoned by an earlier run" not in item["message"]
            assert "forged" not in item["message"]


def test_exhausting_the_machine_costs_a_neighbour_nothing(tmp_path):
    """With two workers, an attack that takes all the memory it can (its process stops at its own
    limit, and the server stops a run whose processes hold more together), and one that keeps a
    core busy for as long as it may (a run cannot start threads or processes, so it holds one core
    at most), are stopped; the two solutions graded beside them keep full marks."""
    if sandbox.detect_isolation().name != "bubblewrap":
        pytest.skip(f"needs bubblewrap: {sandbox.detect_isolation().detail}")
    from hostile_class import replace

    good = json.loads((attack_class.REPO_SOURCE / attack_class.NB).read_text())
    hog = replace(good, "online_softmax", "chunks = []\nwhile True:\n    chunks.append(bytearray(64 * 2**20))\n")
    spin = replace(good, "online_softmax", "while True:\n    pass\n")
    write_class(tmp_path, {"a_memory": hog, "b_victim": good, "c_cpu": spin, "d_victim": good})
    (tmp_path / "nbgrader_config.py").write_text((tmp_path / "nbgrader_config.py").read_text()
                                                 + "\nc.Autograder.memory_bytes = 2 * 2**30\n")
    tools.grade_course(tmp_path, A, workers=2, cell_timeout=10)
    found = reports(tmp_path)
    for student in ("b_victim", "d_victim"):
        lost = [(i["grade_id"], i["status"], i["message"][:300])
                for i in found[student]["items"] if i["status"] != "passed"]
        assert found[student]["total"] == 10 and found[student]["flags"] == [], (lost, found[student]["flags"])
    memory = {item["grade_id"]: item for item in found["a_memory"]["items"]}["online_softmax"]
    assert memory["status"] in ("killed", "error") and "memory" in memory["message"].lower(), memory
    spinning = {item["grade_id"]: item for item in found["c_cpu"]["items"]}["online_softmax"]
    assert spinning["status"] == "timeout", spinning


def test_a_run_that_leaves_the_plan_is_stopped_at_once_and_the_rest_is_graded(graded):
    """A forger's report leaves the plan in every run of its notebook, the second too, where the
    server gives the course's code only once the probes before it have ended. The run is stopped as
    soon as its report leaves the plan; it used to wait for that code until the notebook's whole time
    was spent (240 s), and the backward's items, which build on the forged forward and are the
    solution's, timed out. Now they are graded on the course's forward and keep their points."""
    _, found = graded
    items = {item["grade_id"]: item for item in found["t17_forge_and_return"]["items"]}
    assert items["flash_forward"]["status"] == "tampered"
    assert items["flash_backward"]["status"] == items["backward_memory"]["status"] == "passed", items
