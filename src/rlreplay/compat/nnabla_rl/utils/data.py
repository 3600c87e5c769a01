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
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "RingBuffer",
    "add_axis_if_single_dim",
    "add_batch_dimension",
    "list_of_dict_to_dict_of_list",
    "marshal_dict_experiences",
    "marshal_experiences",
    "unzip",
]

Array = np.ndarray[Any, Any]
_logger = logging.getLogger("nnabla_rl")


def unzip(zipped_data: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
    """``list(zip(*zipped_data))``: the ``k``-th elements of every item, for each ``k``."""
    return list(zip(*zipped_data, strict=False))


def add_axis_if_single_dim(data: Array) -> Array:
    """``data`` with a trailing axis if it is 1-D (``(B,)`` -> ``(B, 1)``), else unchanged."""
    if data.ndim == 1:
        return np.expand_dims(data, axis=-1)
    return data


def list_of_dict_to_dict_of_list(list_of_dict: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """``{key: [d[key] for d in list_of_dict]}`` for the keys of the first dict.

    Raises:
        KeyError: A later dict lacks a key of the first one (as in nnabla-rl).
    """
    return {key: [d[key] for d in list_of_dict] for key in list_of_dict[0]}


def marshal_dict_experiences(dict_experiences: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A dict of batch arrays from a list of dicts (nested dicts marshalled recursively).

    A key whose values do not stack into one array (ragged shapes: ``np.asarray`` raises
    ``ValueError``) is left out, with a warning on the ``nnabla_rl`` logger, as nnabla-rl does.
    """
    dict_of_list = list_of_dict_to_dict_of_list(dict_experiences)
    marshaled: dict[str, Any] = {}
    for key, data in dict_of_list.items():
        try:
            if isinstance(data[0], dict):
                marshaled[key] = marshal_dict_experiences(data)
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
    """``data`` with a leading batch axis of 1 (each element of a tuple for tuple data)."""
    if isinstance(data, tuple):
        return tuple(np.expand_dims(d, axis=0) for d in data)
    return np.expand_dims(data, axis=0)


class RingBuffer:
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
