"""The tuples the columnar store hands out, equal to what was appended as nnabla-rl's are.

nnabla-rl keeps the experience objects themselves and hands them back, so ``experience ==
buffer[i]`` compares a tuple with *itself*: Python's tuple ``==`` tries ``x is y`` on each
pair of elements before ``x == y``, and every pair is identical, so the comparison is True
even for elements whose ``==`` has no truth value (NumPy arrays). The columnar store copies
values on append (so an environment that rewrites its observation array in place cannot
corrupt stored data; ``docs/migrating/nnabla_rl.md``, deliberate difference 1) and rebuilds
each experience from its columns, so that shortcut never applies and ``==`` on a rebuilt tuple
of arrays would raise NumPy's "truth value of an array ... is ambiguous".

:class:`StoredTuple` gives the rebuilt tuples the comparison a stored object would have: equal
element by element, arrays by value (:func:`stored_equal`). Everything else is ``tuple``'s: it
is a ``tuple`` (``isinstance``, unpacking, indexing, slicing, ``len``, ``hash``, ordering,
``repr``), it pickles as itself, and ``utils.data.marshal_experiences`` stacks it as any tuple.
Python gives a right operand whose type subclasses the left one's priority for ``==``, so
``plain_tuple == stored`` uses this comparison as well.

Identity (``buffer[i] is buffer[i]``) is not kept: a tuple subclass cannot be weakly
referenced (CPython has no weak-reference slot for variable-size objects), so handing out the
same object twice would need a strong reference per kept experience, a second copy of the
ring's Python objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["StoredTuple", "stored_equal"]


def _is_nan(value: Any) -> bool:
    return isinstance(value, (float, complex, np.inexact)) and bool(value != value)


def _arrays_equal(a: Any, b: Any) -> bool:
    """Same shape and values (NaN equal to NaN: a copy of a NaN is the same value)."""
    try:
        x, y = np.asarray(a), np.asarray(b)
    except ValueError:  # a ragged sequence: not an array, so not equal to one
        return False
    if x.shape != y.shape:
        return False
    try:
        return bool(np.array_equal(x, y, equal_nan=True))
    except TypeError:  # dtypes without NaN (strings, objects): plain element equality
        return bool(np.array_equal(x, y))


def stored_equal(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` are equal as an object and its stored copy are.

    ``a is b`` first (Python's own shortcut), then: arrays (either side) by shape and values,
    tuples with tuples and lists with lists element by element, dicts key by key (each
    recursively), anything else with ``==`` (NaN equal to NaN).
    """
    if a is b:
        return True
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return _arrays_equal(a, b)
    if (isinstance(a, tuple) and isinstance(b, tuple)) or (
        isinstance(a, list) and isinstance(b, list)
    ):
        return len(a) == len(b) and all(map(stored_equal, a, b))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return len(a) == len(b) and all(k in b and stored_equal(v, b[k]) for k, v in a.items())
    result = a == b
    if isinstance(result, np.ndarray):  # e.g. a NumPy scalar against a list
        return _arrays_equal(a, b)
    return bool(result) or (_is_nan(a) and _is_nan(b))


class StoredTuple(tuple):  # type: ignore[type-arg]
    """A ``tuple`` rebuilt from the columnar store, ``==`` to the tuple that was appended.

    ``==`` and ``!=`` compare element by element with :func:`stored_equal` (so tuples of
    arrays compare by value instead of raising); comparing with anything that is not a tuple
    is left to the other operand, as ``tuple`` does. ``hash`` is ``tuple``'s (an element
    that is an array is unhashable, as in a plain tuple).

    Example:
        >>> import numpy as np
        >>> appended = (np.zeros(2), 1, {"t": 0})
        >>> rebuilt = StoredTuple((np.zeros(2), 1, appended[2]))
        >>> appended == rebuilt, rebuilt == appended, rebuilt != appended
        (True, True, False)
        >>> isinstance(rebuilt, tuple), rebuilt == [np.zeros(2), 1, {"t": 0}]
        (True, False)
    """

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, tuple):
            return NotImplemented
        return len(self) == len(other) and all(map(stored_equal, self, other))

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = tuple.__hash__
