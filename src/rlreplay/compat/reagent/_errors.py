"""Errors of the ReAgent front-end that are also the exception types ReAgent raises.

ReAgent checks many inputs with ``assert``: its constructor asserts that ``observation_shape``
is a tuple, its ``SumTree`` that the capacity is an int, its ``sample_transition_batch`` that
``len(indices) == batch_size``, its priority getters that indices are integers, and its later
(shape-inferring) buffer that each added value has the shape and dtype of the first one. A
ReAgent user catches ``AssertionError`` there; an rlreplay user catches the rlreplay error. Each
class below is both.
"""

from __future__ import annotations

from rlreplay import CheckpointError, ConfigError, InvalidIdError, ShapeError

__all__ = [
    "ConfigAssertionError",
    "ConfigTypeError",
    "ElementAssertionError",
    "IndexAssertionError",
    "NotFoundError",
    "SlotRangeError",
    "StackedRewardError",
]


class ConfigAssertionError(ConfigError, AssertionError):
    """A constructor argument ReAgent refuses with ``assert`` (e.g. a non-tuple shape)."""


class ConfigTypeError(ConfigError, TypeError):
    """A size that is not an int (ReAgent's ``np.empty``/``range`` raise ``TypeError``)."""


class ElementAssertionError(ShapeError, AssertionError):
    """An added value whose shape or dtype differs from the one inferred at the first add."""


class IndexAssertionError(InvalidIdError, AssertionError):
    """Indices ReAgent refuses with ``assert`` (not integers, or not ``batch_size`` of them)."""


class SlotRangeError(InvalidIdError, IndexError):
    """A slot or tree leaf index out of range (an ``IndexError``, as NumPy's in ReAgent)."""


class NotFoundError(CheckpointError, FileNotFoundError):
    """Not all files of a checkpoint were found (``load``).

    Subclasses :class:`rlreplay.CheckpointError` (a ``ValueError``) and ``FileNotFoundError``.
    """


class StackedRewardError(ConfigError, NotImplementedError):
    """Stacked rewards with ``update_horizon > 1``, which 0.1's sampling refuses.

    reagent 0.1's ``sample_transition_batch`` raises ``NotImplementedError("Uncertain how to do
    this without double counting..")`` when it reaches the ``reward`` element of such a buffer,
    after drawing the indices.
    """

    @classmethod
    def for_horizon(cls, update_horizon: int) -> StackedRewardError:
        """The error for a buffer of this ``update_horizon``, with 0.1's message."""
        return cls(
            "reward: expected update_horizon 1 with return_everything_as_stack=True, got "
            f"update_horizon={update_horizon} (reagent 0.1: Uncertain how to do this without "
            "double counting..)"
        )
