"""ALF's ``SumSegmentTree.find_sum_bound``: the descent over its node array, in its ``dtype``.

Seed 001 describes the tree: ``values[1]`` is the root, ``values[capacity: 2*capacity]`` are
the leaves, the children of ``values[i]`` are ``values[2*i]`` and ``values[2*i+1]``, and
``find_sum_bound`` gives "the minimum idx such that ``thresholds[i] < values[0] + ... +
values[idx]``", "``values[result[i]]`` will never be 0", and "if ``thresholds[i] == root``,
``result[i]`` will be the index of the non-zero value with the largest index". On that
layout the search is a descent from the root: at node ``i``, go left while ``threshold <
values[2*i]``, else go right with ``values[2*i]`` subtracted from the threshold. It runs in
the tree's ``dtype`` (float32 by default), so at a rounding boundary (a threshold within an
ulp of a prefix sum, where ``threshold - left`` rounds) it lands where ALF's float32 descent
lands, not where exact prefix sums would. The two documented guarantees are then applied
(:func:`find_sum_bound`): a threshold equal to the root gives the last non-zero leaf, and a
descent that ends on a zero leaf (rounding sent it into a subtree of zeros) moves back to the
non-zero leaf just before it, which is where a descent that never enters a zero subtree ends.

Cost: O(log capacity) per threshold (a Numba kernel for float32 and float64 nodes, torch
level by level for float16 and bfloat16); the guarantees read the leaves, O(capacity), only
for the thresholds they apply to (a threshold equal to the root, or a rounding case).
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
import torch

__all__ = ["descend", "find_sum_bound", "leaf_nodes", "node_leaves"]

Array = np.ndarray[Any, Any]


def leaf_nodes(idx: Array, capacity: int) -> Array:
    """The nodes of leaves ``idx`` in ALF's layout: in-order, so that prefix sums run by index.

    Seed: "``values[1]`` is the root. ``values[capacity: 2*capacity]`` are the leaves", and
    ``find_sum_bound`` gives "the minimum idx such that thresholds[i] < values[0] + ... +
    values[idx]", so a descent from the root meets the leaves in index order. With ``capacity``
    not a power of two the leaves lie on two levels; in-order, the deeper ones (nodes
    ``leftmost .. 2 * capacity - 1``, ``leftmost`` the smallest power of two ``>= capacity``)
    come first, then nodes ``capacity .. leftmost - 1``.
    """
    leftmost = 1 << max(0, int(capacity - 1).bit_length())
    node = idx + leftmost
    out: Array = np.where(node >= 2 * capacity, node - capacity, node)
    return out


def node_leaves(node: Array, capacity: int) -> Array:
    """The leaf index of each leaf node (the inverse of :func:`leaf_nodes`)."""
    leftmost = 1 << max(0, int(capacity - 1).bit_length())
    out: Array = np.where(node < leftmost, node + capacity, node) - leftmost
    return out


@numba.njit(cache=True)
def _descend_kernel(values: Array, capacity: int, thresholds: Array, out: Array) -> None:
    # values and thresholds share the tree's dtype: every comparison and subtraction is
    # rounded as torch rounds it in that dtype. Level by level over the whole batch, so the
    # cache misses of different thresholds overlap.
    th = thresholds.copy()
    out[:] = 1
    moving = True
    while moving:
        moving = False
        for i in range(th.shape[0]):
            node = out[i]
            if node < capacity:
                left = 2 * node
                lv = values[left]
                if th[i] >= lv:  # NaN: False, so a NaN threshold goes left to the first leaf
                    th[i] = th[i] - lv
                    out[i] = left + 1
                else:
                    out[i] = left
                moving = True


def descend(values: torch.Tensor, capacity: int, thresholds: Array) -> Array:
    """The leaf node (``capacity .. 2*capacity-1``) each threshold's descent ends on.

    Args:
        values: ALF's node array, ``2 * capacity`` nodes of the tree's dtype (CPU).
        capacity: Number of leaves.
        thresholds: Thresholds (any float dtype), rounded to the tree's dtype first.

    Returns:
        int64 node numbers, flat.
    """
    if values.dtype in (torch.float32, torch.float64):
        flat = values.numpy()
        # NumPy rounds float64 to float32 to nearest, ties to even, as torch does.
        th_np = np.asarray(thresholds, np.float64).reshape(-1).astype(flat.dtype)
        out = np.empty(th_np.shape[0], np.int64)
        _descend_kernel(flat, capacity, th_np, out)
        return out
    th = torch.as_tensor(np.asarray(thresholds, np.float64)).reshape(-1).to(values.dtype)
    node = torch.ones(th.shape, dtype=torch.int64)  # float16, bfloat16: torch's arithmetic
    while True:
        inner = node < capacity
        if not bool(inner.any()):
            break
        left = 2 * node[inner]
        lv = values[left]
        right = th[inner] >= lv
        th[inner] = torch.where(right, th[inner] - lv, th[inner])
        node[inner] = left + right.to(torch.int64)
    out_nodes: Array = node.numpy()
    return out_nodes


def find_sum_bound(values: torch.Tensor, capacity: int, thresholds: Array) -> Array:
    """ALF's ``find_sum_bound`` on its node array: the descent and its documented guarantees.

    Args:
        values: ALF's node array (see :func:`descend`).
        capacity: Number of leaves.
        thresholds: Thresholds (checked ``<= summary()`` by the caller).

    Returns:
        int64 leaf indices, flat: the descent's leaf; for a threshold equal to the root, the
        non-zero leaf with the largest index; for a descent ending on a zero leaf, the
        non-zero leaf with the largest index below it. Where there is no such non-zero leaf
        (an all-zero tree, a negative or NaN threshold before the first non-zero leaf) the
        descent's leaf stays.
    """
    th = np.asarray(thresholds, np.float64).reshape(-1)
    nodes = descend(values, capacity, th)
    out = node_leaves(nodes, capacity)
    if values.dtype in (torch.float32, torch.float64):
        flat = values.numpy()
        root = float(flat[1])
        landed = flat[nodes]
    else:  # float16, bfloat16
        root = float(values[1])
        landed = values[torch.from_numpy(nodes)].double().numpy()
    at_root = th == root
    fix = at_root | (landed == 0)
    if fix.any():
        leaf_values = np.empty(capacity, np.float64)
        leaf_values[node_leaves(np.arange(capacity, 2 * capacity), capacity)] = (
            values[capacity:].double().numpy()
        )
        nonzero = np.flatnonzero(leaf_values != 0)
        # The largest non-zero index below the landing leaf (or overall, at the root).
        bound = np.where(at_root, capacity, out)[fix]
        k = np.searchsorted(nonzero, bound) - 1
        found = k >= 0
        fixed = out[fix]
        fixed[found] = nonzero[k[found]]
        out[fix] = fixed
    return out
