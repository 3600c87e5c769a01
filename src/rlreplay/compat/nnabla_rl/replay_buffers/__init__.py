"""Stand-in for ``nnabla_rl.replay_buffers``: the replay buffers derived from ``ReplayBuffer``.

Example:
    >>> import rlreplay.compat.nnabla_rl.replay_buffers as RB
    >>> RB.PrioritizedReplayBuffer(capacity=10, variant="rank_based").capacity
    10
"""

from rlreplay.compat.nnabla_rl.replay_buffers.buffer_iterator import BufferIterator
from rlreplay.compat.nnabla_rl.replay_buffers.decorable_replay_buffer import DecorableReplayBuffer
from rlreplay.compat.nnabla_rl.replay_buffers.hindsight_replay_buffer import HindsightReplayBuffer
from rlreplay.compat.nnabla_rl.replay_buffers.memory_efficient_atari_buffer import (
    MemoryEfficientAtariBuffer,
    MemoryEfficientAtariTrajectoryBuffer,
    ProportionalPrioritizedAtariBuffer,
    RankBasedPrioritizedAtariBuffer,
)
from rlreplay.compat.nnabla_rl.replay_buffers.prioritized_replay_buffer import (
    PrioritizedReplayBuffer,
    ProportionalPrioritizedReplayBuffer,
    RankBasedPrioritizedReplayBuffer,
)
from rlreplay.compat.nnabla_rl.replay_buffers.replacement_sampling_replay_buffer import (
    ReplacementSamplingReplayBuffer,
)
from rlreplay.compat.nnabla_rl.replay_buffers.trajectory_replay_buffer import (
    TrajectoryReplayBuffer,
)

__all__ = [
    "BufferIterator",
    "DecorableReplayBuffer",
    "HindsightReplayBuffer",
    "MemoryEfficientAtariBuffer",
    "MemoryEfficientAtariTrajectoryBuffer",
    "PrioritizedReplayBuffer",
    "ProportionalPrioritizedAtariBuffer",
    "ProportionalPrioritizedReplayBuffer",
    "RankBasedPrioritizedAtariBuffer",
    "RankBasedPrioritizedReplayBuffer",
    "ReplacementSamplingReplayBuffer",
    "TrajectoryReplayBuffer",
]
