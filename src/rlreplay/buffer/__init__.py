"""The public buffers: :class:`ReplayBuffer`, :class:`PrioritizedReplayBuffer` and :func:`load`.

Owns construction from keyword arguments, the lock, the random generator and the order in which
the parts (storage, episode index, sampler, assembler, writer) are called. Holds no array
arithmetic of its own: each part's module does that.
"""

from rlreplay.buffer.budget import check_result
from rlreplay.buffer.episodes import StoredRange
from rlreplay.buffer.loading import load
from rlreplay.buffer.prioritized import PrioritizedReplayBuffer, PriorityMass, PriorityStarts
from rlreplay.buffer.replay import ReplayBuffer
from rlreplay.buffer.sync import Atomic, check_timeout

__all__ = [
    "Atomic",
    "PrioritizedReplayBuffer",
    "PriorityMass",
    "PriorityStarts",
    "ReplayBuffer",
    "StoredRange",
    "check_result",
    "check_timeout",
    "load",
]
