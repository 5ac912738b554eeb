"""`autograder demo`, the README's main job, runs end to end and prints the class's table."""

import os
import subprocess
import sys

import pytest

from autograder.running import sandbox


@pytest.mark.skipif(sandbox.detect_isolation().name != "bubblewrap", reason="needs bubblewrap")
def test_demo_grades_its_class(tmp_path):
    done = subprocess.run([sys.executable, "-m", "autograder", "demo", "--keep", str(tmp_path / "demo")],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "80"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    table = done.stdout.split("student")[1].split("\n\n")[0]  # the rows, before the legend
    rows = {line.split()[0]: line.split()[1] for line in table.splitlines()
            if line.split() and line.split()[0] in ("ada_solution", "bo_blank", "cy_mistake", "dee_cheater")}
    assert rows == {"ada_solution": "10/10", "bo_blank": "0/10", "cy_mistake": "9/10", "dee_cheater": "0/10"}
    assert "Isolation: bubblewrap" in done.stdout and "  dee_cheater: " in done.stdout.split("Flags:")[1]
    assert "  cy_mistake 6 failed: softmax over the wrong dimension" in done.stdout
    shown = done.stdout.split("student")[1].split("Reports and grades.csv:")[0]
    assert all(len(line) <= 80 for line in shown.splitlines()), "the table is wider than the terminal"
    assert (tmp_path / "demo" / "feedback" / "cy_mistake" / "01_attention_basics" / "attention_basics.html").exists()
    assert (tmp_path / "demo" / "reports" / "01_attention_basics" / "report.html").exists()
