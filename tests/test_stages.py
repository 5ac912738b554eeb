"""The grader's folders follow the pipeline, and what students receive is one package.

``autograder/`` is split into stages, in this order: reading a course and its submissions as
data, running untrusted code, judging, recording and publishing, the service, the commands. A
stage imports only the stages before it, and a class's path through grading, call by call,
enters each stage once, in order: no call climbs back to a later stage.

``transformer_lm/`` is the student package, which the student kit's wheel is built from, but for
its ``instructor/`` subpackage (the reference, the mistakes, the kinds of check, the visible
checks' table), which no module of the student package imports.
"""

import subprocess
import sys
import threading

import nbformat

import notebook_tools as tools
from autograder.commands import student_kit
from autograder.commands.demo import make_course
from package_imports import REPO, imports, module_name, modules

STAGES = ("reading", "running", "judging", "recording", "service", "commands")
OUTSIDE_THE_STAGES = {"autograder", "autograder.__main__"}
"""The package's own docstring and ``python -m autograder``, which calls the commands."""
ASSIGNMENT = "02_multihead_attention"


def stage_of(module: str) -> int | None:
    """The place in :data:`STAGES` of a module of the grader; None for any other module."""
    parts = module.split(".")
    if parts[0] != "autograder" or len(parts) < 2 or parts[1] not in STAGES:
        return None
    return STAGES.index(parts[1])


def grader_modules() -> dict[str, int | None]:
    return {name: stage_of(name) for name in modules() if name.startswith("autograder")}


def test_every_module_of_the_grader_is_in_a_stage():
    loose = [name for name, stage in grader_modules().items() if stage is None and name not in OUTSIDE_THE_STAGES]
    assert not loose, f"modules outside the stage folders: {loose}"


def test_each_stage_imports_only_the_stages_before_it():
    """Every import, those inside functions too, of every module of the grader."""
    known = set(modules())
    upward = []
    for name, stage in grader_modules().items():
        for target in imports(modules()[name], known):
            if stage is not None and stage_of(target) is not None and stage_of(target) > stage:
                upward.append(f"{name} ({STAGES[stage]}) imports {target} ({STAGES[stage_of(target)]})")
    assert not upward, "\n".join(upward)


def out_of_order(chain: tuple[int, ...]) -> bool:
    """Whether a call stack's stages, innermost first and each run of one stage counted once, ever
    go back to a stage the stack left or climb to a later one: in order, they only grow."""
    return any(later <= earlier for earlier, later in zip(chain, chain[1:]))


def stage_chain(frame) -> tuple[int, ...]:
    """The stages of a call stack, innermost first, each run of frames of one stage counted once."""
    chain = []
    while frame is not None:
        stage = stage_of(frame.f_globals.get("__name__", ""))
        if stage is not None and (not chain or chain[-1] != stage):
            chain.append(stage)
        frame = frame.f_back
    return tuple(chain)


def test_the_order_check_sees_a_climb_and_a_return():
    reading, running, judging, recording = range(4)
    assert not out_of_order((reading, running, judging, recording))
    assert out_of_order((recording, judging))  # judging called something of recording
    assert out_of_order((reading, judging, reading, recording))  # reading entered twice on one path


def graded_course(root):
    """A course of two students of assignment 02: one with the solution's answers, one blank."""
    root.mkdir(parents=True)
    make_course(root, ASSIGNMENT, generate=False)
    [release] = (root / "release" / ASSIGNMENT).glob("*.ipynb")
    [source] = (REPO / "source" / ASSIGNMENT).glob("*.ipynb")
    for student, notebook in {"solved": tools.filled_in(release, source), "blank": tools.read(release)}.items():
        folder = root / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        nbformat.write(notebook, folder / release.name)
    return root


def test_a_class_path_through_grading_enters_each_stage_once_in_order(tmp_path):
    """Grades a class through ``pipeline.grade_and_record`` with every call of the grader's
    threads watched: each call stack, read from the innermost frame out, passes through the stages
    in order, each once."""
    root = graded_course(tmp_path / "course")
    chains: dict[tuple[int, ...], str] = {}

    def watch(frame, event, _):
        if event == "call" and stage_of(frame.f_globals.get("__name__", "")) is not None:
            chains.setdefault(stage_chain(frame), f"{frame.f_globals['__name__']}.{frame.f_code.co_name}")

    threading.setprofile(watch)
    sys.setprofile(watch)
    try:
        grades = tools.grade_course(root, ASSIGNMENT, workers=1)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    assert [r.student for r in grades.results] == ["blank", "solved"]
    assert grades.results[1].total == grades.results[1].max_total > 0 == grades.results[0].total
    entered = {stage for chain in chains for stage in chain}
    assert {STAGES[s] for s in entered} == {"reading", "running", "judging", "recording"}
    climbs = [f"{called}: {' <- '.join(STAGES[s] for s in chain)}" for chain, called in chains.items()
              if out_of_order(chain)]
    assert not climbs, "\n".join(climbs)


def test_the_student_package_never_imports_the_instructors_side():
    """Read from the code: no module of the student package imports ``transformer_lm.instructor``
    or the grader, in functions neither."""
    files = [REPO / "transformer_lm" / name for name in student_kit.student_files(REPO) if name.endswith(".py")]
    known = set(modules())
    wrong = {module_name(path): sorted(m for m in imports(path, known)
                                       if m.startswith(("transformer_lm.instructor", "autograder")))
             for path in files}
    assert {name: found for name, found in wrong.items() if found} == {}
    assert len(files) >= 20 and not any("instructor" in path.parts for path in files)


REFUSING_FINDER = ("import importlib, importlib.abc, sys\n"
                   "class Refuse(importlib.abc.MetaPathFinder):\n"
                   "    def find_spec(self, name, path=None, target=None):\n"
                   "        if name.startswith(('transformer_lm.instructor', 'autograder')):\n"
                   "            raise ImportError(f'{name} is the instructor\\'s')\n"
                   "sys.meta_path.insert(0, Refuse())\n")
"""The start of a Python program in which the instructor's side and the grader cannot be imported."""


def test_every_module_of_the_student_package_imports_with_the_instructors_side_gone():
    """Each student module imports in a process where ``transformer_lm.instructor`` and the
    grader cannot be imported at all (a finder refuses them), as in a student's environment."""
    names = sorted(module_name(REPO / "transformer_lm" / name) for name in student_kit.student_files(REPO)
                   if name.endswith(".py"))
    importing = (REFUSING_FINDER + "for name in sys.argv[1:]:\n"
                 "    importlib.import_module(name)\n"
                 "assert not [m for m in sys.modules if m.startswith(('transformer_lm.instructor', 'autograder'))]\n")
    done = subprocess.run([sys.executable, "-c", importing, *names], capture_output=True, text=True, cwd=REPO,
                          env={"PATH": "/usr/bin:/bin", "MPLBACKEND": "Agg"})
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_refusing_finder_would_see_an_import_of_the_instructors_side():
    done = subprocess.run([sys.executable, "-c", REFUSING_FINDER + "import transformer_lm.instructor.reference\n"],
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode != 0 and "ImportError: transformer_lm.instructor is the instructor's" in done.stderr


def test_the_instructors_side_holds_what_the_grader_prepares_with():
    instructor = REPO / "transformer_lm" / student_kit.INSTRUCTOR
    for name in ("reference", "concepts", "mistakes.py", "kinds.py", "visible_checks.py", "make_test_values.py"):
        assert (instructor / name).exists(), name
    assert not [name for name in student_kit.student_files(REPO) if name.startswith(student_kit.INSTRUCTOR)]
