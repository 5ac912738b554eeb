"""What a grading run takes away before the first cell, tried as a student would try to get it back:
the forbidden calls' kernels and torch's Python re-implementations of them
(:mod:`autograder.running.harness.absence`), and memory beyond a cap the kernel enforces
(:mod:`transformer_lm.sandboxed.memory_cap`). Each runs in a process of its own, as a run does, since
both change that process for good; what stays allowed keeps working."""

from __future__ import annotations

import json
import mmap
import subprocess
import sys
import textwrap

import pytest

import notebook_tools as tools
from autograder.running import kept_blocks, runner
from transformer_lm.instructor.capped_kinds import CAPPED_CAUSAL

HARNESS = runner.HARNESS.parent
"""The folder the harness is imported from, as a run imports it (``from harness import ...``)."""


ALLOCATORS = ("glibc", "kept blocks")
"""A capped process's allocators: glibc's alone (the student's kit), or with the grader's
allocator of large blocks loaded (:mod:`autograder.running.kept_blocks`, a grading run's)."""


def run(code: str, allocator: str = "glibc") -> str:
    """``code`` run in a fresh Python that imports the harness as a run does, with ``allocator``;
    its standard output."""
    prelude = f"import sys\nsys.path[:0] = [{str(HARNESS)!r}, {str(tools.REPO_ROOT)!r}]\n"
    env = {"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    if allocator == "kept blocks":
        library = kept_blocks.library()
        assert library is not None, "No C compiler built autograder/running/kept_blocks.c: apt-get install gcc"
        env["LD_PRELOAD"] = str(library)
    done = subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


TRY = '''
def attempt(label, call):
    try:
        call()
        print(label, "ran")
    except Exception as error:
        print(label, type(error).__name__)
'''

SOFTMAX_ROUTES = {
    "torch.softmax": "torch.softmax(x, -1)",
    "F.softmax": "torch.nn.functional.softmax(x, -1)",
    "Tensor.log_softmax": "x.log_softmax(-1)",
    "by getattr": "getattr(torch, 'soft' + 'max')(x, -1)",
    "torch.ops.aten._softmax": "torch.ops.aten._softmax.default(x, -1, False)",
    "a nested tensor": "torch.nested.nested_tensor([x]).softmax(-1)",
    "a sparse tensor": "torch.sparse.softmax(x.to_sparse(), 1)",
    "torch._refs": "torch._refs.softmax(x, -1)",
    "a decomposition": "torch._decomp.decomposition_table[torch.ops.aten._softmax.default](x, -1, False)",
    "cross_entropy": "torch.nn.functional.cross_entropy(x, torch.tensor([0, 1, 2]))",
}
SOFTMAX_BY_ATTENTION = {
    # attention of queries e1 against keys x e1 sqrt(4) and values I is x's softmax, row by row
    "F.scaled_dot_product_attention as a softmax": "torch.nn.functional.scaled_dot_product_attention("
                                                   "E1, KEYS(x), torch.eye(4)[None])",
    "the CPU flash kernel as a softmax": "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu("
                                         "E1[None], KEYS(x)[None], torch.eye(4)[None, None])",
    "flex_attention as a softmax": "__import__('torch.nn.attention.flex_attention').nn.attention.flex_attention"
                                   ".flex_attention(E1[None], KEYS(x)[None], torch.eye(4)[None, None])",
    "nn.MultiheadAttention's fast path as a softmax": "torch.ops.aten._native_multi_head_attention(E1, KEYS(x), "
                                                      "torch.eye(4)[None].expand(1, 4, 4), 4, 1, torch.eye(4).repeat(3, 1), "
                                                      "torch.zeros(12), torch.eye(4), torch.zeros(4))",
}
"""A softmax from the library's attention: attention of queries e1 against keys x e1 sqrt(4) and values
I is softmax(x), which the kernels compute without a softmax operator of their own."""
ATTENTION_ROUTES = {
    "F.scaled_dot_product_attention": "torch.nn.functional.scaled_dot_product_attention(x[None], x[None], x[None])",
    "the math kernel": "torch.ops.aten._scaled_dot_product_attention_math(x[None], x[None], x[None])",
    "nn.MultiheadAttention": "torch.nn.MultiheadAttention(4, 2)(x[None], x[None], x[None])",
    "nn.MultiheadAttention in eval mode": "torch.nn.MultiheadAttention(4, 2).eval()(x[None], x[None], x[None])",
    "multi_head_attention_forward": "torch.nn.functional.multi_head_attention_forward(x[:, None], x[:, None], "
                                    "x[:, None], 4, 2, torch.randn(12, 4), torch.zeros(12), None, None, False, 0.0, "
                                    "torch.randn(4, 4), torch.zeros(4))",
    "the quantizable MultiheadAttention": "torch.ao.nn.quantizable.MultiheadAttention(4, 2)(x[None], x[None], x[None])",
    "a decomposition of the CPU kernel": "torch._decomp.decompositions.scaled_dot_product_flash_attention_for_cpu("
                                         "x[None, None], x[None, None], x[None, None])",
    "a TransformerEncoderLayer": "torch.nn.TransformerEncoderLayer(4, 2, 8)(x[None])",
}
ALLOWED = {"exp": "torch.exp(x)", "matmul": "x @ x.T", "logsumexp": "torch.logsumexp(x, -1)",
           "a MultiheadAttention built": "torch.nn.MultiheadAttention(4, 2)"}


def routes_after(forbids: str, routes: dict[str, str], attack: str = "", prepared: bool = False) -> dict[str, str]:
    """What each route gives after the run took out ``forbids``; ``prepared``: through the index that
    the warm server makes (``absence.prepare``), as a grading run does, rather than a walk of torch."""
    calls = "".join(f"attempt({label!r}, lambda: {call})\n" for label, call in routes.items())
    out = run(textwrap.dedent(f'''
        import torch
        from transformer_lm import forbidding
        from autograder.reading.forbidden import absent_from_run
        from harness import absence
        if {prepared}:
            absence.prepare()
        absence.remove(absent_from_run({forbids}))
        {attack}
        x = torch.randn(3, 4)
        E1 = torch.eye(4)[:1].expand(4, 4)[None]           # (1, 4, 4): four queries e1
        def KEYS(x):
            return torch.zeros(1, 4, 4).index_put_((torch.tensor(0), torch.arange(4), torch.tensor(0)), x[0] * 2)
        def first(out):
            return out[0] if isinstance(out, tuple) else out
    ''') + TRY + calls)
    return dict(line.rsplit(" ", 1) for line in out.splitlines())


@pytest.mark.parametrize("prepared", [False, True], ids=["walked", "indexed"])
def test_every_route_to_a_forbidden_softmax_or_attention_raises_and_the_rest_runs(prepared):
    got = routes_after("forbidding.SOFTMAX + forbidding.LIBRARY_ATTENTION",
                       {**SOFTMAX_ROUTES, **SOFTMAX_BY_ATTENTION, **ATTENTION_ROUTES, **ALLOWED}, prepared=prepared)
    assert {label: got[label] for label in ALLOWED} == dict.fromkeys(ALLOWED, "ran")
    ran = [label for label in {**SOFTMAX_ROUTES, **ATTENTION_ROUTES} if got[label] == "ran"]
    assert not ran, f"these reached a forbidden call: {ran}"


TAKEN_OUT = '''
import json, os, sys, types
import torch
from transformer_lm import forbidding
from autograder.reading.forbidden import absent_from_run
from harness import absence
absent = absent_from_run(forbidding.SOFTMAX + forbidding.LIBRARY_ATTENTION)
refusal = absence._refuse("x").__code__
for module in forbidding.family_modules():   # as the server does before it indexes torch
    __import__(module)
absence.prepare()
targets = [absence._named(where) for where in absent["functions"]]
def refused(value):
    return isinstance(value, types.FunctionType) and value.__code__ is refusal
def functions(chosen):
    found = []
    for name, module in list(sys.modules.items()):
        if name.startswith("torch") and isinstance(module, types.ModuleType):
            for attribute, value in list(vars(module).items()):
                forward = vars(value).get("forward") if isinstance(value, type) else None
                if chosen(value, forward):
                    found.append(f"{name}.{attribute}")
    return sorted(found)
def tables(chosen):
    return sorted(f"{number} {operator}" for number, table in enumerate(absence._decomposition_tables())
                  for operator, value in table.items() if chosen(operator, value))
operators = {name.replace("::", ".") for name in absent["operators"]}
wanted = (functions(lambda value, forward: any(value is target for target in targets)),
          tables(lambda operator, value: str(operator).rsplit(".", 1)[0] in operators
                 or any(value is target for target in targets)))
for indexed in (True, False):
    if os.fork() == 0:
        absence.INDEX = absence.INDEX if indexed else None
        current = absence.INDEX is not None and absence.INDEX.modules == len(sys.modules)
        absence.remove(absent)
        taken = (functions(lambda value, forward: refused(value) or refused(forward)),
                 tables(lambda operator, value: refused(value)))
        print(json.dumps([current, *wanted, *taken]), flush=True)
        os._exit(0)
    os.wait()
'''


def test_the_servers_index_takes_out_what_the_families_name():
    """The index the warm server makes once finds the very functions and classes of torch that the
    families name (each object, under every name a loaded module of torch gives it) and the
    decomposition entries of the families' operators, found here by a walk of every module of torch
    of the test's own: taken out through the index, as a grading run does, and through the index made
    again in a run that loaded more modules than the server."""
    lines = [json.loads(line) for line in run(TAKEN_OUT).splitlines()]
    assert [line[0] for line in lines] == [True, False]   # the first run takes the server's index
    for _, wanted_functions, wanted_tables, functions, tables in lines:
        assert len(wanted_functions) > 10 and len(wanted_tables) > 5
        assert (functions, tables) == (wanted_functions, wanted_tables)


def test_the_attention_kernels_compute_a_softmax_where_nothing_is_absent():
    """The control: each route of :data:`SOFTMAX_BY_ATTENTION` gives the row's softmax."""
    checked = {label: f"torch.testing.assert_close(first({call}).reshape(-1, 4), "
                      f"torch.softmax(x[0], -1).expand(4, 4))" for label, call in SOFTMAX_BY_ATTENTION.items()}
    got = routes_after("()", checked)
    assert got == dict.fromkeys(SOFTMAX_BY_ATTENTION, "ran")


def test_a_run_that_forbids_only_softmax_takes_out_the_attention_kernels_too():
    got = routes_after("forbidding.SOFTMAX", {**SOFTMAX_ROUTES, **SOFTMAX_BY_ATTENTION, **ALLOWED}, prepared=True)
    assert {label: got[label] for label in ALLOWED} == dict.fromkeys(ALLOWED, "ran")
    assert [label for label in {**SOFTMAX_ROUTES, **SOFTMAX_BY_ATTENTION} if got[label] == "ran"] == []


def test_a_run_that_forbids_only_attention_keeps_softmax():
    got = routes_after("forbidding.LIBRARY_ATTENTION", {"torch.softmax": "torch.softmax(x, -1)", **ATTENTION_ROUTES})
    assert got["torch.softmax"] == "ran"
    assert [label for label in ATTENTION_ROUTES if got[label] == "ran"] == []


@pytest.mark.parametrize("attack", [
    "import weakref\nfor f in list(weakref.finalize._registry): f()",   # every finalizer, torch.library's included
    "import gc\nfor o in gc.get_objects():\n    getattr(o, 'reset', lambda: None)() if type(o).__name__ == 'Library' "
    "else None",
    "from harness import absence as a\na.keep()",   # the sealed keeper gives nothing back
])
def test_what_holds_the_kernels_out_cannot_be_undone_from_python(attack):
    got = routes_after("forbidding.SOFTMAX + forbidding.LIBRARY_ATTENTION",
                       {"torch.softmax": "torch.softmax(x, -1)", "sdpa": ATTENTION_ROUTES["F.scaled_dot_product_attention"]},
                       attack.replace("\n", "\n        "))
    assert got == {"torch.softmax": "Absent", "sdpa": "Absent"}


CAPPED = textwrap.dedent('''
    from transformer_lm.instructor.capped_kinds import CAPPED_CAUSAL as C, MEMORY_CAP
    T, SCORES = C.seq_q, C.seq_q * C.seq_k * 4     # the capped checks' size; its float32 score matrix in bytes
''')
"""What the tests below take from the capped checks: their size and their cap."""


@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_under_the_cap_the_whole_score_matrix_in_any_form_is_refused_and_a_tile_is_not(allocator):
    """Under the cap and the refusals a capped call has (no process, no mapped memory): the kernel
    refuses the private forms, the audit hook the shared map, ``RLIMIT_FSIZE`` the files; with
    the grader's allocator as without it."""
    out = run(textwrap.dedent('''
        import mmap, os, resource, numpy, torch
        from transformer_lm.sandboxed import memory_cap
    ''') + CAPPED + "memory_cap.cap(MEMORY_CAP)\nmemory_cap.refuse_uncounted()\n" + TRY + '''
attempt("a T x T float32 matrix", lambda: torch.empty(T, T))
attempt("a T x T boolean mask", lambda: torch.ones(T, T, dtype=torch.bool))
attempt("a row of a query block", lambda: torch.empty(C.block_q, T))
attempt("a T x T float16 matrix", lambda: torch.empty(T, T, dtype=torch.float16))
attempt("a raw storage", lambda: torch.UntypedStorage(SCORES))
attempt("complex128 viewed as float32", lambda: torch.empty(T // 2, T // 2, dtype=torch.complex128).view(torch.float32))
attempt("a NumPy array", lambda: numpy.ones((T, T), numpy.float32))
attempt("Python bytes", lambda: bytearray(SCORES))
attempt("a dict of tiles", lambda: {i: torch.empty(C.block_q, C.block_q) for i in range((T // C.block_q) ** 2)})
attempt("a shared anonymous map", lambda: mmap.mmap(-1, SCORES))
attempt("a file in /tmp", lambda: open("/tmp/scores-" + str(os.getpid()), "wb").write(bytes(2**20)))
attempt("a memfd", lambda: os.write(os.memfd_create("scores"), bytes(2**20)))
attempt("raising the cap", lambda: resource.setrlimit(resource.RLIMIT_DATA, (2**40, 2**40)))
attempt("four tiles", lambda: [torch.empty(C.block_q, 4 * C.block_k) for _ in range(4)])
''', allocator)
    got = dict(line.rsplit(" ", 1) for line in out.splitlines())
    assert got.pop("four tiles") == "ran"
    assert [label for label, status in got.items() if status == "ran"] == []


@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_freed_tiles_are_given_back_so_an_honest_pass_that_keeps_small_results_fits(allocator):
    """Each tile of a query block freed while its row maxima stay alive: with the allocator set to
    unmap freed blocks the pass fits, and the whole matrix still does not. (Without that setting,
    glibc's heap may grow by a tile each time, 64 MiB over 128 tiles: it did in four runs here and
    not in one run of a fresh clone, so no test rests on it.)"""
    out = run(textwrap.dedent('''
        import torch
        torch.set_num_threads(1)
        from transformer_lm.sandboxed import memory_cap
    ''') + CAPPED + textwrap.dedent('''
        q, k = torch.randn(C.block_q, C.dim), torch.randn(T, C.dim)
        memory_cap.cap(MEMORY_CAP)
    ''') + TRY + '''
attempt("row maxima of every tile kept", lambda: [(q @ k[s:s + C.block_k].T).amax(-1) for s in range(0, T, C.block_k)] * 2)
attempt("the whole matrix", lambda: torch.empty(T, T))
''', allocator)
    assert out.splitlines() == ["row maxima of every tile kept ran", "the whole matrix RuntimeError"]


FAULTS = textwrap.dedent('''
    import resource, torch
    torch.set_num_threads(1)
    from transformer_lm.sandboxed import memory_cap
''') + CAPPED + textwrap.dedent('''
    memory_cap.cap(MEMORY_CAP)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(100):
        torch.ones(C.block_q, C.block_k)   # a tile, freed at once
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
''')


TILE_PAGES = CAPPED_CAUSAL.block_q * CAPPED_CAUSAL.block_k * 4 // mmap.PAGESIZE
"""The pages of a float32 tile at the capped checks' size (128)."""


@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_the_graders_allocator_serves_a_freed_tile_again_without_faulting_it_in(allocator):
    """Under the cap glibc maps each tile afresh, and the kernel faults in its pages one by one;
    the grader's allocator serves the freed one again."""
    faults, pages = int(run(FAULTS, allocator)), 100 * TILE_PAGES
    assert faults < pages / 10 if allocator == "kept blocks" else faults > pages * 0.9, faults


def test_blocks_of_a_size_no_loop_asks_for_again_do_not_hold_the_room_for_good():
    """Eight freed blocks of 1 MiB fill the room the grader's allocator keeps; the tiles after them
    are served again all the same, the oldest kept blocks given back to make room (before, each tile
    was faulted in afresh: the figures of assignment 05's timed checks swung with what an answer
    had freed before its call)."""
    fill = "held = [torch.empty((2**20 - 64) // 4) for _ in range(8)]\ndel held\n"
    faults = int(run(FAULTS.replace("before = ", fill + "before = "), "kept blocks"))
    assert faults < 100 * TILE_PAGES / 10, faults


GIVEN_BACK = textwrap.dedent('''
    import ctypes, itertools, mmap, resource, numpy, torch
    from transformer_lm.sandboxed import memory_cap
''') + CAPPED + textwrap.dedent('''
    memory_cap.cap(MEMORY_CAP)
    kept = ctypes.CDLL(None).kept_blocks_kept
    kept.restype = ctypes.c_size_t
    MiB, SMALL = 2**20, 4000

    def room():   # what the cap leaves, with no block kept: a refused allocation gives them back
        try:
            bytearray(2**40)
        except MemoryError:
            assert kept() == 0
        data = mmap.PROT_READ | mmap.PROT_WRITE
        return resource.getrlimit(resource.RLIMIT_DATA)[0] - memory_cap.in_use(resource.RLIMIT_DATA, data)

    def keep():   # eight blocks of 1 MiB, held together, then freed
        blocks = [torch.empty(MiB // 4) for _ in range(8)]
        del blocks
        return kept()

    libc = ctypes.CDLL(None)
    SIZES = [ctypes.c_size_t] * 2
    for name, arguments in {"malloc": SIZES[:1], "calloc": SIZES, "aligned_alloc": SIZES,
                            "realloc": [ctypes.c_void_p, ctypes.c_size_t]}.items():
        getattr(libc, name).restype, getattr(libc, name).argtypes = ctypes.c_void_p, arguments

    def many(make, count):   # the list first, so that only what it holds needs the kept blocks
        made = [None] * count
        for i in range(count):
            made[i] = make()
            if made[i] is None:
                raise MemoryError("a C allocation gave NULL")
        return made

    FORMS = {   # each through one of the allocator's paths
        "a tensor": lambda n: torch.empty(n // 4),                           # posix_memalign, served
        "Python bytes": lambda n: b"x" * n,                                  # malloc, served
        "a NumPy array of zeros": lambda n: numpy.zeros(n // 8),             # calloc, served
        "small blocks by malloc": lambda n: many(lambda: libc.malloc(SMALL), n // SMALL),   # glibc's
        "small blocks by calloc": lambda n: many(lambda: libc.calloc(1, SMALL), n // SMALL),
        "small aligned blocks": lambda n: many(lambda: libc.aligned_alloc(64, SMALL), n // SMALL),
        "small blocks by realloc": lambda n: many(lambda: libc.realloc(libc.malloc(16), SMALL), n // SMALL),
        "small Python objects": lambda n: many(itertools.count(0.5).__next__, n // 24),   # Python's arenas
        "a private map": lambda n: mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS),   # mmap
    }
    for label, make in FORMS.items():
        free = room()
        held = keep()
        ballast = torch.empty((free - held - 3 * MiB) // 4)   # 3 MiB left beside the kept blocks
        assert kept() == held
        made = make(6 * MiB)
        print(label, "ran", held // MiB)
        del ballast, made
    free = room()
    held = keep()
    try:
        torch.empty((free + 2 * MiB) // 4)
        print("more than the cap ran")
    except RuntimeError:
        print("more than the cap refused", kept())
''')


def test_kept_blocks_are_given_back_before_the_cap_refuses_anything():
    """With 3 MiB left beside 7 MiB of kept blocks, 6 MiB in every form is served: the kept blocks
    are given back first, so the cap refuses only what does not fit beside what is alive."""
    lines = run(GIVEN_BACK, "kept blocks").splitlines()
    assert lines[:-1] == [f"{label} ran 7" for label in (
        "a tensor", "Python bytes", "a NumPy array of zeros", "small blocks by malloc", "small blocks by calloc",
        "small aligned blocks", "small blocks by realloc", "small Python objects", "a private map")]
    assert lines[-1] == "more than the cap refused 0"


def test_a_block_served_again_holds_what_a_fresh_one_would():
    """A block the grader's allocator serves again: zeroed for ``calloc``, its bytes moved by
    ``realloc``, its size told by ``malloc_usable_size``; glibc's own blocks are left to glibc."""
    out = run(textwrap.dedent('''
        import ctypes, numpy
        from transformer_lm.sandboxed import memory_cap
        memory_cap.cap(2**26)
        libc = ctypes.CDLL(None)
        libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
        libc.malloc_usable_size.restype, libc.malloc_usable_size.argtypes = ctypes.c_size_t, [ctypes.c_void_p]
        libc.free.argtypes = [ctypes.c_void_p]
        dirty = numpy.full(2**17, 7.0)
        del dirty
        print("zeros", bool((numpy.zeros(2**17) == 0).all()))
        grown = bytearray(b"x" * 100_000)
        grown.extend(b"y" * 300_000)
        print("moved", grown == b"x" * 100_000 + b"y" * 300_000)
        for size in (200_000, 100):
            block = libc.malloc(size)
            print("usable", size, libc.malloc_usable_size(block) >= size)
            libc.free(block)
    '''), "kept blocks")
    assert out.splitlines() == ["zeros True", "moved True", "usable 200000 True", "usable 100 True"]


def test_no_allocator_is_used_without_a_compiler_or_where_it_does_not_load(tmp_path, monkeypatch):
    """Where no C compiler is found the library is not built, and one that does not load (a folder
    mounted ``noexec``, here a file that is no library) is not used: the sandbox then starts
    without it (``runner.Worker`` adds no ``LD_PRELOAD``), and its output carries no loader error."""
    assert kept_blocks._loads(kept_blocks.library())
    (tmp_path / "broken.so").write_bytes(b"no library")
    assert not kept_blocks._loads(tmp_path / "broken.so")
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    assert not kept_blocks._compile(tmp_path / "kept_blocks.so")
    assert not (tmp_path / "kept_blocks.so").exists()


def test_many_blocks_made_moved_and_freed_keep_their_bytes():
    """Thousands of blocks alive at once (the table of live blocks a third full, emptied in every
    order), each with its own bytes: every block keeps them until freed, ``realloc`` moves them,
    and every free goes to the allocator that served the block (a wrong one would crash)."""
    out = run(textwrap.dedent('''
        import ctypes, random
        from transformer_lm.sandboxed import memory_cap
        libc = ctypes.CDLL(None)
        libc.kept_blocks_enable.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
        libc.kept_blocks_enable(2**16, 2**23)
        for name, arguments in {"malloc": [ctypes.c_size_t], "calloc": [ctypes.c_size_t] * 2,
                                "realloc": [ctypes.c_void_p, ctypes.c_size_t]}.items():
            getattr(libc, name).restype, getattr(libc, name).argtypes = ctypes.c_void_p, arguments
        libc.free.argtypes = [ctypes.c_void_p]
        chosen, alive, checked = random.Random(0), {}, 0

        def holds(block, size, byte):
            return ctypes.string_at(block, size) == bytes([byte]) * size

        for step in range(20000):
            if alive and (len(alive) > 3000 or chosen.random() < 0.45):
                block, (size, byte) = alive.popitem() if chosen.random() < 0.5 else \\
                    (lambda key: (key, alive.pop(key)))(chosen.choice(list(alive)))
                assert holds(block, size, byte), step
                if chosen.random() < 0.3:
                    bigger = size + chosen.randrange(1, 2**16)
                    moved = libc.realloc(block, bigger)
                    assert holds(moved, size, byte), step
                    ctypes.memset(moved, byte, bigger)
                    alive[moved] = (bigger, byte)
                else:
                    libc.free(block)
                checked += 1
                continue
            size = chosen.choice([100, 5000, 2**16, 2**16, 2**16 + 1, 70_000, 90_000, 2**17])
            zeroed = chosen.random() < 0.3
            block = libc.calloc(1, size) if zeroed else libc.malloc(size)
            assert block and block not in alive and (not zeroed or holds(block, size, 0)), step
            byte = chosen.randrange(1, 256)
            ctypes.memset(block, byte, size)
            alive[block] = (size, byte)
        print("checked", checked > 5000, all(holds(b, s, v) for b, (s, v) in alive.items()))
    '''), "kept blocks")
    assert out.split() == ["checked", "True", "True"]
