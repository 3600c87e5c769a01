"""Stand-in for the replay-buffer helpers of ``nnabla_rl.utils.data``.

nnabla-rl's algorithms turn a list of sampled experiences into batch arrays with
:func:`marshal_experiences`: element ``k`` of every experience is stacked into one array
(``np.asarray`` of the list), 1-D results get a trailing axis (so rewards and scalar actions are
``(B, 1)``), tuple elements (goal-conditioned states) are marshalled element by element into a
tuple of arrays, and dicts (``info``) key by key into a dict of arrays. :class:`RingBuffer` is
the ring nnabla-rl's bounded buffers keep their experiences in.

``set_data_to_variable`` is not here: it writes into an ``nnabla.Variable``, which needs
nnabla (assign the marshalled arrays to your framework's tensors instead).

Example:
    >>> import numpy as np
    >>> from rlreplay.compat.nnabla_rl.utils.data import marshal_experiences
    >>> experiences = [(np.zeros(3), 1, 0.5, 1.0, np.ones(3), {"t": t}) for t in range(4)]
    >>> s, a, r, non_terminal, s_next, info = marshal_experiences(experiences)
    >>> s.shape, a.shape, r.shape, info["t"].shape
    ((4, 3), (4, 1), (4, 1), (4, 1))
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

__all__ = [
    "DataHolder",
    "RingBuffer",
    "add_axis_if_single_dim",
    "add_batch_dimension",
    "compute_std_ndarray",
    "convert_to_list_if_not_list",
    "is_array_like",
    "list_of_dict_to_dict_of_list",
    "marshal_dict_experiences",
    "marshal_experiences",
    "normalize_ndarray",
    "unnormalize_ndarray",
    "unzip",
]

Array = np.ndarray[Any, Any]
T = TypeVar("T")
_logger = logging.getLogger("nnabla_rl")


def unzip(zipped_data: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
    """``list(zip(*zipped_data))``: the ``k``-th elements of every item, for each ``k``."""
    return list(zip(*zipped_data, strict=False))


def add_axis_if_single_dim(data: Array) -> Array:
    """``data`` with a trailing axis if it is 1-D (``(B,)`` -> ``(B, 1)``), else unchanged."""
    if data.ndim == 1:
        return np.expand_dims(data, axis=-1)
    return data


def list_of_dict_to_dict_of_list(list_of_dict: Sequence[Mapping[Any, Any]]) -> dict[Any, list[Any]]:
    """``{key: [d.get(key, None) for d in list_of_dict]}`` for the keys of the first dict.

    A later dict that lacks a key of the first one gives None there, as in nnabla-rl; keys
    only later dicts have are left out.
    """
    return {key: [d.get(key, None) for d in list_of_dict] for key in list_of_dict[0]}


def marshal_dict_experiences(dict_experiences: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A dict of batch arrays from a list of dicts (nested dicts and tuples marshalled).

    Values that are dicts are marshalled key by key again, tuples element by element (as
    :func:`marshal_experiences`), anything else stacked with ``np.asarray`` (a trailing axis
    added to 1-D results). A key whose values do not stack into one array (ragged shapes:
    ``np.asarray`` raises ``ValueError``, also inside a nested dict or tuple) is left out, with
    a warning on the ``nnabla_rl`` logger, as nnabla-rl does.
    """
    dict_of_list = list_of_dict_to_dict_of_list(dict_experiences)
    marshaled: dict[str, Any] = {}
    for key, data in dict_of_list.items():
        try:
            if isinstance(data[0], dict):
                marshaled[key] = marshal_dict_experiences(data)
            elif isinstance(data[0], tuple):
                marshaled[key] = marshal_experiences(data)
            else:
                marshaled[key] = add_axis_if_single_dim(np.asarray(data))
        except ValueError as e:
            _logger.warning(f"key: {key} contains inconsistent elements!. Details: {e}")
    return marshaled


def marshal_experiences(experiences: Sequence[Sequence[Any]]) -> tuple[Any, ...]:
    """A tuple of batch arrays from a list of experiences, one entry per experience element.

    Element ``k`` of the experiences becomes ``np.asarray([e[k] for e in experiences])``
    with a trailing axis if that is 1-D; tuples are marshalled element by element (a tuple of
    arrays) and dicts key by key (a dict of arrays).

    Example:
        >>> import numpy as np
        >>> goal_state = (np.zeros(5), np.zeros(2), np.ones(2))
        >>> (s, r) = marshal_experiences([(goal_state, 1.0), (goal_state, 0.0)])
        >>> [x.shape for x in s], r.tolist()
        ([(2, 5), (2, 2), (2, 2)], [[1.0], [0.0]])
    """
    marshaled: list[Any] = []
    for data in unzip(experiences):
        if isinstance(data[0], dict):
            marshaled.append(marshal_dict_experiences(data))
        elif isinstance(data[0], tuple):
            marshaled.append(marshal_experiences(data))
        else:
            marshaled.append(add_axis_if_single_dim(np.asarray(data)))
    return tuple(marshaled)


def add_batch_dimension(data: Any) -> Any:
    """``data`` with a leading batch axis of 1.

    An ``np.ndarray`` gets the axis; anything else is iterated (a tuple of arrays, as
    nnabla-rl expects) and a tuple of its elements, each with the axis, is returned.
    """
    if isinstance(data, np.ndarray):
        return np.expand_dims(data, axis=0)
    return tuple(np.expand_dims(d, axis=0) for d in data)


def is_array_like(x: Any) -> bool:
    """Whether ``x`` has a ``__len__`` (nnabla-rl's test)."""
    return hasattr(x, "__len__")


def convert_to_list_if_not_list(value: Any) -> list[Any]:
    """``list(value)`` for an iterable, else ``[value]``."""
    if isinstance(value, Iterable):
        return list(value)
    return [value]


def normalize_ndarray(
    ndarray: Array, mean: Array, std: Array, value_clip: tuple[float, float] | None = None
) -> Array:
    """``(ndarray - mean) / std``, clipped to ``value_clip`` (low, high) when given."""
    normalized: Array = (ndarray - mean) / std
    if value_clip is not None:
        normalized = np.clip(normalized, a_min=value_clip[0], a_max=value_clip[1])
    return normalized


def unnormalize_ndarray(
    ndarray: Array, mean: Array, std: Array, value_clip: tuple[float, float] | None = None
) -> Array:
    """``ndarray * std + mean``, clipped to ``value_clip`` (low, high) when given."""
    unnormalized: Array = ndarray * std + mean
    if value_clip is not None:
        unnormalized = np.clip(unnormalized, a_min=value_clip[0], a_max=value_clip[1])
    return unnormalized


def compute_std_ndarray(var: Array, epsilon: float, mode_for_floating_point_error: str) -> Array:
    """Standard deviation from a variance, kept away from 0.

    ``mode_for_floating_point_error`` ``"add"``: ``(var + epsilon) ** 0.5``; ``"max"``:
    ``max(var ** 0.5, epsilon)`` elementwise.

    Raises:
        ValueError: Another mode (nnabla-rl raises a bare ``ValueError``; here it names it).
    """
    if mode_for_floating_point_error == "add":
        std: Array = (var + epsilon) ** 0.5
    elif mode_for_floating_point_error == "max":
        std = np.maximum(var**0.5, epsilon)
    else:
        raise ValueError(
            "mode_for_floating_point_error: expected 'add' or 'max', "
            f"got {mode_for_floating_point_error!r}"
        )
    return std


class DataHolder(Generic[T]):
    """nnabla-rl's FIFO data container interface (:class:`RingBuffer` implements it)."""

    def __len__(self) -> int:
        raise NotImplementedError

    def __getitem__(self, index: int) -> Any:
        raise NotImplementedError

    def append(self, data: T) -> None:
        """Append new data, dropping the oldest item when the holder is full."""
        raise NotImplementedError

    def append_with_removed_item_check(self, data: T) -> T | None:
        """As :meth:`append`; returns the dropped item, or None."""
        raise NotImplementedError


class RingBuffer(DataHolder[Any]):
    """nnabla-rl's ring of at most ``maxlen`` items: index 0 is the oldest kept item.

    Appending to a full ring drops the oldest item. ``ring[i]`` raises ``KeyError`` for an
    index outside ``[0, len)`` (negative ones included), and appending to a ring of
    ``maxlen=0`` raises ``ZeroDivisionError``, as nnabla-rl's. O(1) per operation.

    Example:
        >>> ring = RingBuffer(maxlen=2)
        >>> [ring.append_with_removed_item_check(x) for x in "abc"]
        [None, None, 'a']
        >>> len(ring), ring[0], ring[1]
        (2, 'b', 'c')
    """

    def __init__(self, maxlen: int) -> None:
        self._buffer: list[Any] = [None for _ in range(maxlen)]
        self._maxlen = maxlen
        self._head = 0
        self._length = 0

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: int) -> Any:
        if index < 0 or index >= self._length:
            raise KeyError
        return self._buffer[(self._head + index) % self._maxlen]

    def append(self, data: Any) -> None:
        """Add ``data`` after the newest item (dropping the oldest one of a full ring)."""
        self.append_with_removed_item_check(data)

    def append_with_removed_item_check(self, data: Any) -> Any:
        """As :meth:`append`; returns the dropped item, or None while the ring was not full."""
        if self._length < self._maxlen:
            self._length += 1
        elif self._length == self._maxlen:
            self._head = (self._head + 1) % self._maxlen
        else:
            raise IndexError
        index = (self._head + self._length - 1) % self._maxlen
        removed = self._buffer[index]
        self._buffer[index] = data
        return removed
