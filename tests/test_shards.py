"""Grading in shards: three slices merged give exactly what one run gives."""

import csv
import json
import shutil

import pytest
from nbgrader.api import Gradebook

import notebook_tools as tools
from autograder.commands import demo
from autograder.recording import pipeline
from autograder.running import sandbox
from autograder.commands.cli import main
from autograder.reading.course import Course

A = demo.ASSIGNMENT
pytestmark = pytest.mark.skipif(sandbox.detect_isolation().name != "bubblewrap",
                                reason=sandbox.detect_isolation().detail)


def reports(root):
    return {p.stem: json.loads(p.read_text()) for p in sorted((root / "reports" / A).glob("*.json"))}


def gradebook_scores(root, students):
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gradebook:
        return {(student, grade.name): (grade.auto_score, grade.needs_manual_grade)
                for student in students
                for notebook in gradebook.find_submission(A, student).notebooks for grade in notebook.grades}


def test_three_shards_merged_equal_one_run(tmp_path):
    single, sharded = tmp_path / "single", tmp_path / "sharded"
    single.mkdir()
    demo.build_course(single)
    Course(single).secret()
    shutil.copytree(single, sharded)  # the shards share one course folder, and so its secret
    students = Course(single).students(A)

    tools.grade_course(single, A, workers=2)
    for index in range(3):
        tools.grade_course(sharded, A, workers=1, shard=(index, 3))
        assert set(reports(sharded)) == {s for i in range(index + 1) for s in students[i::3]}  # its slice only
    with Gradebook(f"sqlite:///{sharded / 'gradebook.db'}") as gradebook:
        assert gradebook.find_assignment(A).submissions == []  # shards leave the gradebook to the merge
    pipeline.merge(Course(sharded), A)

    assert reports(sharded) == reports(single)
    assert gradebook_scores(sharded, students) == gradebook_scores(single, students)
    with (single / "reports" / A / "grades.csv").open() as one, (sharded / "reports" / A / "grades.csv").open() as many:
        assert list(csv.reader(one)) == list(csv.reader(many))
    for student in students:
        for folder in ("autograded", "feedback"):
            made = sorted(p.name for p in (sharded / folder / student / A).iterdir())
            assert made == sorted(p.name for p in (single / folder / student / A).iterdir())


@pytest.mark.parametrize("shard", ["3/3", "-1/3", "1", "a/b"])
def test_a_wrong_shard_is_refused_with_its_form(shard, capsys, tmp_path):
    with pytest.raises(SystemExit):
        main(["grade", A, "--course", str(tmp_path), "--shard", shard])
    assert "--shard" in capsys.readouterr().err


def test_merge_without_reports_says_what_to_run(tmp_path, capsys):
    shutil.copy2(tools.REPO_ROOT / "nbgrader_config.py", tmp_path)
    shutil.copytree(tools.REPO_ROOT / "release" / A, tmp_path / "release" / A)   # released, not graded
    assert main(["merge", A, "--course", str(tmp_path)]) == 2
    assert f"autograder grade {A} --shard" in capsys.readouterr().err
