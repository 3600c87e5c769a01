"""Argument checks and errors of the nnabla-rl front-end, with nnabla-rl's exception types."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from rlreplay import ConfigError, ReplayError

__all__ = [
    "CapacityError",
    "ExperienceRangeError",
    "Indices",
    "PositionError",
    "PositionKeyError",
    "ZeroCapacityError",
    "as_indices",
    "check_capacity",
    "check_count",
    "check_seed",
    "distinct_draw",
]

Array = np.ndarray[Any, Any]
#: Positions of experiences: a sequence of ints or a 1-D integer array.
Indices = Sequence[int] | np.ndarray[Any, Any]


class CapacityError(ConfigError, AssertionError):
    """A negative capacity: nnabla-rl's ``assert capacity is None or capacity >= 0``."""


class ZeroCapacityError(ConfigError, ZeroDivisionError):
    """An append to a buffer of capacity 0 (nnabla-rl's ring divides by its length, 0)."""


class PositionKeyError(ReplayError, KeyError, IndexError):
    """A position out of range in a bounded buffer (nnabla-rl's ring raises ``KeyError``).

    Also an ``IndexError``, so that ``for e in buffer`` (the sequence protocol) stops at the
    end instead of failing as it does on nnabla-rl's ring.
    """


class PositionError(ReplayError, IndexError):
    """A position out of range in an unbounded buffer (nnabla-rl's deque: ``IndexError``)."""


class ExperienceRangeError(ReplayError, ValueError):
    """An experience index past a trajectory buffer's end (nnabla-rl: ``ValueError``)."""


def check_capacity(name: str, value: Any, *, allow_none: bool = True) -> int | None:
    """nnabla-rl's capacity rule: None (when allowed) or an int ``>= 0``.

    nnabla-rl asserts ``capacity is None or capacity >= 0`` (``AssertionError``) and builds
    its ring with ``range(capacity)`` (``TypeError`` for a float); a capacity of 0 is accepted
    there and fails at the first append, as here (:class:`ZeroCapacityError`).
    """
    if value is None:
        if allow_none:
            return None
        raise TypeError(f"{name}: expected an int >= 0, got None")
    if value < 0:  # a value that does not compare with 0 raises TypeError, as in nnabla-rl
        raise CapacityError(f"{name}: expected None or an int >= 0, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: expected an int >= 0, got {type(value).__name__}") from None


def check_seed(seed: Any) -> int | None:
    if seed is not None and (
        isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0
    ):
        raise ConfigError(f"seed: expected a non-negative int or None, got {seed!r}")
    return None if seed is None else int(seed)


def check_count(name: str, value: Any) -> int:
    """A positive int argument (``num_samples``, ``num_steps``, ``portion_length``)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{name}: {value} should be greater than 0!")
    return int(value)


def as_indices(indices: Any) -> Array:
    """A 1-D int64 array of the given indices; an empty one is nnabla-rl's ``ValueError``."""
    arr = np.asarray(indices)
    if arr.size == 0:
        raise ValueError("Indices are empty")
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise TypeError(
            f"indices: expected a 1-D sequence of ints, got dtype {arr.dtype} shape {arr.shape}"
        )
    return arr.astype(np.int64, copy=False)


def distinct_draw(total: int, k: int, rng: np.random.Generator) -> Array:
    """``k`` distinct positions of ``[0, total)``, uniformly (the core's no-replacement draw).

    One ``rng.choice(total, k, replace=False)``: the draw nnabla-rl makes with its global
    generator (the core's no-replacement draw makes the same call).
    """
    out: Array = rng.choice(total, size=k, replace=False).astype(np.int64, copy=False)
    return out
