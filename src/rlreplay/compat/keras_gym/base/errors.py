"""Stand-in for ``keras_gym.base.errors``: the errors the keras-gym replay buffer raises.

Each class keeps its keras-gym name (so ``except InsufficientCacheError`` keeps working) and
also derives from the rlreplay error that means the same thing, so code written against
rlreplay (``except rr.EmptyBufferError``, ``except ValueError``) catches it too.
"""

from __future__ import annotations

from rlreplay.errors import EmptyBufferError, ReplayError, ShapeError

__all__ = [
    "ActionSpaceError",
    "InsufficientCacheError",
    "KerasGymError",
    "NumpyArrayCheckError",
]


class KerasGymError(Exception):
    """Base class of the keras-gym front-end's errors."""


class ActionSpaceError(KerasGymError, ReplayError, ValueError):
    """An action does not fit the env's action space (or the space has no such property)."""


class InsufficientCacheError(KerasGymError, EmptyBufferError):
    """``sample()`` was called before enough transitions were added to fill a batch."""


class NumpyArrayCheckError(KerasGymError, ShapeError):
    """A state does not have the shape the buffer expects (e.g. the frame-stack axis)."""
