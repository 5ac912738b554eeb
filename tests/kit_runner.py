"""Run by the student kit's own Python (tests/kit_fixtures.py), where only the kit's package is
installed: executes notebooks in that environment's kernel, and has each stored visible check judge
what each of its catalogued mistakes gives. Imports nothing of the course but the kit's package.

    python kit_runner.py JOBS.json OUT.json

JOBS: {"notebooks": [{"path", "out", "cwd", "allow_errors", "timeout"}], "names": true}, where
``timeout`` is the seconds a cell may take. OUT: where the package came from, whether the reference
can be imported, and for "names" each mistake a stored check was given and the one it named.
"""

import importlib.util
import json
import sys

import nbformat
import torch
from nbclient import NotebookClient

HIDDEN_MODULES = ("transformer_lm.instructor", "transformer_lm.instructor.reference",
                  "transformer_lm.instructor.mistakes", "transformer_lm.instructor.kinds",
                  "transformer_lm.instructor.visible_checks", "autograder")
"""The instructor's modules, which the kit's environment must not be able to import."""


def execute(job: dict) -> None:
    nb = nbformat.read(job["path"], as_version=4)
    NotebookClient(nb, timeout=job["timeout"], kernel_name="python3", allow_errors=job["allow_errors"],
                   resources={"metadata": {"path": job["cwd"]}}).execute()
    nbformat.write(nb, job["out"])


def mistaken_result(judge, given):
    """What a probe would record (and return) for an answer that makes the mistake whose stored
    values are ``given``, for each kind of judge that names mistakes."""
    kind = type(judge).__name__
    if kind == "TokensJudge":
        return {"output": given}, None
    if kind == "DrawsJudge":
        draws = torch.multinomial(given.double(), judge.draws, replacement=True,
                                  generator=torch.Generator().manual_seed(0))
        return {"output": draws.reshape(-1, 1)}, None
    if kind == "WorkJudge":
        full = 100_000
        return {"full.exponentials": torch.tensor(full), "causal.exponentials": torch.tensor(round(given * full)),
                "causal.largest": torch.tensor([], dtype=torch.long)}, None
    if kind == "PaddedTokensJudge":
        return {}, given
    if kind == "ParametersJudge":   # the probe returns the parameters' shapes, as lists
        return None, {name: list(shape) for name, shape in given.items()}
    if kind == "FunctionJudge":
        return {"output": torch.zeros(judge.expected_shape), **given}, None
    return dict(given), None


def same(a, b) -> bool:
    """Whether two stored values (tensors, records, tokens, shares) are the same."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and bool(torch.equal(a.nan_to_num(), b.nan_to_num()))
    return a == b


def shows(judge, given) -> bool:
    """Whether a mistake changes what a record judge compares on this check's inputs (one that
    does not, on a single token say, cannot be named there, and the judge does not try)."""
    expected = getattr(judge, "expected", None)
    if type(judge).__name__ == "ParametersJudge":
        return given != expected
    if type(judge).__name__ == "MaskJudge":
        expected = {"output": expected}
    if not isinstance(given, dict) or not isinstance(expected, dict):
        return True
    from transformer_lm.judging import difference
    return any(key in expected and difference(key, value, expected[key]) for key, value in given.items())


def named_mistakes() -> list[dict]:
    """Each stored check's judge, given each of its mistakes' stored values: what it names, and
    whether what it names gives the same values there (two mistakes a case cannot tell apart)."""
    from transformer_lm import checks

    found = []
    for group, entries in checks.stored_checks()["groups"].items():
        for entry in entries:
            judge = entry["check"].judge
            candidates = dict(getattr(judge, "candidates", None) or {})
            if type(judge).__name__ == "MaskJudge":   # a window one too wide or too narrow, where it differs
                candidates = {judge.mistake: {"output": wrong} for wrong in judge.wrong
                              if not torch.equal(wrong, judge.expected)}
            for mistake, given in candidates.items():
                if not shows(judge, given):
                    continue
                verdict = judge(*mistaken_result(judge, given), True)
                named = verdict.mistake
                found.append({"group": group, "given": mistake.name, "status": verdict.status,
                              "named": named.name if named else None,
                              "same_values": named in candidates and same(candidates[named], given)})
    stored = checks.stored_checks()["fingerprints"]
    for mistake, fingerprint in stored["mistakes"].items():
        verdict = checks.diagnose_fingerprint(fingerprint)
        found.append({"group": "mingpt_attention", "given": mistake.name, "status": verdict.status,
                      "named": verdict.mistake.name if verdict.mistake else None,
                      "same_values": verdict.mistake in stored["mistakes"] and
                      stored["mistakes"][verdict.mistake] == fingerprint})
    return found


def what_it_sees() -> dict:
    """The Python that runs, where its ``transformer_lm`` comes from, its search path, and which of
    :data:`HIDDEN_MODULES` it could import: asked in the runner's process and in the notebooks' kernel."""
    import transformer_lm

    return {"python": sys.executable, "package": transformer_lm.__file__, "path": sys.path,
            "hidden": [name for name in HIDDEN_MODULES if importable(name)]}


def importable(name: str) -> bool:
    """Whether ``name`` could be imported; finding a submodule imports its parent package first,
    and a missing parent is as good an answer as a missing module."""
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def main(jobs_path: str, out_path: str) -> None:
    jobs = json.load(open(jobs_path))
    out = what_it_sees()
    for job in jobs.get("notebooks", []):
        execute(job)
    if jobs.get("names"):
        out["names"] = named_mistakes()
    json.dump(out, open(out_path, "w"))


if __name__ == "__main__":
    main(*sys.argv[1:])
