"""nnabla-rl's prioritized-replay helpers: ``SumTree``, ``MinTree``, ``MaxHeap``, data holders.

nnabla-rl's ``prioritized_replay_buffer`` module exports, beside its buffers, the structures they
are built on. Their names and methods are reproduced here (re-exported from
:mod:`rlreplay.compat.nnabla_rl.replay_buffers.prioritized_replay_buffer`):

* :class:`SumTree` / :class:`MinTree`: a ring of ``capacity`` values (``append`` writes at the
  tail and wraps, overwriting the oldest) with their sum / minimum in O(1) and updates in
  O(log n), in nnabla-rl's binary-tree layout (so any float is stored, and the descent is
  nnabla-rl's): leaf ``k`` is *absolute index* ``k``, the ring slot. (The buffers themselves
  keep their priorities in the core's trees; these helpers are for code that uses nnabla-rl's
  classes directly.)
* :class:`MaxHeap`: a binary max-heap of priorities, each tied to an absolute index (ring slot);
  the heap position of an item is its approximate rank (position 0 holds the largest priority),
  exact after :meth:`MaxHeap.sort_data`.
* :class:`SumTreeDataHolder` / :class:`MaxHeapDataHolder`: a ring of data items with one
  priority each, addressed by *relative index* (0 = oldest held item, as a replay buffer's
  positions). The sum-tree holder stores ``priority ** alpha`` and samples by prefix sum; the
  heap holder ranks the raw priorities.

The absolute index of relative index ``i`` is ``(head + i) % capacity``, ``head`` being the
slot of the oldest item.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

__all__ = ["MaxHeap", "MaxHeapDataHolder", "MinTree", "SumTree", "SumTreeDataHolder"]


def _capacity(value: Any) -> int:
    capacity = operator.index(value)
    if capacity <= 0:
        raise ValueError("buffer size must be greater than 0")
    return capacity


class _RingTree:
    """A ring of values in nnabla-rl's binary-tree layout, written at ``tail``.

    nnabla-rl's trees are a heap array of ``2 * capacity - 1`` nodes: absolute index ``k`` is
    node ``k + capacity - 1`` and node ``i`` combines nodes ``2i + 1`` and ``2i + 2`` with the
    tree's operation (``+`` or ``min`` on Python floats). The same layout and arithmetic are
    kept here (a float64 array, whose additions are Python's float additions), so sums, minima
    and the sum tree's descent are nnabla-rl's, whatever the values: negative, NaN or infinite
    values are stored as nnabla-rl stores them. (For a capacity that is not a power of two the
    leaves lie on two levels, so the descent meets them in an order other than ``0, 1, ...``,
    as nnabla-rl's does.)
    """

    _init_value = 0.0

    def __init__(self, capacity: int) -> None:
        self._capacity = _capacity(capacity)
        self._tree = np.full(2 * self._capacity - 1, self._init_value, np.float64)
        self._tail_index = 0
        self._length = 0

    @staticmethod
    def _operation(a: float, b: float) -> float:
        raise NotImplementedError

    @property
    def capacity(self) -> int:
        """Number of values the ring holds."""
        return self._capacity

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, absolute_index: int) -> float:
        return float(self._tree[self._check(absolute_index) + self._capacity - 1])

    def _check(self, absolute_index: int) -> int:
        k = operator.index(absolute_index)
        if not 0 <= k < self._capacity:
            raise IndexError(f"absolute index {k} is out of range [0, {self._capacity})")
        return k

    def append(self, value: float) -> None:
        """Write ``value`` at the tail (the oldest value once the ring is full)."""
        self.update(self._tail_index, value)
        self._tail_index = (self._tail_index + 1) % self._capacity
        self._length = min(self._length + 1, self._capacity)

    def update(self, absolute_index: int, value: float) -> None:
        """Set the value at ``absolute_index``; its ancestors are recomputed (O(log n))."""
        tree = self._tree
        i = self._check(absolute_index) + self._capacity - 1
        tree[i] = float(value)
        while i > 0:
            i = (i - 1) // 2
            tree[i] = self._operation(float(tree[2 * i + 1]), float(tree[2 * i + 2]))


class SumTree(_RingTree):
    """nnabla-rl's ``SumTree``: a ring of values with their sum (see :class:`_RingTree`).

    Empty slots hold 0. Any float is stored, as nnabla-rl's Python list stores it: a negative
    or NaN value enters the sums as it does there.

    Example:
        >>> tree = SumTree(capacity=4)
        >>> for v in (1.0, 2.0, 3.0, 4.0, 5.0):
        ...     tree.append(v)
        >>> tree.sum(), tree[0], tree.get_absolute_index_from_query(6.5)
        (14.0, 5.0, 1)
    """

    _init_value = 0.0

    @staticmethod
    def _operation(a: float, b: float) -> float:
        return a + b

    def sum(self) -> float:
        """Sum of every value (the root node)."""
        return float(self._tree[0])

    def get_absolute_index_from_query(self, query: float) -> int:
        """The leaf reached by nnabla-rl's prefix-sum descent for ``query``.

        From the root, the descent goes to the left child while ``query <= left`` and
        otherwise to the right child with ``query - left``, down to a leaf. So a query of 0
        (an all-zero tree included) reaches the left-most leaf of the deepest level, and a
        NaN query the right-most leaf.

        Raises:
            ValueError: ``query`` below 0 or above ``sum()``.
        """
        q = float(query)
        if q < 0 or self.sum() < q:
            raise ValueError(f"query {q} is out of range [0, {self.sum()}]")
        tree, i, n = self._tree, 0, self._tree.shape[0]
        while 2 * i + 1 < n:
            left = float(tree[2 * i + 1])
            if q <= left:
                i = 2 * i + 1
            else:
                q -= left
                i = 2 * i + 2
        return i - (self._capacity - 1)


class MinTree(_RingTree):
    """nnabla-rl's ``MinTree``: a ring of values with their minimum (``inf`` when empty).

    The minimum is taken pairwise as Python's ``min(a, b)`` takes it (``a`` unless ``b < a``),
    so a NaN is stored and propagates as it does in nnabla-rl's tree.

    Example:
        >>> tree = MinTree(capacity=2)
        >>> tree.append(3.0); tree.append(1.0); tree.append(2.0)
        >>> tree.min()
        1.0
    """

    _init_value = math.inf

    @staticmethod
    def _operation(a: float, b: float) -> float:
        return min(a, b)

    def min(self) -> float:
        """Smallest value (``inf`` before any append)."""
        return float(self._tree[0])


class MaxHeap:
    """nnabla-rl's ``MaxHeap``: a binary max-heap of priorities keyed by absolute index.

    Items are appended at absolute index ``tail`` (a ring of ``capacity``); once full, an append
    replaces the priority of the oldest item, which keeps its absolute index. Heap position 0
    holds the largest priority; a parent's priority is never below its children's. Position
    ``h`` is the item's approximate rank ``h + 1``, exact right after :meth:`sort_data` (a
    descending array is a valid heap).

    Cost: ``append`` and ``update`` are O(log n); ``sort_data`` is O(n log n).

    Example:
        >>> heap = MaxHeap(capacity=4)
        >>> for p in (0.1, 3.0, 2.0):
        ...     heap.append(p)
        >>> heap.get_absolute_index_from_heap_index(0), heap.max()
        (1, 3.0)
    """

    def __init__(self, capacity: int) -> None:
        self._capacity = _capacity(capacity)
        self._priorities = np.zeros(self._capacity, np.float64)  # by heap position
        self._heap_to_absolute = np.zeros(self._capacity, np.int64)
        self._absolute_to_heap = np.full(self._capacity, -1, np.int64)
        self._length = 0
        self._tail_index = 0

    @property
    def capacity(self) -> int:
        """Number of items the heap holds."""
        return self._capacity

    def __len__(self) -> int:
        return self._length

    def max(self) -> float:
        """The largest priority (``-inf`` when empty)."""
        return float(self._priorities[0]) if self._length else -math.inf

    def append(self, priority: float) -> None:
        """Add an item with ``priority`` at the tail (replacing the oldest once full)."""
        absolute_index = self._tail_index
        if self._length == self._capacity:
            self.update(absolute_index, priority)
        else:
            h = self._length
            self._priorities[h] = float(priority)
            self._heap_to_absolute[h] = absolute_index
            self._absolute_to_heap[absolute_index] = h
            self._length += 1
            self._sift_up(h)
        self._tail_index = (self._tail_index + 1) % self._capacity

    def update(self, absolute_index: int, priority: float) -> None:
        """Set the priority of the item at ``absolute_index`` and restore the heap order."""
        h = self.get_heap_index_from_absolute_index(absolute_index)
        self._priorities[h] = float(priority)
        self._sift_down(self._sift_up(h))

    def get_priority(self, absolute_index: int) -> float:
        """Priority of the item at ``absolute_index``."""
        return float(self._priorities[self.get_heap_index_from_absolute_index(absolute_index)])

    def get_heap_index_from_absolute_index(self, absolute_index: int) -> int:
        k = operator.index(absolute_index)
        if not 0 <= k < self._capacity or self._absolute_to_heap[k] < 0:
            raise IndexError(f"absolute index {k}: no item there")
        return int(self._absolute_to_heap[k])

    def get_absolute_index_from_heap_index(self, heap_index: int) -> int:
        h = operator.index(heap_index)
        if not 0 <= h < self._length:
            raise IndexError(f"heap index {h} is out of range [0, {self._length})")
        return int(self._heap_to_absolute[h])

    def sort_data(self) -> None:
        """Sort the heap by descending priority (stable: ties keep their heap order)."""
        n = self._length
        order = np.argsort(-self._priorities[:n], kind="stable")
        self._priorities[:n] = self._priorities[:n][order]
        self._heap_to_absolute[:n] = self._heap_to_absolute[:n][order]
        self._absolute_to_heap[self._heap_to_absolute[:n]] = np.arange(n)

    # The sifts move one item along a path, swapping while the order is violated.
    def _swap(self, a: int, b: int) -> None:
        p, ab = self._priorities, self._heap_to_absolute
        p[a], p[b] = p[b], p[a]
        ab[a], ab[b] = ab[b], ab[a]
        self._absolute_to_heap[ab[a]] = a
        self._absolute_to_heap[ab[b]] = b

    def _sift_up(self, h: int) -> int:
        p = self._priorities
        while h > 0 and p[(h - 1) // 2] < p[h]:
            self._swap(h, (h - 1) // 2)
            h = (h - 1) // 2
        return h

    def _sift_down(self, h: int) -> int:
        p, n = self._priorities, self._length
        while True:
            largest = h
            for child in (2 * h + 1, 2 * h + 2):
                if child < n and p[child] > p[largest]:
                    largest = child
            if largest == h:
                return h
            self._swap(h, largest)
            h = largest


class _RingData:
    """A ring of ``capacity`` data items addressed by relative index (0 = oldest)."""

    def __init__(self, capacity: int) -> None:
        self._capacity = _capacity(capacity)
        self._items: list[Any] = [None] * self._capacity
        self._head = 0  # absolute index of relative index 0
        self._length = 0

    @property
    def capacity(self) -> int:
        """Number of items the holder keeps."""
        return self._capacity

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, relative_index: int) -> Any:
        return self._items[self._relative_to_absolute_index(relative_index)]

    def _relative_to_absolute_index(self, relative_index: int) -> int:
        i = operator.index(relative_index)
        if not 0 <= i < self._length:
            raise KeyError(f"index {i} is out of range [0, {self._length})")
        return (self._head + i) % self._capacity

    def _absolute_to_relative_index(self, absolute_index: int) -> int:
        return (absolute_index - self._head) % self._capacity

    def _push(self, data: Any) -> int:
        """Store ``data`` at the tail; returns its absolute index."""
        absolute_index = (self._head + self._length) % self._capacity
        self._items[absolute_index] = data
        if self._length == self._capacity:
            self._head = (self._head + 1) % self._capacity
        else:
            self._length += 1
        return absolute_index


class SumTreeDataHolder(_RingData):
    """nnabla-rl's ``SumTreeDataHolder``: data with priorities in a sum tree and a min tree.

    A new item gets ``initial_max_priority`` until a larger priority is set (the largest
    priority set so far). The trees hold ``priority ** alpha``: :meth:`get_priority`,
    :meth:`sum_priority` and :meth:`min_priority` are in those units, so ``P(i) =
    get_priority(i) / sum_priority()``.

    Args:
        capacity: Items kept; an append to a full holder drops the oldest.
        initial_max_priority: Priority of items appended before any update.
        alpha: Exponent applied to every priority.

    Example:
        >>> holder = SumTreeDataHolder(capacity=2, initial_max_priority=1.0)
        >>> holder.append("a"); holder.append_with_priority("b", 3.0)
        >>> holder.sum_priority(), holder[holder.get_index_from_query(2.0)]
        (4.0, 'b')
    """

    def __init__(self, capacity: int, initial_max_priority: float, alpha: float = 1.0) -> None:
        super().__init__(capacity)
        self._sum_tree = SumTree(self._capacity)
        self._min_tree = MinTree(self._capacity)
        self._max_priority = float(initial_max_priority)
        self._alpha = float(alpha)

    def append(self, data: Any) -> None:
        """Append with the largest priority so far."""
        self.append_with_priority(data, self._max_priority)

    def append_with_priority(self, data: Any, priority: float) -> None:
        p = float(priority) ** self._alpha
        absolute_index = (self._head + self._length) % self._capacity
        self._sum_tree.update(absolute_index, p)
        self._min_tree.update(absolute_index, p)
        self._push(data)
        self._max_priority = max(self._max_priority, float(priority))

    def sum_priority(self) -> float:
        return self._sum_tree.sum()

    def min_priority(self) -> float:
        return self._min_tree.min()

    def max_priority(self) -> float:
        """The largest priority set so far (raw, before ``** alpha``)."""
        return self._max_priority

    def get_priority(self, relative_index: int) -> float:
        return self._sum_tree[self._relative_to_absolute_index(relative_index)]

    def update_priority(self, relative_index: int, priority: float) -> None:
        absolute_index = self._relative_to_absolute_index(relative_index)
        p = float(priority) ** self._alpha
        self._sum_tree.update(absolute_index, p)
        self._min_tree.update(absolute_index, p)
        self._max_priority = max(self._max_priority, float(priority))

    def get_index_from_query(self, query: float) -> int:
        """Relative index of the item under the prefix sum ``query`` (in ``[0, sum]``)."""
        return self._absolute_to_relative_index(self._sum_tree.get_absolute_index_from_query(query))


class MaxHeapDataHolder(_RingData):
    """nnabla-rl's ``MaxHeapDataHolder``: data ranked by priority in a :class:`MaxHeap`.

    A new item gets the largest priority held (1.0 in an empty holder), so it ranks first.
    :meth:`get_rank` is the item's heap position + 1; :meth:`get_index_from_heap_index` maps a
    heap position (``rank - 1``) back to a relative index.

    Args:
        capacity: Items kept; an append to a full holder drops the oldest.
        alpha: Exponent of the rank law ``P(rank) ∝ rank ** -alpha`` (kept for the buffer).

    Example:
        >>> holder = MaxHeapDataHolder(capacity=3, alpha=0.7)
        >>> for item, p in (("a", 0.5), ("b", 2.0), ("c", 1.0)):
        ...     holder.append_with_priority(item, p)
        >>> holder.sort_data()
        >>> [holder[holder.get_index_from_heap_index(h)] for h in range(3)]
        ['b', 'c', 'a']
    """

    def __init__(self, capacity: int, alpha: float) -> None:
        super().__init__(capacity)
        self._max_heap = MaxHeap(self._capacity)
        self._alpha = float(alpha)

    def append(self, data: Any) -> None:
        """Append with the largest priority held (1.0 when empty)."""
        top = self._max_heap.max()
        self.append_with_priority(data, top if self._length else 1.0)

    def append_with_priority(self, data: Any, priority: float) -> None:
        self._max_heap.append(float(priority))
        self._push(data)

    def get_priority(self, relative_index: int) -> float:
        return self._max_heap.get_priority(self._relative_to_absolute_index(relative_index))

    def update_priority(self, relative_index: int, priority: float) -> None:
        self._max_heap.update(self._relative_to_absolute_index(relative_index), float(priority))

    def get_rank(self, relative_index: int) -> int:
        """1 + the item's heap position (its exact rank right after :meth:`sort_data`)."""
        absolute_index = self._relative_to_absolute_index(relative_index)
        return self._max_heap.get_heap_index_from_absolute_index(absolute_index) + 1

    def get_index_from_heap_index(self, heap_index: int) -> int:
        absolute_index = self._max_heap.get_absolute_index_from_heap_index(heap_index)
        return self._absolute_to_relative_index(absolute_index)

    def sort_data(self) -> None:
        self._max_heap.sort_data()
