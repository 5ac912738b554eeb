"""Runs a student's notebook code and the probes of each graded item, inside the sandbox.

    python harness.py PLAN.json INPUTS.safetensors OUT_DIR

This file is copied into the sandbox on its own: it imports only the standard library,
torch, safetensors, IPython and :mod:`transformer_lm.probes`, never the grader, the hidden
checks or the reference. It judges nothing. For each code cell of the plan it writes a
``cell_start`` line to ``OUT_DIR/journal.jsonl``, runs the cell in an IPython shell (so
magics work as in Jupyter), writes ``cell_end``; after the answer cell of an item it runs
that item's probe calls and saves each record to ``OUT_DIR/<probe id>.safetensors``.
The trusted side reads the journal to know what finished, and where a run that died
(timeout, memory, segfault, ``os._exit``) was at that moment.
"""

import json
import os
import sys
import time
import traceback

import torch
from IPython.core.interactiveshell import InteractiveShell
from safetensors.torch import load_file, save_file

from transformer_lm import probes

MAX_MESSAGE = 2000
MAX_VALUE = 20000


class Journal:
    """Appends one JSON object per line and flushes at once, so a crash loses nothing."""

    def __init__(self, path: str):
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._dumps, self._write, self._time = json.dumps, os.write, time.time

    def log(self, event: str, **fields) -> None:
        line = self._dumps({"event": event, "time": self._time(), **fields}, default=str) + "\n"
        self._write(self._fd, line.encode("utf-8", "replace"))


def describe(error: BaseException) -> str:
    """``Type: message`` and where in the student's cells it was raised, bounded.

    Only frames of notebook cells are named: the harness and library internals mean
    nothing to a student and are nobody else's business.
    """
    if isinstance(error, probes.ProbeError):
        return str(error)[:MAX_MESSAGE]
    text = "".join(traceback.format_exception_only(type(error), error)).strip()
    cells = [f for f in traceback.extract_tb(error.__traceback__) if f.filename.startswith("<ipython-input")]
    if cells:
        frame = cells[-1]
        text += f" (in {frame.name}, line {frame.lineno} of its cell: {(frame.line or '').strip()})"
    return text[:MAX_MESSAGE]


def unflatten(names: list[str], tensors: dict[str, torch.Tensor], prefix: str) -> dict:
    """Rebuilds probe arguments from ``name`` and ``name/key`` tensors, in plan order."""
    arguments: dict = {}
    for name in names:
        value = tensors[f"{prefix}{name}"]
        if "/" in name:
            outer, inner = name.split("/", 1)
            arguments.setdefault(outer, {})[inner] = value
        else:
            arguments[name] = value
    return arguments


def run_probe(call: dict, namespace: dict, tensors: dict[str, torch.Tensor], pid: str):
    """Resolves the student's objects by name and calls the probe."""
    objects = {}
    for argument, name in call["objects"].items():
        if name not in namespace:
            raise probes.ProbeError(f"{name} is not defined: its cell did not run, or the name was changed.")
        objects[argument] = namespace[name]
    probe = getattr(probes, call["probe"])
    arguments = {**call["arguments"], **unflatten(call["tensor_keys"], tensors, f"{pid}::")}
    torch.set_grad_enabled(True)
    return probe(**objects, **arguments)


def main(plan_path: str, inputs_path: str, out_dir: str) -> None:
    with open(plan_path) as f:
        plan = json.load(f)
    tensors = load_file(inputs_path) if os.path.getsize(inputs_path) else {}
    journal = Journal(os.path.join(out_dir, "journal.jsonl"))
    save, dumps = save_file, json.dumps
    shell = InteractiveShell.instance()
    journal.log("ready")
    for cell in plan["cells"]:
        if cell["index"] not in plan["skip_cells"]:
            journal.log("cell_start", index=cell["index"])
            result = shell.run_cell(cell["source"], store_history=True)
            error = result.error_before_exec or result.error_in_exec
            journal.log("cell_end", index=cell["index"], error=describe(error) if error else None)
        for pid in cell["probes"]:
            if pid in plan["skip_probes"]:
                continue
            journal.log("probe_start", probe=pid)
            try:
                value = run_probe(plan["calls"][pid], shell.user_ns, tensors, pid)
                if isinstance(value, dict) and value and all(isinstance(v, torch.Tensor) for v in value.values()):
                    save({k: probes.plain(v) for k, v in value.items()}, os.path.join(out_dir, f"{pid}.safetensors"))
                    journal.log("probe_end", probe=pid, saved=True)
                else:
                    text = dumps(value, default=str)
                    journal.log("probe_end", probe=pid, value=value if len(text) <= MAX_VALUE else None)
            except BaseException as error:  # noqa: BLE001 - anything a student object raises is a result
                kind = "todo" if isinstance(error, NotImplementedError) else "error"
                journal.log("probe_end", probe=pid, error=describe(error), kind=kind)
    journal.log("done")
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown: student atexit hooks and threads cannot change the outcome


if __name__ == "__main__":
    main(*sys.argv[1:4])
