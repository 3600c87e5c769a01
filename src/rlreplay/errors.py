"""Every error rlreplay raises.

Each class derives from :class:`ReplayError` *and* from the built-in exception that fits, so
callers can catch either ``rr.ReplayError`` or the built-in (``ValueError``, ``TypeError``,
``KeyError``, ``TimeoutError``) they already expect. Messages name the field (or argument),
what was expected and what came.
"""

from __future__ import annotations

__all__ = [
    "CheckpointError",
    "ConfigError",
    "DTypeError",
    "EmptyBufferError",
    "FieldError",
    "InvalidIdError",
    "PerformanceWarning",
    "PriorityError",
    "ReplayClosed",
    "ReplayError",
    "ReplayTimeout",
    "ShapeError",
]


class ReplayError(Exception):
    """Base class of every rlreplay error."""


class ConfigError(ReplayError, ValueError):
    """A constructor argument is out of range or inconsistent with another one."""


class ShapeError(ReplayError, ValueError):
    """A value has the wrong shape for its field (or a bad leading batch axis)."""


class DTypeError(ReplayError, TypeError):
    """A value cannot be cast to its field's dtype without an unsafe cast."""


class FieldError(ReplayError, KeyError):
    """A field is unknown, missing, or declared twice.

    ``KeyError`` would print the message in quotes (its ``str`` is the ``repr`` of the key);
    this class prints it plainly.
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class InvalidIdError(ReplayError, ValueError):
    """A transition id (or env id) was never issued or is out of range."""


class PriorityError(ReplayError, ValueError):
    """A priority (or tree value) is NaN, infinite, negative, or otherwise out of range."""


class EmptyBufferError(ReplayError, ValueError):
    """Sampling was asked for but nothing is sampleable yet."""


class CheckpointError(ReplayError, ValueError):
    """A checkpoint is missing, truncated, corrupted, or of an unknown version."""


class ReplayTimeout(ReplayError, TimeoutError):
    """A blocking call did not complete within its timeout."""


class ReplayClosed(ReplayError, RuntimeError):
    """The buffer was closed while a call was waiting on it (or before the call)."""


class PerformanceWarning(RuntimeWarning):
    """A fast path is unavailable: the call still does what it documents, only slower."""
