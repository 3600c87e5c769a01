"""ALF's replay API on rlreplay: change the import line, keep the code.

``alf.experience_replayers.replay_buffer`` is :mod:`rlreplay.compat.alf.replay_buffer`,
``alf.experience_replayers.segment_tree`` is :mod:`rlreplay.compat.alf.segment_tree` and
``alf.TensorSpec`` is :class:`rlreplay.compat.alf.TensorSpec`; ALF itself is not needed (torch
is). The differences from ALF are listed in ``docs/migrating/alf.md``.

Example:
    >>> import rlreplay.compat.alf as alf
    >>> alf.replay_buffer.ReplayBuffer is alf.ReplayBuffer
    True
    >>> alf.TensorSpec((3,)).shape
    torch.Size([3])
"""

from rlreplay.compat.alf import replay_buffer, segment_tree, tensor_specs
from rlreplay.compat.alf.replay_buffer import (
    BatchInfo,
    ReplayAssertionError,
    ReplayBuffer,
    StepType,
)
from rlreplay.compat.alf.segment_tree import (
    MaxSegmentTree,
    MinSegmentTree,
    SegmentTree,
    SumSegmentTree,
)
from rlreplay.compat.alf.tensor_specs import TensorSpec

__all__ = [
    "BatchInfo",
    "MaxSegmentTree",
    "MinSegmentTree",
    "ReplayAssertionError",
    "ReplayBuffer",
    "SegmentTree",
    "StepType",
    "SumSegmentTree",
    "TensorSpec",
    "replay_buffer",
    "segment_tree",
    "tensor_specs",
]
