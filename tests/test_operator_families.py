"""The families of what an item forbids (:mod:`transformer_lm.instructor.operator_families`): the
stored file is what calling every operator and Python function of this torch finds, the softmax
family holds the attention kernels that compute a softmax under other names, and none holds what
hand-written softmax or attention runs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from transformer_lm.forbidding import FAMILY_FILE, families


@pytest.fixture(scope="module")
def found():
    """The families found anew, in a Python of their own (its calls fork, and some crash their child)."""
    done = subprocess.run([sys.executable, "-c", "import json\nfrom transformer_lm.instructor import "
                           "operator_families\nprint(json.dumps(operator_families.find()))"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_the_stored_families_are_what_calling_every_candidate_finds(found):
    """``python -m transformer_lm.instructor.operator_families`` makes the stored file again, as is."""
    assert found == json.loads(FAMILY_FILE.read_text())


def test_the_softmax_family_holds_the_attention_kernels_whatever_their_names():
    softmax, attention = families()["softmax"], families()["attention"]
    assert set(attention["forward"]) <= set(softmax["forward"])
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in softmax["forward"]   # no "softmax" in its name
    assert "torch.nn.attention.flex_attention:flex_attention" in softmax["python"]


def test_no_family_holds_what_hand_written_code_runs():
    from transformer_lm.instructor import operator_families
    import torch

    hand_written = operator_families._hand_written_ran(torch.Generator().manual_seed(1))
    assert {"aten::bmm", "aten::mm", "aten::exp", "aten::sum"} & hand_written
    for family in families().values():
        assert not hand_written & set(family["forward"] + family["backward"]), family
