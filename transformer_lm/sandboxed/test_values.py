"""Public test values for assignment 02, under the names of the UMass Lowell homework it comes from.

``SelfAttentionTestValues`` and ``MultiHeadAttentionTestValues`` hold an input ``x`` of shape
(3, 5, 7), weights and biases for ``hidden=9`` (and 3 heads), and the expected ``output``
(and ``output_causal``). They are loaded from a file that ``python -m
transformer_lm.instructor.make_test_values`` makes from a fixed seed; this module imports nothing else
of the package, so it also works inside the grading sandbox.
"""

from pathlib import Path

from safetensors.torch import load_file

_VALUES = load_file(str(Path(__file__).parent / "data" / "test_values.safetensors"))


def _group(name: str) -> type:
    prefix = name + "."
    members = {key[len(prefix):]: value for key, value in _VALUES.items() if key.startswith(prefix)}
    return type(name, (), {"__doc__": f"Test values of {name[:-len('TestValues')]}.", **members})


SelfAttentionTestValues = _group("SelfAttentionTestValues")
MultiHeadAttentionTestValues = _group("MultiHeadAttentionTestValues")
