"""The ungraded lecture notebooks in notebooks/: committed without outputs, and each one runs top
to bottom in a real kernel of the student kit's environment (tests/kit_fixtures.py) and draws every
figure it shows. The notebooks check their own step-by-step computations with assertions (against
PyTorch's own functions, never the course's reference, which students do not receive), so a cell that
disagrees fails here too. The GPT notebook must also reach the accuracy it states and show the
attention pattern its text describes."""

import re

import pytest

import notebook_tools as tools

NOTEBOOK_DIR = tools.REPO_ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))


def outputs(nb, mime):
    """Every output of the code cells that carries ``mime`` (for example ``image/png``)."""
    return [out for cell in nb.cells if cell.cell_type == "code"
            for out in cell.outputs if mime in out.get("data", {})]


def check_gpt_learns_to_reverse(nb):
    """The accuracy the notebook promises, and the anti-diagonal its text describes: every head
    puts most of the weight of each answer row on the digit that row has to copy."""
    text = "".join(tools.text_outputs(cell) for cell in nb.cells if cell.cell_type == "code")
    found = re.search(r"held-out exact-match accuracy: ([\d.]+)% \(target: at least ([\d.]+)%\)", text)
    assert found, "the accuracy line is missing"
    accuracy, target = map(float, found.groups())
    assert accuracy >= target, f"held-out accuracy {accuracy}% is below the stated {target}%"
    found = re.search(r"weight on the digit to copy, per head: (.+)", text)
    assert found, "the line with the weight on the digit to copy is missing"
    per_head = [float(w) for w in found.group(1).split(", ")]
    assert min(per_head) > 0.8, f"the maps do not show the anti-diagonal: {per_head}"


EXTRA_CHECKS = {"05_gpt_attention_maps": check_gpt_learns_to_reverse}


def test_the_lectures_are_there():
    assert len(NOTEBOOKS) >= 5, f"expected the five lecture notebooks in {NOTEBOOK_DIR}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_is_committed_clean(path):
    nb = tools.read(path)
    assert nb.nbformat == 4 and nb.metadata["kernelspec"]["name"] == "python3"
    for cell in nb.cells:
        assert cell.get("id"), "every cell needs an id"
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"outputs left in cell {cell.id}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_runs_top_to_bottom_and_draws_its_figures(path, kit_runs):
    """As the student kit ran it (tests/kit_fixtures.py), in the environment students have."""
    nb = tools.read(kit_runs[0] / path.name)
    failed = [(cell.id, tools.errors(cell)) for cell in nb.cells if cell.cell_type == "code" and tools.errors(cell)]
    assert failed == []
    shows = sum(cell.source.count("plt.show()") for cell in nb.cells if cell.cell_type == "code")
    assert shows >= 1, "a lecture notebook should show at least one figure"
    assert len(outputs(nb, "image/png")) == shows, "a plt.show() drew no figure"
    if path.stem in EXTRA_CHECKS:
        EXTRA_CHECKS[path.stem](nb)
