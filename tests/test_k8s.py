"""The Kubernetes Jobs that `autograder k8s` prints: they pass the Kubernetes schemas strictly
(kubernetes-validate ships them, so no cluster and no network), their command lines are ones
the autograder accepts, and names or counts that would make a broken Job are refused."""

import kubernetes_validate
import pytest
import yaml

from autograder.commands.cli import build_parser
from autograder.commands.k8s_jobs import render

KUBERNETES = kubernetes_validate.latest_version()
CASES = [("01_attention_basics", 4), ("02_multihead_attention", 3), ("04_mingpt", 1)]


def job(assignment: str, shards: int, part: str, **options) -> dict:
    return yaml.safe_load(render(assignment, shards, part=part, **options))


def command(job: dict, index: int = 0):
    """The Job's container command as the autograder parses it, in the pod of completion ``index``."""
    container, = job["spec"]["template"]["spec"]["containers"]
    return build_parser().parse_args([arg.replace("$(SHARD_INDEX)", str(index)) for arg in container["args"]])


@pytest.mark.parametrize("part", ["grade", "merge"])
@pytest.mark.parametrize("assignment, shards", CASES)
def test_the_jobs_pass_the_kubernetes_schemas_strictly(assignment, shards, part):
    kubernetes_validate.validate(job(assignment, shards, part), KUBERNETES, strict=True)


@pytest.mark.parametrize("wrong", [
    lambda manifest: manifest["spec"].update(completions="four"),
    lambda manifest: manifest["spec"].update(shards=4),
    lambda manifest: manifest["spec"]["template"]["spec"]["containers"][0].update(command_line="grade"),
], ids=["completions in words", "unknown field of the Job", "unknown field of the container"])
def test_a_manifest_with_a_wrong_field_fails_the_schemas(wrong):
    broken = job("01_attention_basics", 4, "grade")
    wrong(broken)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES, strict=True)


@pytest.mark.parametrize("assignment, shards", CASES)
def test_the_grade_job_runs_one_shard_per_pod_with_a_command_the_autograder_takes(assignment, shards):
    grade = job(assignment, shards, "grade", workers=3)
    spec = grade["spec"]
    assert grade["metadata"]["name"] == "grade-" + assignment.replace("_", "-")
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] == shards
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["runAsUser"] == 1000
    container, = pod["containers"]
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env["SHARD_INDEX"] == "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    for index in range(shards):
        parsed = command(grade, index)
        assert (parsed.command, parsed.assignment, parsed.course) == ("grade", assignment, "/course")
        assert parsed.shard == (index, shards) and parsed.workers == 3


def test_each_worker_of_a_pod_has_a_cpu_and_the_memory_a_students_run_may_take():
    from autograder.running.runner import RunSettings  # here: it imports torch, which the other tests need not

    container, = job("01_attention_basics", 4, "grade", workers=3)["spec"]["template"]["spec"]["containers"]
    memory = f"{3 * RunSettings().memory_bytes // 2**30}Gi"
    assert container["resources"] == {"requests": {"cpu": "3", "memory": memory},
                                      "limits": {"cpu": "3", "memory": memory}}


def test_the_merge_job_merges_what_the_shards_graded_from_the_same_image_and_volume():
    options = {"image": "registry.example.edu/grader:2026", "claim": "course-fall"}
    grade, merge = (job("02_multihead_attention", 3, part, **options) for part in ("grade", "merge"))
    assert merge["metadata"]["name"] == "merge-02-multihead-attention"
    parsed_grade, parsed_merge = command(grade), command(merge)
    assert parsed_merge.command == "merge"
    assert (parsed_merge.assignment, parsed_merge.course) == (parsed_grade.assignment, parsed_grade.course)
    for each in (grade, merge):
        pod = each["spec"]["template"]["spec"]
        assert pod["containers"][0]["image"] == options["image"]
        assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == options["claim"]


@pytest.mark.parametrize("assignment, shards, options", [
    ("01 attention", 4, {}),
    ("-01_attention_basics", 4, {}),
    ("../01_attention_basics", 4, {}),
    ("", 4, {}),
    ("a" * 58, 4, {}),
    ("01_attention_basics", 0, {}),
    ("01_attention_basics", 4, {"workers": 0}),
    ("01_attention_basics", 4, {"part": "both"}),
])
def test_what_cannot_make_a_working_job_is_refused(assignment, shards, options):
    with pytest.raises(ValueError):
        render(assignment, shards, **options)
