"""nnabla-rl's prioritized-replay helpers: ``SumTree``, ``MinTree``, ``MaxHeap``, data holders.

Checked against nnabla-rl 0.16.0's ``nnabla_rl/replay_buffers/prioritized_replay_buffer.py``
(Apache-2.0, Sony Group Corporation): the same classes, constructors, methods and index
conventions, with the list-of-nodes storage replaced by float64 arrays walked by the Numba
kernels of :mod:`._kernels` (the same comparisons in the same order, so the same values end up
in the same places). nnabla-rl's index naming:

* *relative index*: 0 is the oldest held item, ``len - 1`` the newest;
* *absolute index*: the slot in the ring (``(relative + head) % capacity``);
* *tree index*: 0 is the root, ``absolute + capacity - 1`` a leaf;
* *heap index*: 0 holds the largest priority; an item's rank is its heap index + 1.

Values are held in float64 arrays. nnabla-rl's tree nodes keep the objects passed (Python
floats or NumPy scalars) and combine them with NumPy 2's scalar rules, so a tree of float32
priorities sums (and compares) in float32; the trees record each node's type (Python float,
``np.float32`` or ``np.float64``, see :mod:`._kernels`), compute in it, and hand values back
in it (``tree[i]``, ``sum()``, ``min()``, the holders' priorities). Differences: a priority
of another NumPy type (``float16``, ``longdouble``, an integer) is held and summed as
``np.float64``, a one-element array as its number; ``heap[i]`` gives a Python float; an index
out of range raises ``IndexError`` where nnabla-rl's list would wrap a negative one.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from rlreplay.compat.nnabla_rl.replay_buffers import _kernels as K
from rlreplay.compat.nnabla_rl.utils.data import RingBuffer

__all__ = [
    "BinaryTree",
    "MaxHeap",
    "MaxHeapDataHolder",
    "MinTree",
    "PrioritizedDataHolder",
    "SumTree",
    "SumTreeDataHolder",
    "as_float",
    "kind_of",
    "typed",
]

Array = np.ndarray[Any, Any]


def as_float(value: Any) -> float:
    """One number as a Python float (a NumPy scalar or a one-element array included).

    Raises:
        ValueError: ``value`` holds several numbers (nnabla-rl's comparisons of such arrays
            raise ``ValueError`` too: "truth value of an array ... is ambiguous").
    """
    a = np.asarray(value, dtype=np.float64)
    if a.size != 1:
        raise ValueError(
            f"priority: expected one number, got an array of shape {a.shape} (the truth value "
            "of an array with more than one element is ambiguous)"
        )
    return float(a.reshape(-1)[0])


def kind_of(value: Any) -> int:
    """The node type of a priority as nnabla-rl would hold it (see :mod:`._kernels`)."""
    if isinstance(value, np.ndarray | np.generic):
        return K.KIND_F32 if value.dtype == np.float32 else K.KIND_F64
    return K.KIND_PY


def kind_of_dtype(dtype: np.dtype[Any]) -> int:
    """The node type of the elements of an array of ``dtype``."""
    return K.KIND_F32 if dtype == np.float32 else K.KIND_F64


def typed(value: float, kind: int) -> Any:
    """``value`` as the object nnabla-rl's node would hold: ``float`` or a NumPy scalar."""
    if kind == K.KIND_F32:
        return np.float32(value)
    if kind == K.KIND_F64:
        return np.float64(value)
    return float(value)


class BinaryTree:
    """nnabla-rl's ``BinaryTree``: a ring of ``capacity`` values in a binary tree.

    ``append`` writes at the tail and wraps (overwriting the oldest value); ``update`` sets
    one absolute index. Every write recomputes the ancestors (O(log capacity)).

    Args:
        capacity: Number of values the ring holds.
        init_node_value: Value of every node before any write.
    """

    _is_min = False

    def __init__(self, capacity: int, init_node_value: float) -> None:
        self._capacity = operator.index(capacity)
        self._init_node_value = init_node_value
        self._tail_index = 0
        self._length = 0
        n = max(2 * self._capacity - 1, 0)
        self._tree: Array = np.full(n, init_node_value, np.float64)
        self._kinds: Array = np.full(n, kind_of(init_node_value), np.int8)

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, tree_index: int) -> Any:
        i = operator.index(tree_index)
        return typed(self._tree[i], int(self._kinds[i]))

    def append(self, value: float) -> None:
        """Write ``value`` at the tail, then move the tail (wrapping)."""
        self.update(self._tail_index, value)
        self._tail_index = (self._tail_index + 1) % self._capacity
        if self._length < self._capacity:
            self._length += 1

    def update(self, absolute_index: int, value: float) -> None:
        """Set the value at ``absolute_index`` and recompute its ancestors."""
        a = operator.index(absolute_index)
        if not 0 <= a < self._capacity:
            raise IndexError(f"absolute index {a} is out of range [0, {self._capacity})")
        v, k = as_float(value), kind_of(value)
        if self._is_min:
            K.min_tree_update(self._tree, self._kinds, self._capacity, a, v, k)
        else:
            K.sum_tree_update(self._tree, self._kinds, self._capacity, a, v, k)

    def update_many(self, absolute_indices: Array, values: Array, kind: int | None = None) -> None:
        """:meth:`update` for each pair in order (checked indices; an rlreplay addition).

        Each value is an element of ``values`` (a NumPy scalar of its dtype), as nnabla-rl's
        buffer passes the elements of its array of masses; or, given ``kind``, a value of
        that node type (:func:`kind_of`).
        """
        a = np.ascontiguousarray(absolute_indices, np.int64)
        values = np.asarray(values)
        k = kind_of_dtype(values.dtype) if kind is None else kind
        v = np.ascontiguousarray(values, np.float64)
        K.tree_update_many(self._tree, self._kinds, self._capacity, a, v, k, self._is_min)

    def values(self, absolute_indices: Array) -> Array:
        """The leaf values at ``absolute_indices`` (float64; an rlreplay addition)."""
        return self._tree[np.asarray(absolute_indices, np.int64) + (self._capacity - 1)]

    def leaves(self, absolute_indices: Array) -> Array:
        """``np.asarray`` of the leaf objects at ``absolute_indices``, as nnabla-rl builds it
        (float32 when every one is an ``np.float32``, else float64; an rlreplay addition)."""
        nodes = np.asarray(absolute_indices, np.int64) + (self._capacity - 1)
        values = self._tree[nodes]
        if nodes.size and (self._kinds[nodes] == K.KIND_F32).all():
            return values.astype(np.float32)
        return values

    def root(self) -> Any:
        """The root node's value, of its type (the sum or the minimum)."""
        return typed(self._tree[0], int(self._kinds[0]))

    def tree_to_absolute_index(self, tree_index: int) -> int:
        return tree_index - (self._capacity - 1)

    def absolute_to_tree_index(self, absolute_index: int) -> int:
        return absolute_index + self._capacity - 1


class MinTree(BinaryTree):
    """nnabla-rl's ``MinTree``: the minimum of the ring (``inf`` for empty leaves).

    Example:
        >>> tree = MinTree(capacity=2)
        >>> tree.append(3.0); tree.append(1.0); tree.append(2.0)
        >>> tree.min()
        1.0
    """

    _is_min = True

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity, init_node_value=math.inf)

    def min(self) -> Any:
        """The smallest value, of its type (``float``, ``np.float32`` or ``np.float64``)."""
        return self.root()


class SumTree(BinaryTree):
    """nnabla-rl's ``SumTree``: the sum of the ring, and the prefix-sum descent.

    Example:
        >>> tree = SumTree(capacity=4)
        >>> for v in (1.0, 2.0, 3.0, 4.0, 5.0):
        ...     tree.append(v)
        >>> tree.sum(), tree[tree.absolute_to_tree_index(0)]
        (14.0, 5.0)
        >>> tree.get_absolute_index_from_query(6.5)
        1
    """

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity, init_node_value=0.0)

    def get_absolute_index_from_query(self, query: float) -> int:
        """The leaf of the prefix-sum descent for ``query`` (left while ``query < left``).

        Raises:
            ValueError: ``query`` below 0 or above :meth:`sum`.
        """
        q, k = as_float(query), kind_of(query)
        index = K.sum_tree_query(self._tree, self._kinds, self._capacity, q, k)
        if index < 0:
            raise ValueError(f"You must use value between [0, {self.sum()}] as query")
        return int(index)

    def query_many(self, queries: Array) -> Array | None:
        """The descent for each query (int64), or None if one is out of range (rlreplay)."""
        q = np.ascontiguousarray(queries, np.float64)
        out = np.empty(q.shape[0], np.int64)
        ok = K.sum_tree_query_many(self._tree, self._kinds, self._capacity, q, out)
        return out if ok else None

    def query_many_into(self, queries: Array, out: Array) -> None:
        """The descent for each (Python float) query into ``out`` (int64), -1 for one out of
        range (where :meth:`get_absolute_index_from_query` raises)."""
        K.sum_tree_query_many(self._tree, self._kinds, self._capacity, queries, out)

    def sum(self) -> Any:
        """The total, of its type (``float``, ``np.float32`` or ``np.float64``)."""
        return self.root()


class MaxHeap:
    """nnabla-rl's ``MaxHeap``: priorities keyed by absolute index, the largest at position 0.

    While not full, ``append`` pushes absolute index ``len`` at heap position ``len`` and
    sifts it up; once full, it gives the oldest absolute index (cycling from 0) the new value
    with :meth:`update` (sift up, then sift down from the old position). :meth:`sort_data`
    sorts by decreasing value, ties in heap order (Python's stable ``sorted``).

    Cost: append and update O(log n) (one kernel call); sort_data O(n log n).

    Example:
        >>> heap = MaxHeap(capacity=4)
        >>> for p in (0.1, 3.0, 2.0):
        ...     heap.append(p)
        >>> heap[0], heap.get_absolute_index_from_heap_index(0)
        ((1, 3.0), 1)
    """

    def __init__(self, capacity: int) -> None:
        self._capacity = operator.index(capacity)
        n = max(self._capacity, 0)
        self._vals: Array = np.full(n, -math.inf, np.float64)  # by heap index
        self._h2a: Array = np.full(n, -1, np.int64)  # heap -> absolute (-1: None)
        self._a2h: Array = np.full(n, -1, np.int64)  # absolute -> heap (-1: None)
        self._tail_index = 0
        self._oldest_index = 0
        self._length = 0

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, heap_index: int) -> tuple[int, float] | None:
        h = operator.index(heap_index)
        a = int(self._h2a[h])
        return None if a < 0 else (a, float(self._vals[h]))

    def append(self, value: float) -> None:
        v = as_float(value)
        if self._length == self._capacity:
            self.update(self._oldest_index, v)
            self._oldest_index = (self._oldest_index + 1) % self._capacity
        else:
            h = self._tail_index
            K.heap_push(self._vals, self._h2a, self._a2h, h, h, v)
            if self._tail_index < self._capacity - 1:
                self._tail_index += 1
            self._length += 1

    def append_many(self, value: float, n: int) -> None:
        """:meth:`append` of ``value`` ``n`` times, in one kernel call (an rlreplay addition)."""
        if n <= 0:
            return
        state = np.array([self._tail_index, self._oldest_index, self._length], np.int64)
        K.heap_append_many(
            self._vals, self._h2a, self._a2h, state, self._capacity, as_float(value), n
        )
        self._tail_index, self._oldest_index, self._length = state.tolist()

    def sort_data(self) -> None:
        """Sort by decreasing value; ties (and the empty positions, last) keep heap order."""
        n = self._length
        vals = self._vals[:n]
        if np.isnan(vals).any():
            # NaN compares false both ways: only Python's own sort gives nnabla-rl's order, and
            # that order depends on the whole list it sorts, the empty positions (-inf) included
            keys = vals.tolist() + [-math.inf] * (self._capacity - n)
            full = sorted(range(len(keys)), key=keys.__getitem__, reverse=True)
            order = np.array(full[:n] if max(full[:n], default=-1) < n else
                             sorted(range(n), key=keys.__getitem__, reverse=True))  # fmt: skip
        else:
            order = np.argsort(-vals, kind="stable")
        if n:
            self._vals[:n] = vals[order]
            self._h2a[:n] = self._h2a[:n][order]
            self._a2h[self._h2a[:n]] = np.arange(n)

    def get_absolute_index_from_heap_index(self, heap_index: int) -> int | None:
        return self.heap_to_absolute_index(heap_index)

    def update(self, absolute_index: int, value: float) -> None:
        h = self.absolute_to_heap_index(absolute_index)
        if h is None:
            raise TypeError(f"absolute index {absolute_index} holds no item (heap index None)")
        K.heap_update(
            self._vals, self._h2a, self._a2h, self._length, operator.index(absolute_index),
            as_float(value),
        )  # fmt: skip

    def update_many(self, absolute_indices: Array, values: Array) -> None:
        """:meth:`update` for each pair in order; indices < 0 are skipped (rlreplay)."""
        a = np.ascontiguousarray(absolute_indices, np.int64)
        v = np.ascontiguousarray(values, np.float64)
        K.heap_update_many(self._vals, self._h2a, self._a2h, self._length, a, v)

    def absolute_to_heap_index(self, absolute_index: int) -> int | None:
        h = int(self._a2h[operator.index(absolute_index)])
        return None if h < 0 else h

    def heap_to_absolute_index(self, heap_index: int) -> int | None:
        a = int(self._h2a[operator.index(heap_index)])
        return None if a < 0 else a

    def heap_indices(self, absolute_indices: Array) -> Array:
        """Heap index of each absolute index (-1: no item; an rlreplay addition)."""
        return self._a2h[np.asarray(absolute_indices, np.int64)]

    def absolute_indices(self, heap_indices: Array) -> Array:
        """Absolute index at each heap index (-1: none; an rlreplay addition)."""
        return self._h2a[np.asarray(heap_indices, np.int64)]


class PrioritizedDataHolder:
    """nnabla-rl's ``PrioritizedDataHolder``: a :class:`RingBuffer` of data plus priorities."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._data = RingBuffer(maxlen=capacity)

    def __len__(self) -> int:
        return len(self._data)

    def __getitem__(self, relative_index: int) -> Any:
        return self._data[relative_index]

    def append(self, data: Any) -> None:
        self.append_with_removed_item_check(data)

    def append_with_removed_item_check(self, data: Any) -> Any:
        raise NotImplementedError

    def update_priority(self, relative_index: int, priority: float) -> None:
        raise NotImplementedError

    def get_priority(self, relative_index: int) -> float:
        raise NotImplementedError

    def _relative_to_absolute_index(self, relative_index: int) -> int:
        return (relative_index + self._data._head) % self._capacity

    def _absolute_to_relative_index(self, absolute_index: int) -> int:
        return (absolute_index - self._data._head) % self._capacity


class SumTreeDataHolder(PrioritizedDataHolder):
    """nnabla-rl's ``SumTreeDataHolder``: data with priorities in a sum tree (and a min tree).

    A new item gets the largest priority set so far (``initial_max_priority`` at first);
    priorities are stored as given (the proportional buffer passes ``(|e| + eps) ** alpha``).
    Without ``keep_min`` there is no min tree (``min_priority`` raises ``AttributeError``).

    Example:
        >>> holder = SumTreeDataHolder(capacity=2, initial_max_priority=1.0)
        >>> holder.append("a"); holder.append("b"); holder.update_priority(1, 3.0)
        >>> holder.sum_priority(), holder[holder.get_index_from_query(2.0)]
        (4.0, 'b')
    """

    def __init__(self, capacity: int, initial_max_priority: float, keep_min: bool = True) -> None:
        super().__init__(capacity=capacity)
        self._sum_tree = SumTree(capacity=capacity)
        self._keep_min = keep_min
        if self._keep_min:
            self._min_tree = MinTree(capacity=capacity)
        self._max_priority = initial_max_priority

    def append_with_removed_item_check(self, data: Any) -> Any:
        removed = self._data.append_with_removed_item_check(data)
        self._sum_tree.append(self._max_priority)
        if self._keep_min:
            self._min_tree.append(self._max_priority)
        return removed

    def get_priority(self, relative_index: int) -> Any:
        absolute_index = self._relative_to_absolute_index(relative_index)
        return self._sum_tree[self._sum_tree.absolute_to_tree_index(absolute_index)]

    def sum_priority(self) -> Any:
        return self._sum_tree.sum()

    def min_priority(self) -> Any:
        return self._min_tree.min()

    def update_priority(self, relative_index: int, priority: float) -> None:
        absolute_index = self._relative_to_absolute_index(relative_index)
        self._sum_tree.update(absolute_index, priority)
        if self._keep_min:
            self._min_tree.update(absolute_index, priority)
        self._max_priority = max(self._max_priority, priority)

    def get_index_from_query(self, query: float) -> int:
        absolute_index = self._sum_tree.get_absolute_index_from_query(query)
        return self._absolute_to_relative_index(absolute_index)


class MaxHeapDataHolder(PrioritizedDataHolder):
    """nnabla-rl's ``MaxHeapDataHolder``: data ranked by priority in a :class:`MaxHeap`.

    A new item enters the heap with priority ``inf``. ``get_priority`` is the *rank*
    priority ``(1 / rank) ** alpha`` with ``rank = heap index + 1`` (not normalised).

    Example:
        >>> holder = MaxHeapDataHolder(capacity=3, alpha=1.0)
        >>> for item in "abc":
        ...     holder.append(item)
        >>> holder.update_priority(0, 0.5); holder.update_priority(1, 2.0)
        >>> holder.update_priority(2, 1.0); holder.sort_data()
        >>> [holder[holder.get_relative_index_from_heap_index(h)] for h in range(3)]
        ['b', 'c', 'a']
        >>> holder.get_priority(2)
        0.5
    """

    def __init__(self, capacity: int, alpha: float) -> None:
        super().__init__(capacity=capacity)
        self._max_heap = MaxHeap(capacity)
        self._alpha = alpha

    def append_with_removed_item_check(self, data: Any) -> Any:
        removed = self._data.append_with_removed_item_check(data)
        self._max_heap.append(math.inf)
        return removed

    def get_priority(self, relative_index: int) -> float:
        absolute_index = self._relative_to_absolute_index(relative_index)
        heap_index = self._max_heap.absolute_to_heap_index(absolute_index)
        if heap_index is None:
            raise TypeError(f"relative index {relative_index} holds no item (heap index None)")
        return self._compute_priority(heap_index + 1)

    def get_relative_index_from_heap_index(self, heap_index: int) -> int:
        absolute_index = self._max_heap.get_absolute_index_from_heap_index(heap_index)
        if absolute_index is None:
            raise TypeError(f"heap index {heap_index} holds no item (absolute index None)")
        return self._absolute_to_relative_index(absolute_index)

    def update_priority(self, relative_index: int, priority: float) -> None:
        absolute_index = self._relative_to_absolute_index(relative_index)
        self._max_heap.update(absolute_index, priority)

    def sort_data(self) -> None:
        self._max_heap.sort_data()

    def _compute_priority(self, rank: int) -> float:
        # not normalised: the buffer's weights divide by the largest weight
        return float((1 / rank) ** self._alpha)
