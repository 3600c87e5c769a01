"""rlreplay: experience replay for reinforcement learning.

An episode-aware replay buffer with n-step windows, frame stacks, prioritized sampling and
atomic checkpoints, built on NumPy with Numba kernels for the hot loops.

Example:
    >>> import numpy as np, rlreplay as rr
    >>> buf = rr.ReplayBuffer(capacity=100, fields={"obs": rr.Field((4,), np.float32)}, seed=0)
"""

from typing import Any

from rlreplay.batch import Batch
from rlreplay.buffer.episodes import StoredRange
from rlreplay.buffer.loading import load
from rlreplay.buffer.prioritized import PrioritizedReplayBuffer, PriorityStarts
from rlreplay.buffer.replay import ReplayBuffer
from rlreplay.buffer.sync import Atomic
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


def __getattr__(name: str) -> Any:
    """``__version__``: the installed distribution's version, read from its metadata on first
    use (so that ``import rlreplay`` does not pay for reading it)."""
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("rlreplay")
        except PackageNotFoundError:  # run from a source tree that was never installed
            found = "0+unknown"
        globals()["__version__"] = found
        return found
    raise AttributeError(f"module 'rlreplay' has no attribute {name!r}")


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
