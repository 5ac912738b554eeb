"""One assignment loaded for grading: its release cells, its items and their prepared checks (hidden
inputs drawn from the course's secret), and for the items that build on earlier ones, the course's
code that stands in for a wrong earlier answer (one mistake costs points once)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from autograder.reading import course_code
from autograder.reading.cells import grade_ids
from autograder.reading.course import Course, checks_version, generator_for, load_checks
from autograder.reading.errors import GradingError
from autograder.reading.notebook_data import read_notebook
from autograder.reading.spec import Item
from transformer_lm.instructor import reference
from transformer_lm.prepared import Prepared

WITH_COURSE_CODE = "+course"
"""The suffix of a probe id that runs with the course's stand-ins in place of earlier answers."""
TIMED_REFERENCE = ""
"""Where :func:`_course_code` is asked for the course's code that makes the timed checks' calls
(no grade_id is empty)."""


@dataclass
class Assignment:
    """Everything about one assignment that is the same for every student."""

    name: str
    release: dict[str, list[dict]]  # notebook name -> its release cells
    items: dict[str, list[Item]]  # notebook name -> its items
    prepared: dict[str, Prepared]  # probe id -> prepared check
    probe_item: dict[str, str]  # probe id -> grade_id
    points: dict[str, float]  # grade_id -> points
    answers: dict[str, str]  # grade_id -> the answer cell it grades
    checks_version: str  # checks_version() of the files it was loaded from
    below: dict[str, list[str]] = field(default_factory=dict)  # grade_id -> the items it builds on, at any depth
    stand_ins: dict[str, list[str]] = field(default_factory=dict)  # probe id -> names the course's code replaces
    course_code: dict[str, dict] = field(default_factory=dict)  # grade_id -> its late run's course code (CourseCode)
    texts: dict[str, str] = field(default_factory=dict)  # the checks file's own TEXTS (its judges' templates)
    reference_code: dict = field(default_factory=dict)  # the course's code that makes the timed checks' calls
    shown_as: dict[str, str] = field(default_factory=dict)  # a stand-in's name -> what the feedback calls it

    def stand_ins_shown(self, pid: str) -> list[str]:
        """The course's code that stands in for the answers below probe ``pid``, as the feedback calls it."""
        return [self.shown_as.get(name, name) for name in self.stand_ins[pid]]

    @classmethod
    def load(cls, course: Course, name: str) -> Assignment:
        release, items, prepared, probe_item = {}, {}, {}, {}
        module = load_checks(course, name)
        all_items = list(module.ITEMS)
        secret = course.secret()
        located = set()
        for notebook, path in course.release_notebooks(name).items():
            data, problem = read_notebook(path)
            if problem:
                raise GradingError(f"The release notebook {path} is damaged: {problem}")
            release[notebook] = data["cells"]
            ids = grade_ids(data["cells"])
            items[notebook] = [item for item in all_items if item.answer_id in ids]
            located.update(item.grade_id for item in items[notebook])
        lost = [item.answer_id for item in all_items if item.grade_id not in located]
        if lost:
            raise GradingError(f"Hidden checks name answer cells that no release notebook of {name} has: {lost}")
        below, stand_ins = _builds_on(all_items, items), {}
        defined = {item.grade_id: item.defines for item in all_items}
        for item in all_items:
            names = sorted({name for gid in below[item.grade_id] for name in defined[gid]})
            for index, check in enumerate(item.checks):
                pid = f"{item.grade_id}.{index}"
                prepared[pid] = check.prepare(generator_for(secret, name, item.grade_id, index))
                probe_item[pid] = item.grade_id
                if names:
                    prepared[pid + WITH_COURSE_CODE], probe_item[pid + WITH_COURSE_CODE] = prepared[pid], item.grade_id
                    stand_ins[pid + WITH_COURSE_CODE] = names
        late = {probe_item[pid]: names for pid, names in stand_ins.items()}
        timed = sorted({prep.clocked.stands_in for prep in prepared.values() if prep.clocked is not None})
        code = _course_code(course, name, {**late, **({TIMED_REFERENCE: timed} if timed else {})},
                            {n for names in defined.values() for n in names})
        return cls(name, release, items, prepared, probe_item, {i.grade_id: i.points for i in all_items},
                   {i.grade_id: i.answer_id for i in all_items}, checks_version(course, name), below, stand_ins, code,
                   getattr(module, "TEXTS", {}), code.pop(TIMED_REFERENCE, {}), _shown_as(course, name))


def _builds_on(all_items: list[Item], by_notebook: dict[str, list[Item]]) -> dict[str, list[str]]:
    """Each item's ``builds_on``, followed to every depth (nearest first), checked: an item builds
    on earlier items of its own notebook that define what the course's code stands in for."""
    notebook = {item.grade_id: nb for nb, items in by_notebook.items() for item in items}
    below: dict[str, list[str]] = {}
    for item in all_items:
        below[item.grade_id] = []
        for gid in item.builds_on:
            if gid not in below or notebook.get(gid) != notebook.get(item.grade_id):
                raise GradingError(f"Item {item.grade_id!r} builds on {gid!r}, which is not an earlier item of "
                                   f"its notebook.")
            below[item.grade_id] += [g for g in (gid, *below[gid]) if g not in below[item.grade_id]]
        if below[item.grade_id] and not any(i.defines for i in all_items if i.grade_id in below[item.grade_id]):
            raise GradingError(f"Item {item.grade_id!r} builds on items that define nothing the course's code can "
                               f"stand in for: give them defines=(...).")
    return below


def _shown_as(course: Course, assignment: str) -> dict[str, str]:
    """The stand-ins file's ``SHOWN_AS`` (a literal dict; the file itself runs only in the sandbox):
    what the feedback calls the course's code that stands in for a name, where that code is not
    the whole of it (the course's layers in the student's own class, say)."""
    path = course.stand_ins_file(assignment)
    if not path.exists():
        return {}
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["SHOWN_AS"]:
            try:
                return dict(ast.literal_eval(node.value))
            except (ValueError, TypeError) as error:
                raise GradingError(f"{path}: SHOWN_AS must be a dict written out, name to words ({error}).") from error
    return {}


def _course_code(course: Course, assignment: str, late: dict[str, list[str]], defines: set[str]) -> dict[str, dict]:
    """For each item judged in a late run (grade_id -> the names the course's code stands in
    for), the course's code that run gets (:mod:`autograder.reading.course_code`); every name an item
    defines must be defined at the top of the stand-ins' file."""
    if not late:
        return {}
    path = course.stand_ins_file(assignment)
    if not path.exists():
        raise GradingError(f"Items of {assignment} build on earlier answers: the course's stand-ins for them are "
                           f"expected in {path}.")
    source = path.read_text()
    tree = ast.parse(source, str(path))
    top = {node.name for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
    top |= {target.id for node in tree.body if isinstance(node, ast.Assign) for target in node.targets
            if isinstance(target, ast.Name)}
    if defines - top:
        raise GradingError(f"{path} does not define {', '.join(sorted(defines - top))}, which items define.")
    reference_source = course_code.reference_source(Path(reference.__file__).parent)
    return {gid: course_code.for_names(reference_source, source, names, defines) for gid, names in late.items()}
