"""benchmarks/cuda_check.py, which checks assignment 05's claims about tiled attention where a GPU
is, runs on the CPU too, and fails when a claim does not hold."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import cuda_check  # noqa: E402

def test_the_claims_hold_on_the_cpu(capsys):
    assert cuda_check.main(["--device", "cpu", "--sizes", "128", "256"]) == 0
    assert "all claims hold" in capsys.readouterr().out

def test_a_tiled_version_whose_memory_grows_with_t_squared_fails(monkeypatch, capsys):
    plain = cuda_check.versions()["plain"]
    monkeypatch.setattr(cuda_check, "versions", lambda: {"plain": plain, "flash_forward": plain})
    assert cuda_check.main(["--device", "cpu", "--sizes", "128", "256"]) == 1
    assert "flash_forward's memory grew x4.00" in capsys.readouterr().out

def test_a_tiled_version_that_computes_something_else_fails(monkeypatch, capsys):
    monkeypatch.setattr(cuda_check, "TOLERANCE", 0.0)
    assert cuda_check.main(["--device", "cpu", "--sizes", "128", "256"]) == 1
    assert "differs from plain attention" in capsys.readouterr().out
