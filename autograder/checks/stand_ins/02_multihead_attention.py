"""The course's constructor of assignment 02's ``SelfAttention``, under the student's ``forward``.

``self_attention_init`` grades the layers that ``__init__`` makes and ``self_attention_forward``
grades ``forward``, in one class. When the layers are wrong (``nn.Linear`` given its sizes the
other way round, or made without biases), ``forward`` is graded again with this class in place
of the student's: their own class, whose layers ``q``, ``k`` and ``v`` are then the course's, so
that one mistake in the constructor costs points once (see :mod:`autograder.running.harness`).
It runs in the sandbox, where the name ``SelfAttention`` is the student's class when this file
runs.
"""

from torch import nn

SHOWN_AS = {"SelfAttention": "layers q, k and v of SelfAttention"}
"""What the feedback calls the course's code here: the layers, under the student's own ``forward``."""


class _Empty(nn.Module):
    """What the course's layers are built on where no student's class is defined (a test loads
    this file alone): a module with nothing of its own."""

    def __init__(self, input_size, hidden):
        super().__init__()


class SelfAttention(globals().get("SelfAttention", _Empty)):
    """The student's class with the course's layers: their constructor runs first, since their
    ``forward`` may read what it keeps beside the layers (a scale), then ``q``, ``k`` and ``v`` are
    made as the notebook asks, in place of theirs."""

    def __init__(self, input_size, hidden):
        super().__init__(input_size, hidden)
        self.q = nn.Linear(input_size, hidden)
        self.k = nn.Linear(input_size, hidden)
        self.v = nn.Linear(input_size, hidden)
