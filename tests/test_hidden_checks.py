"""Every assignment's hidden checks agree with its notebooks."""

import ast
import contextlib
import dataclasses
import inspect
import json
import runpy
import sys
import types
from pathlib import Path

import pytest

import transformer_lm
from autograder.reading import course_code
from autograder.reading.cells import marks
from autograder.reading.course import Course, generator_for, load_items
from autograder.reading.spec import Item
from transformer_lm import tiled_judges
from transformer_lm.instructor import cases, decoder_kinds, gpt_kinds, kinds, stream_kinds, tiled_kinds
from transformer_lm.instructor.kinds import judge_here

REPO = Path(__file__).resolve().parents[1]
COURSE = Course(REPO)
REFERENCE = REPO / "transformer_lm" / "instructor" / "reference"
ASSIGNMENTS = sorted(p.stem for p in COURSE.checks_file("any").parent.glob("[0-9]*.py"))


def graded_cells(assignment):
    cells = {}
    for path in (REPO / "source" / assignment).glob("*.ipynb"):
        for cell in json.loads(path.read_text())["cells"]:
            meta = marks(cell)
            if meta.get("grade_id"):
                cells[meta["grade_id"]] = meta
    return cells


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_items_match_answer_and_test_cells_and_their_points(assignment):
    cells = graded_cells(assignment)
    items = load_items(COURSE, assignment)
    assert items, f"{assignment} has no hidden checks"
    for item in items:
        assert cells[item.answer_id]["solution"], f"{item.answer_id} is not an answer cell"
        test = cells[item.test_id]
        assert test["grade"] and not test["solution"], f"{item.test_id} is not a test cell"
        assert test["points"] == item.points, f"{item.grade_id}: {item.points} points hidden, {test['points']} shown"
    autograded_tests = {gid for gid, meta in cells.items() if meta.get("grade") and not meta.get("solution")}
    assert autograded_tests == {item.test_id for item in items}, "a test cell without hidden checks, or the reverse"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_course_code_that_stands_in_for_wrong_answers_passes_their_hidden_checks(assignment):
    """The stand-ins replace a student's wrong answer when a later item is graded (one mistake
    costs once); they must be right, so each passes every hidden check of the item it stands in
    for, compared as the grader compares, in this process."""
    items = load_items(COURSE, assignment)
    defining = [item for item in items if item.defines]
    path = COURSE.stand_ins_file(assignment)
    if not any(item.builds_on for item in items):
        assert not path.exists(), f"{path} stands in for nothing: no item of {assignment} builds on another"
        return
    namespace = runpy.run_path(str(path))
    for item in defining:
        for index, check in enumerate(item.checks):
            verdict = judge_here(check, namespace, generator_for(b"stand-ins", assignment, item.grade_id, index))
            assert verdict.passed, f"{item.grade_id}.{index}: {verdict.message}"


def late_code(assignment):
    """Each item judged with the course's code below it, with that code (what its run gets), and the
    items in the assignment's order."""
    items = load_items(COURSE, assignment)
    by_id = {item.grade_id: item for item in items}
    below = {}
    for item in items:
        below[item.grade_id] = [g for gid in item.builds_on for g in (gid, *below[gid])]
    defines = {name for item in items for name in item.defines}
    if not any(below.values()):
        return items, {}
    reference_source = course_code.reference_source(REFERENCE)
    stand_ins = COURSE.stand_ins_file(assignment).read_text()
    return items, {gid: (sorted({n for g in gids for n in by_id[g].defines}),
                         course_code.for_names(reference_source, stand_ins,
                                               sorted({n for g in gids for n in by_id[g].defines}), defines))
                   for gid, gids in below.items() if gids}


def test_the_reference_is_sent_as_one_text_that_defines_every_name_of_the_package():
    """The modules of ``transformer_lm/instructor/reference/`` joined (what a late run's course code is cut
    from) define, once each, every name the package gives, each module after those it builds on,
    and import nothing of the package (a run has none to import)."""
    text, package = course_code.reference_source(REFERENCE), transformer_lm.instructor.reference
    tree = ast.parse(text)
    defined = [node.name for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))]
    assert len(defined) == len(set(defined)) and set(defined) == set(package.__all__)
    assert not [ast.unparse(node) for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))
                and "transformer_lm" in ast.unparse(node)]
    assert defined.index("multi_head_attention") < defined.index("GPT") and defined.index("causal_mask") < \
        defined.index("GroupedQueryAttention")
    with course_code_loaded({"reference": text, "stand_ins": ""}):
        module = sys.modules["transformer_lm.instructor.reference"]
        assert module is not package and all(callable(getattr(module, name)) for name in package.__all__)
        assert module.GPTConfig(n_embd=8) == module.GPTConfig(n_embd=8) and module.GPTConfig().n_embd == 12
        assert module.causal_mask(2, 3).tolist() == package.causal_mask(2, 3).tolist()


def test_a_reference_module_that_imports_the_package_itself_is_refused(tmp_path):
    (tmp_path / "first.py").write_text("def one():\n    return 1\n")
    (tmp_path / "second.py").write_text("from transformer_lm.instructor.reference import one\n\n\n"
                                        "def two():\n    return one()\n")
    with pytest.raises(ValueError, match="from transformer_lm.instructor.reference.<module> import"):
        course_code.reference_source(tmp_path)
    (tmp_path / "second.py").write_text("def one():\n    return 2\n")
    with pytest.raises(ValueError, match="one is defined by first and second"):
        course_code.reference_source(tmp_path)


@contextlib.contextmanager
def course_code_loaded(code):
    """The namespace of the stand-ins, made as the harness makes it (CourseCode), with the pruned
    reference in place of the package's for the block only."""
    name, instructor = "transformer_lm.instructor.reference", transformer_lm.instructor
    saved_module, saved_attribute = sys.modules[name], instructor.reference
    module = types.ModuleType(name)
    sys.modules[name], instructor.reference = module, module
    try:
        exec(compile(code["reference"], "<the course's code>", "exec"), module.__dict__)
        namespace = {}
        exec(compile(code["stand_ins"], "<the course's code>", "exec"), namespace)
        yield namespace
    finally:
        sys.modules[name], instructor.reference = saved_module, saved_attribute


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_a_late_run_holds_the_course_code_below_its_item_and_nothing_of_its_own_or_later(assignment):
    """An item judged with the course's code in place of the answers it builds on gets stand-ins for
    those answers, which pass the hidden checks of the items they stand in for, and no definition of
    the stand-ins for the item itself or a later one (its student's answer runs beside that code)."""
    items, late = late_code(assignment)
    order = [item.grade_id for item in items]
    for gid, (names, code) in late.items():
        later = {n for item in items[order.index(gid):] for n in item.defines} - set(names)
        defined = {node.name for node in ast.parse(code["stand_ins"]).body if isinstance(node, (ast.ClassDef,
                                                                                                 ast.FunctionDef))}
        assert not defined & later, f"{gid}: its late run holds {defined & later}"
        with course_code_loaded(code) as namespace:
            for item in items[:order.index(gid)]:
                if item.defines and set(item.defines) <= set(names):
                    for index, check in enumerate(item.checks):
                        verdict = judge_here(check, namespace, generator_for(b"late", assignment, item.grade_id, index))
                        assert verdict.passed, f"{gid}: the stand-in for {item.grade_id}.{index}: {verdict.message}"


def test_generation_is_not_in_the_late_runs_of_the_generation_items():
    """The reference GPT generates (its generate method is the answer to the generation items); the
    stand-in GPT has a generate of its own, so the reference's never reaches those items' runs."""
    _, late = late_code("04_mingpt")
    reference_generate = "use_cache" in course_code.reference_source(REFERENCE)
    assert reference_generate
    for gid in ("generate", "kv_cache"):
        reference = late[gid][1]["reference"]
        gpt = next(node for node in ast.parse(reference).body if isinstance(node, ast.ClassDef) and node.name == "GPT")
        assert "generate" not in {node.name for node in gpt.body if isinstance(node, ast.FunctionDef)}
    assert "def sample_next_token" not in late["generate"][1]["reference"]
    assert "def sample_next_token" in late["kv_cache"][1]["reference"]  # generate, below kv_cache, is stood in


def sized_parameters(cls) -> list[inspect.Parameter]:
    """The parameters of a dataclass's constructor that take a number (or a tuple of sizes)."""
    numeric = ("int", "float", "bool", "tuple[int")
    return [p for p in inspect.signature(cls).parameters.values()
            if str(p.annotation).startswith(numeric) or str(p.annotation) in ("int | None", "float | None")]


def test_every_size_a_check_or_an_item_takes_is_a_keyword():
    """A checks file reads ``AttentionCase(batch=2, seq=6, ...)``, never ``AttentionCase(2, 6, ...)``."""
    classes = [Item] + [cls for module in (kinds, gpt_kinds, tiled_kinds, stream_kinds, decoder_kinds, cases, tiled_judges)
                        for cls in vars(module).values()
                        if dataclasses.is_dataclass(cls) and isinstance(cls, type) and cls.__module__ == module.__name__
                        and cls.__name__.endswith(("Check", "Case"))]
    positional = [f"{cls.__name__}.{p.name}" for cls in classes for p in sized_parameters(cls)
                  if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    assert not positional
    assert len(classes) > 20 and all(sized_parameters(cls) for cls in (Item, cases.AttentionCase, tiled_judges.TileCase))
    with pytest.raises(TypeError):
        cases.AttentionCase(2, 6, 5, 8)
