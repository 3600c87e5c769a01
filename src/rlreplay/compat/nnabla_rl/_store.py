"""The object store: experiences kept as the Python objects appended, as nnabla-rl keeps them.

A buffer whose experiences do not fit the columnar layout (see
:mod:`rlreplay.compat.nnabla_rl._codec`) keeps them here: a list with a moving start, so
appending, dropping the oldest and reading by position are O(1) (amortised: the dropped prefix
is deleted once it is larger than what is kept).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["ObjectStore"]


class ObjectStore:
    """The newest ``capacity`` objects (all of them when ``capacity`` is None), oldest first.

    Position ``i`` is the ``i``-th oldest kept object. Objects are kept by reference, never
    copied (nnabla-rl's ring and deque do the same).
    """

    def __init__(self, capacity: int | None, items: Iterable[Any] = ()) -> None:
        self._capacity = capacity
        self._items: list[Any] = []
        self._start = 0
        for item in items:
            self.append(item)

    def __len__(self) -> int:
        return len(self._items) - self._start

    def append(self, item: Any) -> None:
        self._items.append(item)
        if self._capacity is not None and len(self) > self._capacity:
            self.drop_oldest(len(self) - self._capacity)

    def drop_oldest(self, n: int) -> None:
        """Forget the ``n`` oldest objects."""
        self._start += min(n, len(self))
        if self._start > 1024 and 2 * self._start > len(self._items):
            del self._items[: self._start]
            self._start = 0

    def get(self, positions: Iterable[int]) -> list[Any]:
        """The objects at positions (each in ``[0, len)``; checked by the caller)."""
        items, start = self._items, self._start
        return [items[start + p] for p in positions]
