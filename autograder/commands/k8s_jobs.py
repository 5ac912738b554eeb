"""The Kubernetes Jobs that grade an assignment in shards and then merge the shards, made from
the templates autograder/commands/k8s/grade-shards.yaml and autograder/commands/k8s/merge.yaml.

A TA prints each Job and applies it with stock kubectl:

    autograder k8s 01_attention_basics --shards 4 | kubectl apply -f -
    kubectl wait --for=condition=complete job/grade-01-attention-basics --timeout=2h
    autograder k8s 01_attention_basics --shards 4 --part merge | kubectl apply -f -

The Jobs come one at a time because plain Kubernetes cannot hold a Job back until another is
complete: applied together, the merge would run before the shards are graded.
"""

import re
from pathlib import Path

import yaml

TEMPLATES = {"grade": Path(__file__).with_name("k8s") / "grade-shards.yaml",
             "merge": Path(__file__).with_name("k8s") / "merge.yaml"}

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
"""A Kubernetes name of at most 63 characters: a Job's name is also the value of a label on its pods."""

MEMORY_PER_WORKER_GIB = 4
"""A student's run may use 4 GiB of address space (runner.RunSettings.memory_bytes, not imported
here because the runner imports torch), and a pod runs one per worker."""


def job_name(assignment: str, part: str) -> str:
    """``grade-01-attention-basics`` for ``01_attention_basics``: lower case, ``_`` as ``-``."""
    base = assignment.lower().replace("_", "-")
    name = f"{part}-{base}"
    if not DNS_LABEL.fullmatch(base) or len(name) > 63:
        raise ValueError(f"the assignment {assignment!r} cannot name a Kubernetes Job: {name!r} must be at "
                         "most 63 letters, digits and '-', starting and ending with a letter or digit")
    return name


def render(assignment: str, shards: int, image: str = "self-attention-grader:latest",
           claim: str = "self-attention-course", workers: int = 2, part: str = "grade") -> str:
    """The YAML of one Job for ``kubectl apply -f -``: ``part="grade"``, the Indexed Job that
    grades ``assignment`` in ``shards`` pods of ``workers`` workers each (one CPU and
    ``MEMORY_PER_WORKER_GIB`` per worker, so that no cell runs out of time waiting for a CPU),
    or ``part="merge"``, the Job to apply once that one is complete. Both run ``image`` on the
    course folder in the volume claim ``claim``.

    The templates keep the Jobs' shape; their placeholders are replaced here in the parsed
    documents, so no value can change the YAML around it.
    """
    if part not in TEMPLATES:
        raise ValueError(f"part must be 'grade' or 'merge', not {part!r}")
    if shards < 1:
        raise ValueError(f"shards must be at least 1, not {shards}")
    if workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    job = yaml.safe_load(TEMPLATES[part].read_text())
    job["metadata"]["name"] = job_name(assignment, part)
    pod = job["spec"]["template"]["spec"]
    container, = pod["containers"]
    container["image"] = image
    volume, = pod["volumes"]
    volume["persistentVolumeClaim"]["claimName"] = claim
    values = {"ASSIGNMENT": assignment, "WORKERS": str(workers), "$(SHARD_INDEX)/SHARDS": f"$(SHARD_INDEX)/{shards}"}
    container["args"] = [values.get(arg, arg) for arg in container["args"]]
    if part == "grade":
        job["spec"]["completions"] = job["spec"]["parallelism"] = shards
        for bound in container["resources"].values():
            bound.update(cpu=str(workers), memory=f"{MEMORY_PER_WORKER_GIB * workers}Gi")
    return yaml.safe_dump(job, sort_keys=False)
