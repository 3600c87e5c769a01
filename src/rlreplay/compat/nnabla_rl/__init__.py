"""nnabla-rl's replay API on rlreplay: change the import line, keep the code.

``nnabla_rl.replay_buffer`` is :mod:`rlreplay.compat.nnabla_rl.replay_buffer` and
``nnabla_rl.replay_buffers`` is :mod:`rlreplay.compat.nnabla_rl.replay_buffers`; neither nnabla
nor nnabla-rl is needed. The differences from nnabla-rl are listed in
``docs/migrating/nnabla_rl.md``.

Example:
    >>> import rlreplay.compat.nnabla_rl as rl
    >>> rl.replay_buffer.ReplayBuffer is rl.ReplayBuffer
    True
    >>> rl.replay_buffers.TrajectoryReplayBuffer(num_trajectories=5).capacity
    5
"""

from rlreplay.compat.nnabla_rl import replay_buffer, replay_buffers
from rlreplay.compat.nnabla_rl.replay_buffer import Experience, ReplayBuffer

__all__ = ["Experience", "ReplayBuffer", "replay_buffer", "replay_buffers"]
