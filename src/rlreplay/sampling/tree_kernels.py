"""The layout of the segment trees and their Numba kernels (pure functions over arrays).

The tree classes (:mod:`rlreplay.sampling.trees`) validate and call these; the prioritized
sampler (:mod:`rlreplay.sampling.priorities`) fuses them into its own kernels.

Layout, shared by the three trees: a *cache-line-wide* tree of fan-out ``K = 8``. The ``K``
children of a node are contiguous, one *group* of eight float64 = 64 bytes, and every group is
64-byte aligned, so it is exactly one cache line. The tree is one float64 array of shape
``(groups, K)``, one row per group:

* level ``L`` holds the ``capacity`` leaves, level ``d < L`` holds ``ceil(count(d + 1) / K)``
  nodes, and the root is the one node of level 0; ``L >= 1`` is the smallest depth at which
  ``K ** L >= capacity`` (1,000,000 leaves: 7 levels below the root instead of 20 binary ones);
* node ``i`` of level ``d`` has children ``K * i .. K * i + K - 1`` of level ``d + 1``, which
  are the whole group ``i`` of that level, and parent ``i // K`` (``i >> 3``);
* levels are stored leaves first: leaf ``k`` is at ``[k >> 3, k & 7]``, then level ``L - 1``
  from group ``ceil(capacity / K)``, and so on up to the root, at ``[groups - 1, 0]``. The
  ``levels`` table (:func:`_layout`) holds the first group and the node count of each level;
* lanes past the last node of a level (the end of its last group) are padding that always
  holds the operation's neutral element (``0`` for sum, ``+inf`` for min, ``-inf`` for max), so
  they never change a parent. Memory is about ``8/7 * capacity`` float64 (the binary heap
  layout took ``2 * next_pow2(capacity)``).

A descent reads one line per level and scans its ``K`` prefix sums; an update recomputes a
parent from one line. A node is the left-to-right fold of its children under the operation
(``((c0 + c1) + c2) + ...`` for sums), so the running prefix sums of a descent end exactly at
the node's value. Because every leaf sits at the same depth, :func:`_recompute_ancestors`
recomputes the ancestors of a batch one level at a time and :func:`_descend_all` walks a batch
of prefix sums down one level at a time.

The rule of a draw is the same as with the binary heap layout this replaced (the smallest leaf
whose running sum exceeds the mass; the last positive leaf for a mass that rounds up to the
total; never a zero leaf); partial sums are now added in another order, so a mass within
rounding error of a prefix-sum boundary may land on the other side of it.

The kernels index the ``(groups, K)`` array and nothing else. The prioritized sampler keeps its
sum and min trees in one ``(2, groups, K)`` allocation (see :func:`_sum_min_pair`) and updates
both along the same paths in one pass (:func:`_recompute_ancestors_pair`).

Every internal node is *recomputed* from its children, never adjusted by a delta, so the
tree is a pure function of its leaves: no drift after any number of updates, and rebuilding
from the leaves (what :meth:`SumTree.load_state_dict` does) reproduces it bit for bit.

The kernels never draw random numbers: :meth:`SumTree.sample` draws its uniforms from the
caller's :class:`numpy.random.Generator` (or the tree's own) and hands them in, so a
checkpointed Generator state reproduces the same samples.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from numpy.typing import NDArray

from rlreplay.codegen.prefetch import prefetch_row

__all__: list[str] = []  # private to rlreplay.sampling; the names below start with "_"

# Operation codes understood by the kernels (module constants are compile-time constants in Numba).
_SUM = 0
_MIN = 1
_MAX = 2

# Fan-out: the children of a node are one group of _K float64, one 64-byte cache line.
_K = 8
_SHIFT = 3  # log2(_K): node i's children are group i of the level below; its parent is i >> 3
_LANE = _K - 1  # i & _LANE is node i's position in its group
_ALIGN = 64  # bytes: groups start on cache lines


def _layout(capacity: int) -> NDArray[np.int64]:
    """The ``levels`` table of a tree of ``capacity`` leaves: shape ``(L + 1, 2)``, int64.

    Row ``d`` is ``(first group, node count)`` of level ``d``: row 0 is the root ``(groups - 1,
    1)``, row ``L`` the leaves ``(0, capacity)``. There is always at least one level below the
    root (a one-leaf tree has a root over one leaf), so every kernel has a level to descend.
    """
    counts = [capacity]  # leaves first, up to the root
    while len(counts) == 1 or counts[-1] > 1:
        counts.append(-(-counts[-1] // _K))
    levels = np.empty((len(counts), 2), dtype=np.int64)
    first = 0
    for d, count in enumerate(counts):  # d = 0 is the leaves here; stored root first below
        levels[len(counts) - 1 - d] = (first, count)
        first += -(-count // _K)
    return levels


def _groups(levels: NDArray[np.int64]) -> int:
    """Number of groups (rows) of a tree with this ``levels`` table: the root's group + 1."""
    return int(levels[0, 0]) + 1


def _aligned_full(shape: tuple[int, ...], fill: float) -> NDArray[np.float64]:
    """A C-contiguous float64 array of ``shape`` filled with ``fill``, starting on a cache line.

    NumPy only promises 16-byte alignment, so this takes a slightly longer buffer and starts at
    its first 64-byte boundary; every group of ``_K`` float64 is then exactly one cache line.
    """
    count = int(np.prod(shape))
    raw = np.empty(count + _ALIGN // 8, dtype=np.float64)
    skip = (-raw.ctypes.data % _ALIGN) // 8
    out = raw[skip : skip + count].reshape(shape)
    out[...] = fill
    return out


# --------------------------------------------------------------------------------------------
# Kernels. Pure functions over the (groups, K) tree array; the per-item loops live here.
# --------------------------------------------------------------------------------------------


@numba.njit(cache=True, inline="always")
def _combine(op: int, acc: float, c: float) -> float:
    """Combines a running value ``acc`` with the next child ``c`` under ``op``.

    Ties keep ``acc`` (the left one), exactly as ``acc if acc <= c else c`` for min: written as
    ``c if c < acc else acc``, which is the same for every non-NaN pair and compiles to one
    ``minsd`` (likewise ``maxsd`` for max). Trees never hold NaN.
    """
    if op == _SUM:
        return acc + c
    if op == _MIN:
        return c if c < acc else acc
    return c if c > acc else acc


@numba.njit(cache=True, inline="always")
def _fold(tree: NDArray[np.float64], op: int, group: int) -> float:  # pragma: no cover - compiled
    """The value of the node whose children are ``group``: its lanes combined left to right.

    Every parent holds exactly this of its children, so for a sum the running prefix sums of a
    descent through ``group`` end on the parent's value.
    """
    acc: float = tree[group, 0]
    for j in range(1, _K):
        acc = _combine(op, acc, tree[group, j])
    return acc


@numba.njit(cache=True, inline="always")
def _recompute_ancestors(
    tree: NDArray[np.float64], levels: NDArray[np.int64], op: int, nodes: NDArray[np.int64]
) -> None:  # pragma: no cover - compiled
    """Recomputes every ancestor of the leaves ``nodes`` from its children, bottom-up.

    ``nodes`` holds leaf indices whose leaves are already written, in any order, duplicates
    allowed; it is used as scratch and overwritten. Every other internal node must already
    equal the fold of its children (the invariant of every tree here).

    Level by level, so every child is final before its parent is recomputed. While a level has
    more nodes than the batch, each path recomputes its own parent (one line of children): a
    parent shared by several paths is recomputed once per path, from the same final children,
    so repeats are harmless and no sort or deduplication is needed (the loop has no
    data-dependent branch, which lets the CPU overlap the cache misses of all paths). Once a
    level has no more nodes than the batch, the whole level is recomputed in order, at most
    ``len(nodes)`` nodes. A node off every path is recomputed from unchanged children, which
    reproduces its value bit for bit. Cost: ``O(k log_K(size / k) + k)`` lines for ``k`` nodes.
    """
    n = nodes.shape[0]
    d = levels.shape[0] - 2  # the level of the leaves' parents
    while d >= 0 and levels[d, 1] > n:
        first, below = levels[d, 0], levels[d + 1, 0]
        for j in range(n):
            parent = nodes[j] >> _SHIFT
            tree[first + (parent >> _SHIFT), parent & _LANE] = _fold(tree, op, below + parent)
            nodes[j] = parent
        d -= 1
    while d >= 0:
        first, below = levels[d, 0], levels[d + 1, 0]
        for parent in range(levels[d, 1]):
            tree[first + (parent >> _SHIFT), parent & _LANE] = _fold(tree, op, below + parent)
        d -= 1


@numba.njit(cache=True, inline="always")
def _recompute_ancestors_pair(
    tree_a: NDArray[np.float64],
    op_a: int,
    tree_b: NDArray[np.float64],
    op_b: int,
    levels: NDArray[np.int64],
    nodes: NDArray[np.int64],
) -> None:  # pragma: no cover - compiled
    """:func:`_recompute_ancestors` on two trees of the same layout in one pass.

    Both trees get the same paths, so the loop over paths and levels is paid once.
    """
    n = nodes.shape[0]
    d = levels.shape[0] - 2
    while d >= 0 and levels[d, 1] > n:
        first, below = levels[d, 0], levels[d + 1, 0]
        for j in range(n):
            parent = nodes[j] >> _SHIFT
            group, lane = first + (parent >> _SHIFT), parent & _LANE
            tree_a[group, lane] = _fold(tree_a, op_a, below + parent)
            tree_b[group, lane] = _fold(tree_b, op_b, below + parent)
            nodes[j] = parent
        d -= 1
    while d >= 0:
        first, below = levels[d, 0], levels[d + 1, 0]
        for parent in range(levels[d, 1]):
            group, lane = first + (parent >> _SHIFT), parent & _LANE
            tree_a[group, lane] = _fold(tree_a, op_a, below + parent)
            tree_b[group, lane] = _fold(tree_b, op_b, below + parent)
        d -= 1


@numba.njit(cache=True)
def _set_kernel(
    tree: NDArray[np.float64],
    levels: NDArray[np.int64],
    op: int,
    indices: NDArray[np.int64],
    values: NDArray[np.float64],
) -> None:  # pragma: no cover - compiled
    """Writes ``values`` to the leaves ``indices`` and recomputes every affected ancestor.

    Indices must be valid and ``values`` as long as ``indices`` (the caller checks both).
    Leaves are written in call order, so a duplicated index keeps its last value; then
    :func:`_recompute_ancestors`. Cost: ``O(k log_K(size / k) + k)`` lines for ``k`` indices.
    """
    n = indices.shape[0]
    if n == 0:
        return
    nodes = np.empty(n, dtype=np.int64)
    for j in range(n):
        leaf = indices[j]
        tree[leaf >> _SHIFT, leaf & _LANE] = values[j]
        nodes[j] = leaf
    _recompute_ancestors(tree, levels, op, nodes)


@numba.njit(cache=True)
def _build_kernel(
    tree: NDArray[np.float64], levels: NDArray[np.int64], op: int
) -> None:  # pragma: no cover - compiled
    """Recomputes every internal node from the leaves (children before parents: bottom-up)."""
    for d in range(levels.shape[0] - 2, -1, -1):
        first, below = levels[d, 0], levels[d + 1, 0]
        for parent in range(levels[d, 1]):
            tree[first + (parent >> _SHIFT), parent & _LANE] = _fold(tree, op, below + parent)


@numba.njit(cache=True, inline="always")
def _descend_all(
    tree: NDArray[np.float64],
    levels: NDArray[np.int64],
    rest: NDArray[np.float64],
    out: NDArray[np.int64],
) -> None:  # pragma: no cover - compiled
    """Finds, for each mass ``rest[i]``, the smallest leaf ``k`` with ``mass < leaf[0] + ... +
    leaf[k]`` in a sum tree whose total is ``> 0``, and writes it to ``out[i]``.

    ``rest`` is overwritten (it holds each mass still to cover). If ``mass >= total`` (no leaf
    qualifies), the result is the rightmost non-zero leaf. If rounding pushes the remaining mass
    past the end of a subtree on the way down, it is the rightmost non-zero leaf of that subtree.

    All masses descend together, one level per pass: a pass first prefetches the line of every
    draw, then scans them; it has no data-dependent branch (the choices are selects; "at the
    end" is rare and predicted) and its draws are independent, so the cache misses of all
    paths overlap instead of being waited for one path at a time. The result is that of a
    per-mass descent:

    * start at the root; a mass ``>= total`` is "at the end" from the start;
    * at a node with children ``c_0 .. c_7`` (one line), with running prefix sums ``p_j = (...
      (c_0 + c_1) + ...) + c_j``: go to the first child ``j`` with ``mass < p_j``, after
      ``mass -= p_(j-1)`` (nothing for ``j = 0``); if there is none, the mass is at the end of
      the node's subtree: from then on take, at each level, the rightmost child ``> 0`` (the
      rightmost non-zero leaf). "At the end" is stored as ``mass = inf``, which is ``>=`` every
      prefix sum at every later level, so one rule serves both phases.

    Rounding safety: the descent only ever enters a node whose sum is ``> 0``. The root
    qualifies; child ``j`` is taken on ``p_(j-1) <= mass < p_j``, so ``c_j > 0`` (a zero child
    leaves the prefix sum unchanged); at the end the rightmost child ``> 0`` is taken, and the
    (positive) parent has one. Padding lanes hold 0, so the leaf reached is a real leaf
    ``< capacity`` whose value is ``> 0``. The prefix sums only grow, so the children passed
    over form a prefix of the line and counting them gives the child: no early exit needed.
    """
    n = rest.shape[0]
    total = tree[levels[0, 0], 0]
    for i in range(n):
        out[i] = 0
        if not rest[i] < total:
            rest[i] = np.inf
    for d in range(1, levels.shape[0]):  # one pass per level below the root
        first = levels[d, 0]
        for i in range(n):
            prefetch_row(tree, first + out[i])  # the whole batch's lines first
        for i in range(n):
            group = first + out[i]  # the children of node out[i] of level d - 1
            mass = rest[i]
            prefix = 0.0  # p_j
            passed = 0.0  # p_(j-1) of the child taken: the mass of the children passed over
            count = 0  # children passed over (mass >= p_j)
            last = 0  # rightmost child > 0
            for j in range(_K):
                c = tree[group, j]
                prefix += c
                over = mass >= prefix
                count += over
                passed = prefix if over else passed
                last = j if c > 0.0 else last
            at_end = count == _K
            rest[i] = np.inf if at_end else mass - passed
            out[i] = (out[i] << _SHIFT) + (last if at_end else count)


@numba.njit(cache=True)
def _find_prefix_sum_kernel(
    tree: NDArray[np.float64], levels: NDArray[np.int64], masses: NDArray[np.float64]
) -> NDArray[np.int64]:  # pragma: no cover - compiled
    """Applies :func:`_descend_all` to every mass (``masses`` must lie in ``[0, total]``)."""
    out = np.empty(masses.shape[0], dtype=np.int64)
    _descend_all(tree, levels, masses.copy(), out)
    return out


@numba.njit(cache=True)
def _sample_kernel(
    tree: NDArray[np.float64],
    levels: NDArray[np.int64],
    uniforms: NDArray[np.float64],
    stratified: bool,
) -> NDArray[np.int64]:  # pragma: no cover - compiled
    """Turns uniforms in ``[0, 1)`` into leaves drawn with probability ``leaf / total``.

    Stratified: ``mass_i = (i + u_i) * (total / n)``, one draw in each of ``n`` equal strata of
    ``[0, total)``; otherwise ``mass_i = u_i * total``. A mass that rounds up to ``total`` or
    beyond gets the rightmost non-zero leaf from :func:`_descend_all`, never a zero leaf.
    """
    n = uniforms.shape[0]
    total = tree[levels[0, 0], 0]
    stratum = total / n if n > 0 else 0.0
    masses = np.empty(n, dtype=np.float64)
    for i in range(n):
        masses[i] = (i + uniforms[i]) * stratum if stratified else uniforms[i] * total
    out = np.empty(n, dtype=np.int64)
    _descend_all(tree, levels, masses, out)
    return out


def _for_kernel(array: NDArray[Any]) -> NDArray[Any]:
    """Returns ``array`` flat, C-contiguous and writable: the one layout the kernels compile for.

    A read-only or strided input would otherwise make Numba compile (and cache) another
    specialization of the kernel on first use.
    """
    flat = np.ascontiguousarray(array.reshape(-1))
    return flat if flat.flags.writeable else flat.copy()
