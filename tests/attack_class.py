"""A class of assignment 05 written by the strongest student in the class, who has read the
grader: attacks on the sandbox, on the course's code and on the trace, each with what it must get.

Three kinds, each a submission of its own:

* ``i..``: attacks on the runs after this one (the server's limits, priority and CPU set, signals,
  files, the report channel, background work). Each is the solution plus a cell of attack; the
  solution submission graded right after it, in the same sandbox (``i.._victim``), must get full
  marks, as it would alone.
* ``r..``: reaching for the course's code or hidden material: its answer uses what it finds, and
  gets nothing from it.
* ``t..``: turning the trace off or forging what the run reports, to call the library version of
  ``flash_forward`` or to hide the memory it holds. The item it cheats on is lost, and where the
  grader saw the attempt, the submission is flagged.

``tests/test_attacks.py`` grades the class with one worker (every victim shares the sandbox of the
attack before it) and checks each case.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from autograder.commands import demo
from autograder.reading.cells import grade_id
from hostile_class import add_cell, replace

A = "05_efficient_attention"
REPO_SOURCE = Path(__file__).resolve().parents[1] / "source" / A
NB = "efficient_attention.ipynb"
ITEMS = ["online_softmax", "flash_forward", "flash_memory", "causal_skipping", "flash_backward", "backward_memory"]
NOT_PASSED = {"failed", "error", "forbidden", "tampered", "killed", "timeout"}


@dataclass
class Attack:
    """One attack and what it must get: ``lost`` items end in none but ``NOT_PASSED``;
    ``flagged``, the submission carries a tampering or forbidden-call flag; a ``victim`` (the
    solution, graded right after in the same sandbox) gets full marks."""

    student: str
    notebook: dict
    lost: set[str] = field(default_factory=set)
    flagged: bool = False
    victim: bool = False


# The library's attention, as flash_forward must return it: (out, lse). Each trace attack reaches
# scaled_dot_product_attention another way (CALL is replaced), and computes lse with a full matrix.
LIBRARY_FLASH = '''import math


def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
    {setup}
    out = {call}
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.masked_fill(torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return out, torch.logsumexp(scores, dim=-1)
'''
SDPA = 'getattr(F, "noitnetta_tcudorp_tod_delacs"[::-1])(q, k, v, is_causal=causal)'
"""The library's attention under a name made at run time: no scan of the text sees it, so each attack
meets the trace and what guards it."""


def library_flash(call: str = SDPA, setup: str = "pass") -> str:
    return LIBRARY_FLASH.format(call=call, setup=setup)


INTERFERENCE = {
    "i01_limits": '''import os, resource
for pid in range(1, 400):
    for limit in (resource.RLIMIT_FSIZE, resource.RLIMIT_NOFILE, resource.RLIMIT_AS, resource.RLIMIT_NPROC):
        try:
            resource.prlimit(pid, limit, (1024, 1024))
        except (OSError, ValueError):
            pass
''',
    "i02_priority": '''import os
for pid in range(1, 400):
    for reach in (lambda: os.setpriority(os.PRIO_PROCESS, pid, 19), lambda: os.sched_setaffinity(pid, {0}),
                  lambda: os.setpriority(os.PRIO_PGRP, pid, 19)):
        try:
            reach()
        except OSError:
            pass
try:
    os.setpriority(os.PRIO_USER, os.getuid(), 19)
except OSError:
    pass
''',
    "i03_signals": '''import os, signal
for pid in range(1, 400):
    if pid != os.getpid():
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except OSError:
                pass
''',
    "i04_files": '''import os
poison = "raise SystemExit('poisoned by an earlier run')\\n"
for folder in ("/tmp", "/scratch", "/dev/shm", os.path.expanduser("~")):
    for name in ("numpy.py", "sitecustomize.py", "matplotlib.py", "usercustomize.py"):
        try:
            with open(os.path.join(folder, name), "w") as f:
                f.write(poison)
        except OSError:
            pass
os.makedirs("/scratch/.ipython/profile_default/startup", exist_ok=True)
with open("/scratch/.ipython/profile_default/startup/00-poison.py", "w") as f:
    f.write(poison)
''',
    "i05_background": '''import os, subprocess, sys, threading, signal, _thread, _posixsubprocess
started = []
for start in (lambda: subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"]),
              os.fork, lambda: threading.Thread(target=lambda: None).start(),
              lambda: _thread.start_new_thread(lambda: None, ()),
              lambda: _posixsubprocess.fork_exec(*([None] * 23)),
              lambda: signal.signal(signal.SIGALRM, lambda *a: None), lambda: signal.alarm(1)):
    try:
        start()
        started.append(True)
    except Exception:
        pass
''',
    "i06_report_channel": '''import os, stat
for fd in range(3, 64):
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.write(fd, b"E\\x00\\x00\\x00\\x20" + b'{"event": "done", "forged": 1}  ')
            os.close(fd)
    except OSError:
        pass
''',
}

READING = {
    # The reference is not importable, the plan carries no course code, the stages are hidden and
    # /proc is empty: the backward it finds is None, and the item is lost.
    "r01_reference_files": '''import glob, os
FOUND = None
for path in ["/grader/in/plan.json", "/grader/in/course/stages.json", *glob.glob("/grader/**/*.py", recursive=True),
             *glob.glob("/grader/**/*.json", recursive=True), "/proc/1/cmdline", "/proc/self/mountinfo",
             "/proc/self/environ"]:
    try:
        text = open(path).read()
    except OSError:
        continue
    if "def flash_backward" in text:
        namespace = {}
        exec(text[text.index("def flash_backward"):].split("\\nclass ")[0], {**globals()}, namespace)
        FOUND = namespace.get("flash_backward")
''',
    # In the run that puts the course's flash_forward in place of a wrong one, the course's code
    # holds the stand-ins below flash_backward, never the reference's backward.
    "r02_reference_module": '''FOUND = None
try:
    import transformer_lm.instructor.reference as course
    FOUND = course.flash_backward
except Exception:
    pass
''',
}
USE_FOUND_BACKWARD = '''def flash_backward(q, k, v, out, lse, grad_out, causal=False, block_q=16, block_k=16):
    if FOUND is None:
        return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    return FOUND(q, k, v, out, lse, grad_out, causal, block_q, block_k)
'''

CTYPES_THAW = f"""import ctypes, torch
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack


def unseen(self, func, types, args=(), kwargs=None):
    return func(*args, **(kwargs or {{}}))


def sdpa_unseen(q, k, v, causal):
    for mode in [*_get_current_dispatch_mode_stack(), *torch.overrides._get_current_function_mode_stack()]:
        cls = type(mode)
        ctypes.memmove(id(cls) + 168, (cls.__flags__ & ~(1 << 8)).to_bytes(8, "little"), 8)
        for name in ("dispatch", "function"):
            setattr(cls, "__torch_" + name + "__", unseen)
    return {SDPA}
"""

TRACE_OFF = library_flash(call="sdpa()", setup=f"def sdpa():\n        with torch._C._DisableTorchDispatch(), "
                                              f"torch._C.DisableTorchFunction():\n            return {SDPA}")

TRACE_OFF_UNSEEN = library_flash(
    call="sdpa()", setup="def sdpa():\n        off = [getattr(torch._C, name[::-1])() for name in "
                         "('hctapsiDhcroTelbasiD_', 'noitcnuFhcroTelbasiD')]\n"
                         f"        with off[0], off[1]:\n            return {SDPA}")
"""The trace turned off as in t03, under names made at run time: only the profiler's witness sees it."""

TRACE = {
    # the trace's own machinery patched in a cell before the answer
    "t01_patch_push": ("import torch\ntorch._C._push_on_torch_function_stack = lambda mode: None\n"
                       "torch._C._push_on_torch_dispatch_stack = lambda mode: None\n", library_flash()),
    "t02_pop_modes": (None, library_flash(
        call="sdpa()", setup="def sdpa():\n        f, d = torch._C._pop_torch_function_stack(), "
                             "torch._C._pop_torch_dispatch_stack()\n        try:\n            return "
                             f"{SDPA}\n        finally:\n            torch._C._push_on_torch_dispatch_stack(d)\n"
                             "            torch._C._push_on_torch_function_stack(f)")),
    "t03_disable_dispatch": (None, TRACE_OFF),
    "t04_kernel_caller": (None, library_flash(
        call="torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default._op_dk("
             "torch._C.DispatchKey.CPU, q, k, v, 0.0, causal)[0]")),
    "t05_redispatch": (None, library_flash(
        call="torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default.redispatch("
             "torch._C.DispatchKeySet(torch._C.DispatchKey.CPU), q, k, v, 0.0, causal)[0]")),
    "t06_private_kernel": (None, library_flash(   # by a name made at run time: a named call is forbidden by its text
        call="getattr(torch.ops.aten, '_scaled_dot_product_flash' + '_attention_for_cpu')(q, k, v, 0.0, causal)[0]")),
    "t07_other_cell_name": (None, library_flash(
        call="fake(q, k, v, causal)",
        setup="namespace = {'F': F}\n    exec(compile('def fake(q, k, v, causal):\\n    return "
              "getattr(F, \"noitnetta_tcudorp_tod_delacs\"[::-1])(q, k, v, is_causal=causal)\\n', "
              "'<ipython-input-1-fake>', 'exec'), namespace)\n    fake = namespace['fake']")),
    "t08_record_function_off": (None, library_flash(
        call="sdpa()", setup="def sdpa():\n        torch._C._autograd._enable_record_function(False)\n"
                             "        with torch._C._DisableTorchDispatch(), torch._C.DisableTorchFunction():\n"
                             f"            return {SDPA}")),
    # ctypes writes memory without an audit event: clear the frozen flag of the trace's classes, then
    # make them pass every call on unseen (type_objects.disarm_ctypes leaves memmove uncallable)
    "t09_ctypes": (CTYPES_THAW, library_flash(call="sdpa_unseen(q, k, v, causal)")),
    "t10_gc_objects": ("import gc\nTRACES = [o for o in gc.get_objects() if type(o).__name__ == 'FunctionNames']\n",
                       library_flash()),
    "t11_settrace": ("import sys\nsys.settrace(lambda *a: None)\n", library_flash()),
    "t12_code_swap": ("from transformer_lm.sandboxed import student_objects\n"
                      "student_objects.plain.__code__ = (lambda t: t).__code__\n",
                      library_flash()),
    "t13_reload": ("import importlib, torch.nn.functional\nimportlib.reload(torch.nn.functional)\n", library_flash()),
    "t14_profiler_left_on": ("import torch\ntorch.autograd.profiler.profile().__enter__()\n", library_flash()),
    "t15_frozen_classes": ("import torch\nfrom torch.utils._python_dispatch import TorchDispatchMode\n"
                           "try:\n    TorchDispatchMode.__enter__ = lambda self: self\nexcept TypeError:\n    pass\n"
                           "try:\n    torch.Tensor.backward = lambda *a, **k: None\nexcept TypeError:\n    pass\n",
                           library_flash()),
    "t16_guard_code": ("import torch\nORIGINAL = torch.ops.aten._softmax.default._op_dk.__code__.co_consts\n",
                       library_flash()),
    # the profiler's events made to name nothing, so that the trace turned off has no witness
    "t19_blind_witness": ("import torch\nevents = torch._C._autograd.ProfilerEvent\ntry:\n"
                          "    setattr(events, 'name', lambda self: 'nothing')\nexcept TypeError:\n    pass\n",
                          TRACE_OFF_UNSEEN),
}
UNSEEN = {"t02_pop_modes", "t09_ctypes", "t14_profiler_left_on"}
"""Trace attacks that lose the item without a flag, since they fail before they reach the absent
library: popping the modes fails where no trace is on (the capped calls run untraced), ctypes
refuses its calls (which raise no audit event to flag), and a profiler left on fails the probe."""

# Forging the report: the run sends its own end of the probe it is in (with a record of its own
# making), then returns as usual (the real end follows), or dies at once.
FORGE = '''import os, stat, json
from safetensors.torch import save


def forge():
    for fd in range(3, 64):
        try:
            if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                continue
        except OSError:
            continue
        payload = json.dumps({{"event": "probe_end", "probe": "flash_forward.0", "saved": True}}).encode()
        os.write(fd, b"E" + len(payload).to_bytes(4, "big") + payload)
    {after}
'''
FORGING_FLASH = library_flash(call=f"(forge(), {SDPA})[1]", setup="pass")

# Hiding memory: the forward builds the whole score matrix (its reductions run along tiles, so
# the matrix's shape and the bytes it holds are all that give it away), then takes the trace's totals down.
MEMORY_FLASH = '''import math, sys


def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
    {before}
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])               # (B, H, T, T): the whole matrix
    if causal:
        scores = scores.masked_fill(torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    padded = F.pad(scores, (0, -scores.shape[-1] % block_k), value=float("-inf"))
    tiles = padded.unflatten(-1, (-1, block_k))                             # (B, H, T, T / block_k, block_k)
    lse = torch.logsumexp(torch.logsumexp(tiles, dim=-1), dim=-1)           # reductions no longer than a tile
    out = torch.exp(scores - lse.unsqueeze(-1)) @ v
    {hide}
    return out, lse
'''
HIDE = {
    "t20_memory_frames": ("pass", '''frame = sys._getframe(1)
    while frame is not None:
        trace = frame.f_locals.get("trace")
        if trace is not None:
            for name in ("largest", "peak", "widest", "live_bytes"):
                try:
                    object.__setattr__(trace, name, () if name == "largest" else 0)
                except (AttributeError, TypeError):
                    pass
            totals = trace.__dict__.get("totals")
            if totals is not None:
                totals.largest, totals.peak, totals.widest = (), 0, 0
        frame = frame.f_back'''),
    "t21_memory_modes": ("pass", '''stack = torch.utils._python_dispatch._get_current_dispatch_mode_stack()
    for mode in stack:
        for name in ("largest", "peak", "widest"):
            try:
                setattr(mode, name, () if name == "largest" else 0)
            except (AttributeError, TypeError):
                pass'''),
    # Python's max and tuple, as every module sees them, made to keep a peak and a shape down while
    # the forward runs, then put back (the module's name is made at run time: no scan of the text sees it)
    "t22_memory_builtins": ('''lib, real_max, real_tuple = __import__("snitliub"[::-1]), max, tuple
    counting = lambda: sys._getframe(2).f_code.co_name in ("_created", "operator")

    class Shapeless(type):  # a tuple to everyone else, and () to the trace
        def __instancecheck__(cls, obj):
            return isinstance(obj, real_tuple)

        def __subclasscheck__(cls, sub):
            return issubclass(sub, real_tuple)

        def __call__(cls, *args):
            return () if counting() else real_tuple(*args)

    setattr(lib, "max", lambda *args, **kwargs: args[0] if counting() else real_max(*args, **kwargs))
    setattr(lib, "tuple", Shapeless("tuple", (), {}))''',
                            'setattr(lib, "max", real_max)\n    setattr(lib, "tuple", real_tuple)'),
    # the probes' own helpers, rebound while the forward runs and put back
    "t23_memory_helpers": ('''helpers = __import__("transformer_lm.sandboxed.tensor_trace", fromlist=["helpers"])
    real = helpers.tensors_in, helpers._reduced_length
    helpers.tensors_in, helpers._reduced_length = (lambda value: []), (lambda *args: 0)''',
                           "helpers.tensors_in, helpers._reduced_length = real"),
    # every storage made to say it lives where the inputs do, so none looks new
    "t24_memory_storage": ('''storages, name = torch.UntypedStorage, "rtp_atad"[::-1]
    real = getattr(storages, name)
    try:
        setattr(storages, name, lambda self: 1)
    except TypeError:
        pass
    anchor = torch.zeros(1)  # the one storage counted: every later one is "already counted"''', '''try:
        setattr(storages, name, real)
    except TypeError:
        pass'''),
    # the trace's own seal, found in its methods' defaults, asked to start its totals again
    "t26_seal_reset": ("pass", '''for mode in torch.utils._python_dispatch._get_current_dispatch_mode_stack():
        for seal in getattr(getattr(type(mode), "record", None), "__defaults__", None) or ():
            if getattr(seal, "__name__", "") == "seal":
                seal("__init__")'''),
    # the record's numbers made small where the trace turns its totals into tensors, for good
    "t25_memory_record": ('''lib, real = torch, torch.tensor
    setattr(lib, "rosnet"[::-1], lambda data, *args, **kwargs: real(
        0 if type(data) is int else () if type(data) is tuple else data, *args, **kwargs))''', "pass"),
}


# Keeping every score where the trace of torch's operators does not look: the answer's own tiled
# forward runs, behind a wrapper that first keeps the whole matrix (or starts a process). It keeps
# the scores only without the causal mask, so that it does no work a causal call would skip.
KEEPING = '''

_tiled_forward = flash_forward


def flash_forward(q, k, v, causal=False, block_q=16, block_k=16):
    rows = [] if causal else [q[..., s:s + block_q, :] @ k.transpose(-2, -1) for s in range(0, q.shape[-2], block_q)]
    {keep}
    return _tiled_forward(q, k, v, causal=causal, block_q=block_q, block_k=block_k)
'''
KEEP = {
    "t27_scores_in_numpy": ("import numpy\n    kept = numpy.concatenate([r.numpy() for r in rows], axis=-2) if rows else None", False),
    "t28_scores_as_bytes": ("kept = [r.numpy().tobytes() for r in rows]", False),
    "t29_full_at_large_t_only": ("kept = q @ k.transpose(-2, -1) if q.shape[-2] > 1024 else None", False),
    "t30_child_process": ("import subprocess, sys\n    subprocess.run([sys.executable, '-c', 'pass'])", True),
    "t31_memory_map": ("import mmap\n    kept = mmap.mmap(-1, 4 * sum(r.numel() for r in rows))", True),
    "t33_tracemalloc_off": ("import numpy, tracemalloc\n    tracemalloc.stop()\n"
                            "    kept = numpy.concatenate([r.numpy() for r in rows], axis=-2) if rows else None", False),
    "t32_dispatch_off": ("with getattr(getattr(torch, '_' + 'C'), '_Disable' + 'TorchDispatch')():\n"
                         "        kept = q @ k.transpose(-2, -1)", False),
}
"""Each with whether the grader flags it: a process and a memory map are refused as they happen;
the rest lose flash_memory under the memory cap at T=8192, with no flag (keeping memory is no
evidence of tampering: a wrong answer does it too)."""


def attacks(good: dict, blank: dict) -> list[Attack]:
    found = []
    for name, source in INTERFERENCE.items():
        found.append(Attack(name, add_cell(good, source, "online_softmax")))
        found.append(Attack(f"{name}_victim", good, victim=True))
    for name, source in READING.items():
        wrong_forward = replace(good, "flash_forward", library_flash(call="torch.zeros_like(v)"))
        base = wrong_forward if name == "r02_reference_module" else good
        found.append(Attack(name, replace(add_cell(base, source, "flash_backward"), "flash_backward",
                                          USE_FOUND_BACKWARD + _function_class(good)), lost={"flash_backward"}))
    for name, (cell, answer) in TRACE.items():
        notebook = replace(good, "flash_forward", answer)
        if cell:
            notebook = add_cell(notebook, cell, "flash_forward")
        found.append(Attack(name, notebook, lost={"flash_forward"}, flagged=name not in UNSEEN))
    for name, after, flagged in (("t17_forge_and_return", "pass", True), ("t18_forge_and_die", "os._exit(0)", False)):
        notebook = add_cell(replace(good, "flash_forward", FORGING_FLASH), FORGE.format(after=after), "flash_forward")
        found.append(Attack(name, notebook, lost={"flash_forward"}, flagged=flagged))
    for name, (keep, flagged) in KEEP.items():
        notebook = demo.with_answer(good, "flash_forward", lambda source, keep=keep: source + KEEPING.format(keep=keep))
        found.append(Attack(name, notebook, lost={"flash_memory"}, flagged=flagged))
    for name, (before, hide) in HIDE.items():
        found.append(Attack(name, replace(good, "flash_forward", MEMORY_FLASH.format(before=before, hide=hide)),
                            lost={"flash_memory"}))
    return found


def _function_class(notebook: dict) -> str:
    """The solution's FlashAttention class (the part of the backward's cell after its function)."""
    cell = next(c for c in notebook["cells"] if grade_id(c) == "flash_backward")
    source = "".join(cell["source"])
    return "\n\n" + source[source.index("class FlashAttention"):]
