"""rlreplay: experience replay for reinforcement learning.

An episode-aware replay buffer with n-step windows, frame stacks, prioritized sampling and
atomic checkpoints, built on NumPy with Numba kernels for the hot loops.

Example:
    >>> import numpy as np, rlreplay as rr
    >>> buf = rr.ReplayBuffer(capacity=100, fields={"obs": rr.Field((4,), np.float32)}, seed=0)
"""

from rlreplay.batch import Batch
from rlreplay.buffer.episodes import StoredRange
from rlreplay.buffer.fifo import Atomic
from rlreplay.buffer.prioritized import PrioritizedReplayBuffer, PriorityStarts
from rlreplay.buffer.replay import ReplayBuffer, load
from rlreplay.errors import (
    CheckpointError,
    ConfigError,
    DTypeError,
    EmptyBufferError,
    FieldError,
    InvalidIdError,
    PerformanceWarning,
    PriorityError,
    ReplayClosed,
    ReplayError,
    ReplayTimeout,
    ShapeError,
)
from rlreplay.limits import MinSize, RateLimiter, SampleToInsertRatio
from rlreplay.sampling.trees import MaxTree, MinTree, SumTree
from rlreplay.sharing.handle import SharedHandle, SharedWriter, attach
from rlreplay.spec.schema import Field
from rlreplay.transforms import HindsightRelabel

__version__ = "0.1.0"

__all__ = [
    "Atomic",
    "Batch",
    "CheckpointError",
    "ConfigError",
    "DTypeError",
    "EmptyBufferError",
    "Field",
    "FieldError",
    "HindsightRelabel",
    "InvalidIdError",
    "MaxTree",
    "MinSize",
    "MinTree",
    "PerformanceWarning",
    "PrioritizedReplayBuffer",
    "PriorityError",
    "PriorityStarts",
    "RateLimiter",
    "ReplayBuffer",
    "ReplayClosed",
    "ReplayError",
    "ReplayTimeout",
    "SampleToInsertRatio",
    "ShapeError",
    "SharedHandle",
    "SharedWriter",
    "StoredRange",
    "SumTree",
    "__version__",
    "attach",
    "load",
]
