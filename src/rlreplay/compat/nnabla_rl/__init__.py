"""nnabla-rl's replay API on rlreplay: change the import line, keep the code.

``nnabla_rl.replay_buffer`` is :mod:`rlreplay.compat.nnabla_rl.replay_buffer` and
``nnabla_rl.replay_buffers`` is :mod:`rlreplay.compat.nnabla_rl.replay_buffers`; neither nnabla
nor nnabla-rl is needed. ``nnabla_rl.random.drng`` and
``nnabla_rl.utils.reproductions.set_global_seed`` are here too, as the buffers draw from them.
The differences from nnabla-rl are listed in ``docs/migrating/nnabla_rl.md``.

Example:
    >>> import rlreplay.compat.nnabla_rl as rl
    >>> rl.replay_buffer.ReplayBuffer is rl.ReplayBuffer
    True
    >>> rl.replay_buffers.TrajectoryReplayBuffer(num_trajectories=5).capacity
    5
"""

from rlreplay.compat.nnabla_rl import random, replay_buffer, replay_buffers, utils
from rlreplay.compat.nnabla_rl.replay_buffer import Experience, ReplayBuffer

__all__ = ["Experience", "ReplayBuffer", "random", "replay_buffer", "replay_buffers", "utils"]
