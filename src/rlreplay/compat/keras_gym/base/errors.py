"""Stand-in for ``keras_gym.base.errors``: the errors the keras-gym replay buffer raises.

Each class keeps its keras-gym name and base (``KerasGymError``, ``SpaceError``), so
``except InsufficientCacheError`` keeps working, and also derives from the rlreplay error that
means the same thing, so code written against rlreplay (``except rr.EmptyBufferError``,
``except ValueError``) catches it too. Where keras-gym raises a built-in (``RuntimeError`` when
no valid sample can be built) the front-end raises a class that is that built-in.
"""

from __future__ import annotations

from rlreplay import ConfigError, EmptyBufferError, ReplayError, ShapeError

__all__ = [
    "ActionAssertionError",
    "ActionSpaceError",
    "ActionValueError",
    "EmptyRingError",
    "FrameCountError",
    "InsufficientCacheError",
    "KerasGymError",
    "NumpyArrayCheckError",
    "SampleConstructionError",
    "SpaceError",
]


class KerasGymError(Exception):
    """Base class of keras-gym's errors (``keras_gym.base.errors.KerasGymError``)."""


class SpaceError(KerasGymError, ReplayError, ValueError):
    """An env's space does not support what was asked (keras-gym's ``SpaceError``)."""


class ActionSpaceError(SpaceError):
    """The action space has no such property (``num_actions`` of a non-Discrete space)."""


class InsufficientCacheError(KerasGymError, EmptyBufferError):
    """``sample()`` was called before enough transitions were added to fill a batch."""


class NumpyArrayCheckError(KerasGymError, ShapeError):
    """A state does not have the shape the buffer expects (e.g. the frame-stack axis)."""


class SampleConstructionError(ReplayError, RuntimeError):
    """No valid batch within keras-gym's budget of ``10 * batch_size`` draws.

    keras-gym raises a plain ``RuntimeError("couldn't construct valid sample")`` there; this
    class is a ``RuntimeError`` so ``except RuntimeError`` keeps working.
    """


class EmptyRingError(ReplayError, RuntimeError):
    """``sample()`` of an empty ring that ``len()`` does not show as empty.

    With a negative ``bootstrap_n = -m`` keras-gym's ``len()`` counts ``m`` slots more than
    the ring holds, so after a ``clear()`` the size check passes and keras-gym raises a
    plain ``RuntimeError("please insert more transitions before sampling")``; this class is
    that ``RuntimeError``.
    """


class FrameCountError(ConfigError, TypeError):
    """``sample()`` of a buffer whose env has ``num_frames=None``.

    keras-gym builds such a buffer and adds to it, and every ``sample()`` fails with the
    ``TypeError`` of ``np.arange(None - 1, -1, -1)``; this class is that ``TypeError``.
    """


class ActionAssertionError(ReplayError, AssertionError):
    """A ``Discrete`` action that is neither an integer scalar nor one-hot of the right size.

    keras-gym's ``_one_hot_encode_discrete`` asserts ``np.ndim(a) == 0 and isinstance(a,
    (int, np.integer))``; this class is that ``AssertionError``.
    """


class ActionValueError(ReplayError, ValueError):
    """A ``Discrete`` action outside ``[0, num_actions)`` (keras-gym's ``one_hot`` raises
    ``ValueError("i must be non-negative and smaller than n")``)."""
