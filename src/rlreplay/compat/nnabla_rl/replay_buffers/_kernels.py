"""Numba kernels of nnabla-rl's prioritized structures: its binary trees and its max-heap.

nnabla-rl 0.16.0 (``nnabla_rl/replay_buffers/prioritized_replay_buffer.py``, Apache-2.0, Sony
Group Corporation) keeps these structures in Python lists and walks them with recursive
methods. The kernels below do the same walks over arrays, comparison for comparison, so that
the front-end's trees and heap hold the same values in the same places as nnabla-rl's after
the same calls (and so give the same draws for the same random numbers):

* **Trees** (``SumTree``, ``MinTree``): ``2 * capacity - 1`` nodes in heap layout; absolute
  index ``a`` is node ``a + capacity - 1``; node ``i < capacity - 1`` combines nodes
  ``2i + 1`` and ``2i + 2``. With a capacity that is not a power of two the leaves lie on two
  levels, so the prefix-sum descent meets them in an order other than ``0, 1, 2, ...``.
* **Max-heap** (``MaxHeap``): ``vals[h]`` is the priority at heap position ``h``, ``h2a[h]``
  its absolute index (-1: empty), ``a2h[a]`` the inverse (-1: empty). nnabla-rl's rank of an
  item is its heap position + 1.

Every kernel is a pure function of its arrays (no hidden state), tested through the classes
of :mod:`._prioritized_trees` against nnabla-rl's own list-based code
(``tests/compat/test_nnabla_rl_prioritized.py``).
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

__all__ = [
    "heap_append_many",
    "heap_push",
    "heap_update",
    "heap_update_many",
    "min_tree_update",
    "sum_tree_query",
    "sum_tree_query_many",
    "sum_tree_update",
    "tree_update_many",
]

Array = np.ndarray[Any, Any]


# ------------------------------------------------------------------------------------ trees
# nnabla-rl's nodes hold Python floats or NumPy scalars and combine them with NumPy 2's scalar
# rules (NEP 50): a Python float is "weak" (cast to the other operand's type first), two NumPy
# scalars promote. ``kinds[i]`` records the type of node ``i``: KIND_PY (a Python float),
# KIND_F32 (np.float32) or KIND_F64 (np.float64), ordered so that the type of an operation is
# the larger kind. A float32 operation is the float64 one rounded to float32 (operands that
# are Python floats rounded first): the same result, since float64 carries more than twice
# float32's precision (double rounding is innocuous for +, - and comparisons).
KIND_PY = 0
KIND_F32 = 1
KIND_F64 = 2


@numba.njit(cache=True, inline="always")
def _in_kind(value: float, kind: int) -> float:  # pragma: no cover
    """``value`` as an operand of an operation of type ``kind`` (float32: rounded)."""
    if kind == KIND_F32:
        return float(np.float32(value))
    return value


@numba.njit(cache=True)
def sum_tree_update(
    tree: Array, kinds: Array, capacity: int, absolute_index: int, value: float, kind: int
) -> None:
    """nnabla-rl's ``SumTree.update``: set a leaf, then every ancestor to ``left + right``."""
    i = absolute_index + capacity - 1
    tree[i] = value
    kinds[i] = kind
    while i > 0:
        i = (i - 1) // 2
        kl = kinds[2 * i + 1]
        kr = kinds[2 * i + 2]
        k = kl if kl > kr else kr
        tree[i] = _in_kind(_in_kind(tree[2 * i + 1], k) + _in_kind(tree[2 * i + 2], k), k)
        kinds[i] = k


@numba.njit(cache=True)
def min_tree_update(
    tree: Array, kinds: Array, capacity: int, absolute_index: int, value: float, kind: int
) -> None:
    """nnabla-rl's ``MinTree.update``: ancestors become Python's ``min(left, right)``.

    ``min(l, r)`` is ``l`` (the object, with its type) unless ``r < l``, which decides where a
    NaN goes.
    """
    i = absolute_index + capacity - 1
    tree[i] = value
    kinds[i] = kind
    while i > 0:
        i = (i - 1) // 2
        kl = kinds[2 * i + 1]
        kr = kinds[2 * i + 2]
        k = kl if kl > kr else kr
        left = tree[2 * i + 1]
        right = tree[2 * i + 2]
        if _in_kind(right, k) < _in_kind(left, k):
            tree[i] = right
            kinds[i] = kr
        else:
            tree[i] = left
            kinds[i] = kl


@numba.njit(cache=True)
def tree_update_many(
    tree: Array, kinds: Array, capacity: int, absolute: Array, values: Array, kind: int,
    is_min: bool,
) -> None:  # fmt: skip
    """:func:`sum_tree_update` (or :func:`min_tree_update`) for each pair, in order."""
    for j in range(absolute.shape[0]):
        if is_min:
            min_tree_update(tree, kinds, capacity, absolute[j], values[j], kind)
        else:
            sum_tree_update(tree, kinds, capacity, absolute[j], values[j], kind)


@numba.njit(cache=True)
def sum_tree_query(tree: Array, kinds: Array, capacity: int, query: float, qkind: int) -> int:
    """nnabla-rl's ``SumTree.get_absolute_index_from_query`` (-1 for a query out of range).

    From the root: go left while ``query < left``, else go right with ``query - left``. So a
    query of 0 in an all-zero tree always goes right. ``query`` has the type ``qkind`` (a
    Python float from ``drng.uniform``); ``query - left`` takes the type of the operation.
    """
    k = qkind if qkind > kinds[0] else kinds[0]
    if query < 0 or _in_kind(query, k) > _in_kind(tree[0], k):
        return -1
    i = 0
    while i < capacity - 1:  # node i has children while i < capacity - 1
        left = tree[2 * i + 1]
        kl = kinds[2 * i + 1]
        k = qkind if qkind > kl else kl
        if _in_kind(query, k) < _in_kind(left, k):
            i = 2 * i + 1
        else:
            query = _in_kind(_in_kind(query, k) - _in_kind(left, k), k)
            qkind = k
            i = 2 * i + 2
    return i - (capacity - 1)


@numba.njit(cache=True)
def sum_tree_query_many(
    tree: Array, kinds: Array, capacity: int, queries: Array, out: Array
) -> bool:
    """:func:`sum_tree_query` for each (Python float) query into ``out``; False if one was out
    of range."""
    ok = True
    for j in range(queries.shape[0]):
        out[j] = sum_tree_query(tree, kinds, capacity, queries[j], KIND_PY)
        if out[j] < 0:
            ok = False
    return ok


# ------------------------------------------------------------------------------------- heap
@numba.njit(cache=True, inline="always")
def _swap(vals: Array, h2a: Array, a2h: Array, h1: int, h2: int) -> None:  # pragma: no cover
    v = vals[h1]
    vals[h1] = vals[h2]
    vals[h2] = v
    a1 = h2a[h1]
    a2 = h2a[h2]
    h2a[h1] = a2
    h2a[h2] = a1
    a2h[a2] = h1
    a2h[a1] = h2


@numba.njit(cache=True)
def _heapup(vals: Array, h2a: Array, a2h: Array, h: int) -> None:
    # nnabla-rl's _heapup: swap with the parent while ``parent < item`` (a NaN never moves)
    while h > 0:
        parent = (h - 1) // 2
        if vals[parent] < vals[h]:
            _swap(vals, h2a, a2h, h, parent)
            h = parent
        else:
            return


@numba.njit(cache=True)
def _heapdown(vals: Array, h2a: Array, a2h: Array, length: int, h: int) -> None:
    # nnabla-rl's _heapdown: the left child if ``left > item``, then the right child if
    # ``right > (that one)``; children at or past ``length`` are empty
    while h < length:
        left = 2 * h + 1
        right = left + 1
        largest = h
        if left < length and vals[left] > vals[h]:
            largest = left
        if right < length and vals[right] > vals[largest]:
            largest = right
        if largest == h:
            return
        _swap(vals, h2a, a2h, h, largest)
        h = largest


@numba.njit(cache=True)
def heap_push(vals: Array, h2a: Array, a2h: Array, h: int, absolute: int, value: float) -> None:
    """nnabla-rl's ``MaxHeap._heappush``: the item at heap position ``h``, then up."""
    vals[h] = value
    h2a[h] = absolute
    a2h[absolute] = h
    _heapup(vals, h2a, a2h, h)


@numba.njit(cache=True)
def heap_update(
    vals: Array, h2a: Array, a2h: Array, length: int, absolute: int, value: float
) -> None:
    """nnabla-rl's ``MaxHeap.update``: new value, ``_heapup`` then ``_heapdown`` *at the old
    position* (nnabla-rl's order; the same as following the item while the heap is ordered)."""
    h = a2h[absolute]
    vals[h] = value
    _heapup(vals, h2a, a2h, h)
    _heapdown(vals, h2a, a2h, length, h)


@numba.njit(cache=True)
def heap_update_many(
    vals: Array, h2a: Array, a2h: Array, length: int, absolute: Array, values: Array
) -> None:
    """:func:`heap_update` for each pair, in order (skipping absolute indices < 0)."""
    for j in range(absolute.shape[0]):
        if absolute[j] >= 0:
            heap_update(vals, h2a, a2h, length, absolute[j], values[j])


@numba.njit(cache=True)
def heap_append_many(
    vals: Array, h2a: Array, a2h: Array, state: Array, capacity: int, value: float, n: int
) -> None:
    """nnabla-rl's ``MaxHeap.append(value)`` ``n`` times; ``state`` is ``(tail, oldest,
    length)``, updated in place: push at the tail while not full, else update the oldest."""
    tail, oldest, length = state[0], state[1], state[2]
    for _ in range(n):
        if length == capacity:
            heap_update(vals, h2a, a2h, length, oldest, value)
            oldest = (oldest + 1) % capacity
        else:
            heap_push(vals, h2a, a2h, tail, tail, value)
            if tail < capacity - 1:
                tail += 1
            length += 1
    state[0], state[1], state[2] = tail, oldest, length
