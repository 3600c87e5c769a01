"""Segment trees (sum, min, max) over float64 leaves, with Numba kernels.

The prioritized samplers keep one :class:`SumTree` of priorities (to sample proportionally and
to find the leaf under a prefix sum), a :class:`MinTree` (for the largest importance weight) and
sometimes a :class:`MaxTree` (for the priority given to new items).

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
caller's :class:`numpy.random.Generator` and hands them in, so a checkpointed Generator state
reproduces the same samples.
"""

from __future__ import annotations

import operator
from typing import Any, ClassVar, Self

import numba
import numpy as np
from numpy.typing import ArrayLike, NDArray

from rlreplay.errors import (
    CheckpointError,
    ConfigError,
    DTypeError,
    EmptyBufferError,
    InvalidIdError,
    PriorityError,
    ShapeError,
)
from rlreplay.prefetch import prefetch_row

__all__ = ["MaxTree", "MinTree", "SumTree"]

# Operation codes understood by the kernels (module constants are compile-time constants in Numba).
_SUM = 0
_MIN = 1
_MAX = 2

# Fan-out: the children of a node are one group of _K float64, one 64-byte cache line.
_K = 8
_SHIFT = 3  # log2(_K): node i's children are group i of the level below; its parent is i >> 3
_LANE = _K - 1  # i & _LANE is node i's position in its group
_ALIGN = 64  # bytes: groups start on cache lines

_STATE_VERSION = 1


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


# --------------------------------------------------------------------------------------------
# Python front-end: validation, then one kernel call per batch.
# --------------------------------------------------------------------------------------------


def _first_bad(mask: NDArray[np.bool_], array: NDArray[Any]) -> tuple[int, Any]:
    """Returns ``(flat position, value)`` of the first ``True`` of ``mask`` (for messages)."""
    position = int(np.flatnonzero(mask.ravel())[0])
    return position, array.ravel()[position].item()


def _integer_at_least(name: str, value: Any, minimum: int, error: type[ValueError]) -> int:
    """``value`` as an int ``>= minimum`` (anything with ``__index__`` but a bool), else
    ``error`` naming ``name``, the bound and the value."""
    if not isinstance(value, bool):
        try:
            value = operator.index(value)
        except TypeError:
            pass
        else:
            if value >= minimum:
                return int(value)
    raise error(f"{name} must be an integer >= {minimum}; got {value!r}")


def _check_sample(n: int, rng: np.random.Generator) -> int:
    """Checks the arguments of a sample of ``n`` draws from ``rng``; returns ``n`` as an int.

    Raises:
        TypeError: If ``rng`` is not a ``numpy.random.Generator``.
        ValueError: If ``n`` is negative or not an integer.
    """
    n = _integer_at_least("n", n, 0, ValueError)
    if not isinstance(rng, np.random.Generator):
        raise TypeError(
            f"rng must be a numpy.random.Generator (e.g. numpy.random.default_rng(seed)); "
            f"got {type(rng).__name__}"
        )
    return n


def _state_int(state: dict[str, Any], key: str) -> int:
    """Reads an integer entry of a state dict (a Python int or a 0-d integer array)."""
    value = np.asarray(state[key])
    if value.shape != () or value.dtype.kind not in "iu":
        raise CheckpointError(f"state {key!r} must be an integer; got {state[key]!r}")
    return int(value)


def _for_kernel(array: NDArray[Any]) -> NDArray[Any]:
    """Returns ``array`` flat, C-contiguous and writable: the one layout the kernels compile for.

    A read-only or strided input would otherwise make Numba compile (and cache) another
    specialization of the kernel on first use.
    """
    flat = np.ascontiguousarray(array.reshape(-1))
    return flat if flat.flags.writeable else flat.copy()


class _SegmentTree:
    """Shared storage, validation and state handling of the three trees (not public).

    Subclasses fix ``_OP`` (kernel code), ``_NEUTRAL`` (value of fresh and padding leaves) and
    ``_KIND`` (name stored in the state dict), and may override :meth:`_check_values`.
    """

    _OP: ClassVar[int]
    _NEUTRAL: ClassVar[float]
    _KIND: ClassVar[str]

    __slots__ = ("_capacity", "_levels", "_root", "_tree")

    def __init__(self, capacity: int) -> None:
        """Creates a tree whose ``capacity`` leaves all hold the neutral element.

        Args:
            capacity: Number of leaves, any integer ``>= 1`` (it need not be a power of two).

        Raises:
            ConfigError: If ``capacity`` is not an integer ``>= 1``.
        """
        capacity = _integer_at_least("capacity", capacity, 1, ConfigError)
        self._capacity = capacity
        self._levels = _layout(capacity)
        self._root = _groups(self._levels) - 1  # the root is lane 0 of the last group
        self._tree = _aligned_full((self._root + 1, _K), self._NEUTRAL)

    @classmethod
    def _over(cls, capacity: int, tree: NDArray[np.float64]) -> Self:
        """Returns a tree of ``capacity`` leaves kept in ``tree`` (not copied).

        ``tree`` must be a C-contiguous float64 array of shape ``(groups, K)`` for this capacity
        (see :func:`_layout`) that already is a valid tree of this kind (e.g. all neutral). For
        :func:`_sum_min_pair`.
        """
        levels = _layout(capacity)
        shape = (_groups(levels), _K)
        if tree.dtype != np.float64 or tree.shape != shape or not tree.flags.c_contiguous:
            raise ValueError(
                f"tree must be float64 of shape {shape}; got {tree.dtype} {tree.shape}"
            )
        out = cls.__new__(cls)
        out._capacity = capacity
        out._levels = levels
        out._root = shape[0] - 1
        out._tree = tree
        return out

    @property
    def capacity(self) -> int:
        """Number of leaves (valid indices are ``0 .. capacity - 1``)."""
        return self._capacity

    def __len__(self) -> int:
        """Returns the capacity (number of leaves, whatever they hold)."""
        return self._capacity

    def __repr__(self) -> str:
        return f"{type(self).__name__}(capacity={self._capacity}, root={self._root_value()!r})"

    def set(self, indices: ArrayLike, values: ArrayLike) -> None:
        """Sets leaves ``indices`` to ``values``; parents are recomputed from their children.

        Validation happens before anything is written: a rejected call changes nothing.

        Args:
            indices: Integer leaf indices, any shape; duplicates allowed (the last one wins).
            values: A scalar (broadcast to every index) or an array of the shape of
                ``indices``.

        Raises:
            DTypeError: If ``indices`` are not integers or ``values`` not real numbers.
            InvalidIdError: If an index is outside ``[0, capacity)``.
            ShapeError: If ``values`` is neither a scalar nor of the shape of ``indices``.
            PriorityError: If a value is not allowed in this tree (see the class docstring).
        """
        idx = self._check_indices(indices)
        vals = self._as_float_array(values, "values")
        if vals.ndim == 0:
            vals = np.full(idx.size, vals.item(), dtype=np.float64)
        elif vals.shape != idx.shape:
            raise ShapeError(
                f"values must be a scalar or have the shape of indices {idx.shape}; "
                f"got shape {vals.shape}"
            )
        vals = _for_kernel(vals)
        self._check_values(vals)
        self._apply(_for_kernel(idx), vals)

    def get(self, indices: ArrayLike) -> NDArray[np.float64]:
        """Returns the leaves at ``indices`` (a new float64 array of the shape of ``indices``).

        Raises:
            DTypeError: If ``indices`` are not integers.
            InvalidIdError: If an index is outside ``[0, capacity)``.
        """
        idx = self._check_indices(indices)
        # Leaf k is element k of the flat (contiguous) tree. Through a flat index so that a
        # scalar index also gives an array (0-d), not a scalar.
        return self._flat()[idx.reshape(-1)].reshape(idx.shape)

    def state_dict(self) -> dict[str, Any]:
        """Returns the full state: ``version``, ``kind``, ``capacity`` and a copy of ``leaves``.

        Internal nodes are not stored: they are a function of the leaves and are rebuilt on load.
        """
        return {
            "version": _STATE_VERSION,
            "kind": self._KIND,
            "capacity": self._capacity,
            "leaves": self._leaves(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replaces the leaves with those of ``state`` (from :meth:`state_dict`), rebuilding nodes.

        Values may also be 0-d arrays (as they come back from ``numpy.savez``).

        Raises:
            CheckpointError: If ``state`` lacks a key, has another version, kind or capacity,
                or holds leaves this tree does not accept. The tree is then left unchanged.
        """
        missing = sorted({"version", "kind", "capacity", "leaves"} - set(state))
        if missing:
            raise CheckpointError(f"{self._KIND} tree state is missing keys {missing}")
        version = _state_int(state, "version")
        if version != _STATE_VERSION:
            raise CheckpointError(
                f"{self._KIND} tree state has version {version}; this rlreplay reads version "
                f"{_STATE_VERSION}"
            )
        kind = str(state["kind"])
        if kind != self._KIND:
            raise CheckpointError(
                f"state is of a {kind!r} tree; {type(self).__name__} expects kind {self._KIND!r}"
            )
        capacity = _state_int(state, "capacity")
        if capacity != self._capacity:
            raise CheckpointError(
                f"state has capacity {capacity}; this tree has capacity {self._capacity} "
                f"(use {type(self).__name__}.from_state_dict to build a tree of any capacity)"
            )
        leaves = np.asarray(state["leaves"])
        if leaves.shape != (capacity,) or leaves.dtype.kind not in "iuf":
            raise CheckpointError(
                f"state leaves must be a real array of shape ({capacity},); "
                f"got dtype {leaves.dtype} and shape {leaves.shape}"
            )
        leaves = leaves.astype(np.float64)
        try:
            self._check_values(leaves)
        except PriorityError as error:
            raise CheckpointError(f"state leaves are invalid: {error}") from None
        self._tree[:] = self._NEUTRAL
        self._set_leaves(leaves)
        _build_kernel(self._tree, self._levels, self._OP)

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> Self:
        """Builds a new tree from :meth:`state_dict` output (of any capacity).

        Raises:
            CheckpointError: As :meth:`load_state_dict`, or if ``capacity`` is missing or bad.
        """
        if "capacity" not in state:
            raise CheckpointError(f"{cls._KIND} tree state is missing keys ['capacity']")
        capacity = _state_int(state, "capacity")
        if capacity < 1:
            raise CheckpointError(f"state capacity must be >= 1; got {capacity}")
        tree = cls(capacity)
        tree.load_state_dict(state)
        return tree

    # -- helpers ----------------------------------------------------------------------------

    def _apply(self, idx: NDArray[np.int64], vals: NDArray[np.float64]) -> None:
        """Runs the set kernel on already validated, flat, contiguous arrays."""
        _set_kernel(self._tree, self._levels, self._OP, idx, vals)

    def _root_value(self) -> float:
        """The root: the combination of every leaf."""
        return float(self._tree[self._root, 0])

    def _flat(self) -> NDArray[np.float64]:
        """The tree as one flat view (every tree array is C-contiguous): leaf ``k`` is at ``k``."""
        return self._tree.reshape(-1)

    def _leaves(self) -> NDArray[np.float64]:
        """A copy of the ``capacity`` leaves (the first groups, lane by lane)."""
        return self._flat()[: self._capacity].copy()

    def _set_leaves(self, leaves: NDArray[np.float64]) -> None:
        """Writes all ``capacity`` leaves (padding lanes stay neutral); parents are not touched."""
        self._flat()[: self._capacity] = leaves

    def _check_indices(self, indices: ArrayLike) -> NDArray[np.int64]:
        """Returns ``indices`` as an int64 array after checking dtype and range."""
        idx = np.asarray(indices)
        if idx.dtype.kind not in "iu":
            if idx.size == 0:  # ``[]`` comes in as float64; an empty batch is fine
                return np.zeros(idx.shape, dtype=np.int64)
            raise DTypeError(f"indices must be integers; got dtype {idx.dtype}")
        if idx.size:
            # Range check in the original dtype, so a huge uint64 cannot wrap when cast to int64.
            bad = (idx < 0) | (idx >= self._capacity)
            if bad.any():
                position, value = _first_bad(bad, idx)
                raise InvalidIdError(
                    f"indices must be in [0, {self._capacity}) (capacity {self._capacity}); "
                    f"got {value} at position {position}"
                )
        return idx.astype(np.int64, copy=False)

    @staticmethod
    def _as_float_array(values: ArrayLike, name: str) -> NDArray[np.float64]:
        """Returns ``values`` as float64, refusing booleans, complex numbers and objects."""
        array = np.asarray(values)
        if array.dtype.kind not in "iuf":
            if array.size == 0:
                return np.zeros(array.shape, dtype=np.float64)
            raise DTypeError(f"{name} must be real numbers; got dtype {array.dtype}")
        return array.astype(np.float64, copy=False)

    def _check_values(self, values: NDArray[np.float64]) -> None:
        """Raises ``PriorityError`` naming the first NaN (min and max trees accept ``±inf``)."""
        nan = np.isnan(values)
        if nan.any():
            position, _ = _first_bad(nan, values)
            name = type(self).__name__
            raise PriorityError(
                f"values must not be NaN in a {name}; got nan at position {position}"
            )


class SumTree(_SegmentTree):
    """Sum segment tree: proportional sampling and prefix-sum search over non-negative leaves.

    Invariants:
        * every leaf is finite and ``>= 0`` (fresh leaves and padding leaves are ``0``);
        * every internal node equals the sum of its (up to 8) children, added left to right and
          recomputed from them on each update (never a running delta), so the root ``total``
          does not drift;
        * ``total`` is finite (an update that would overflow it is rejected);
        * a node is ``> 0`` exactly when some leaf below it is, so a descent that enters only
          positive nodes ends on a positive leaf.

    Cost, with ``n`` the capacity and ``k`` the batch size: ``set`` is ``O(k log n)`` (the
    ancestors of the batch, level by level, one cache line per node), ``get`` is ``O(k)``,
    ``find_prefix_sum`` and ``sample`` are ``O(k log n)`` (all masses descend together, one level
    and one cache line per pass; ``log_8 n`` levels), ``total`` is ``O(1)``. Memory: about
    ``8/7 * n`` float64.

    Example:
        >>> import numpy as np
        >>> from rlreplay.sampling import SumTree
        >>> tree = SumTree(5)
        >>> tree.set([0, 3], [1.0, 3.0])
        >>> tree.total
        4.0
        >>> tree.find_prefix_sum([0.0, 0.5, 1.0, 4.0]).tolist()
        [0, 0, 3, 3]
        >>> sorted(set(tree.sample(100, np.random.default_rng(0)).tolist()))
        [0, 3]
    """

    _OP = _SUM
    _NEUTRAL = 0.0
    _KIND = "sum"

    __slots__ = ()

    @property
    def total(self) -> float:
        """Sum of all leaves (the root)."""
        return self._root_value()

    def find_prefix_sum(self, values: ArrayLike) -> NDArray[np.int64]:
        """Finds, for each value, the first leaf at which the running sum exceeds it.

        ``result[i]`` is the smallest ``k`` with ``values[i] < leaf[0] + ... + leaf[k]``
        (ALF's ``find_sum_bound``), so the leaf returned is never ``0``. If ``values[i]`` equals
        ``total`` (no ``k`` qualifies), the largest index of a non-zero leaf is returned. Under
        float rounding the result is still an index ``< capacity`` of a leaf ``> 0``.

        Args:
            values: Masses in ``[0, total]``, any shape.

        Returns:
            int64 leaf indices of the shape of ``values``.

        Raises:
            DTypeError: If ``values`` are not real numbers.
            EmptyBufferError: If ``total`` is 0 (every leaf is 0).
            PriorityError: If a value is NaN, negative or larger than ``total``.
        """
        masses = self._as_float_array(values, "values")
        total = self._root_value()
        if total <= 0.0:
            raise EmptyBufferError(
                "find_prefix_sum needs a SumTree with total > 0; every leaf is 0 "
                "(set some priorities first)"
            )
        bad = np.isnan(masses) | (masses < 0.0) | (masses > total)
        if bad.any():
            position, value = _first_bad(bad, masses)
            raise PriorityError(
                f"values must be in [0, total={total!r}]; got {value!r} at position {position}"
            )
        out: NDArray[np.int64] = _find_prefix_sum_kernel(
            self._tree, self._levels, _for_kernel(masses)
        )
        return out.reshape(masses.shape)

    def sample(
        self, n: int, rng: np.random.Generator, *, stratified: bool = True
    ) -> NDArray[np.int64]:
        """Draws ``n`` leaf indices, each with probability ``leaf / total``.

        The ``n`` uniforms come from ``rng.random(n)`` (one call), so the draws are a function
        of the Generator's state. Stratified (ReAgent's ``stratified_sample``): draw ``i`` is
        uniform in the ``i``-th of ``n`` equal strata of ``[0, total)``, which lowers the
        variance of a batch; the marginal law of each leaf is the same either way.

        Args:
            n: Number of draws, ``>= 0``.
            rng: The Generator to draw the uniforms from.
            stratified: One draw per stratum if true; ``n`` independent draws otherwise.

        Returns:
            int64 leaf indices of shape ``(n,)``; zero leaves are never returned.

        Raises:
            EmptyBufferError: If ``total`` is 0.
            TypeError: If ``rng`` is not a ``numpy.random.Generator``.
            ValueError: If ``n`` is negative or not an integer.
        """
        n = _check_sample(n, rng)
        if self._root_value() <= 0.0:
            raise EmptyBufferError(
                "cannot sample from a SumTree whose total is 0 (set some priorities first)"
            )
        uniforms = rng.random(n)
        out: NDArray[np.int64] = _sample_kernel(
            self._tree, self._levels, uniforms, bool(stratified)
        )
        return out

    def _apply(self, idx: NDArray[np.int64], vals: NDArray[np.float64]) -> None:
        """Sets the leaves, and undoes the call if the total overflowed to ``inf``."""
        old = self._flat()[idx]
        _set_kernel(self._tree, self._levels, self._OP, idx, vals)
        if not np.isfinite(self._root_value()):
            # Every index of a duplicate gets the same old value, so call order does not matter.
            _set_kernel(self._tree, self._levels, self._OP, idx, old)
            raise PriorityError(
                "values would make the SumTree total overflow float64; scale the priorities down"
            )

    def _check_values(self, values: NDArray[np.float64]) -> None:
        """Raises ``PriorityError`` naming the first value that is NaN, infinite or negative."""
        bad = ~np.isfinite(values) | (values < 0.0)
        if bad.any():
            position, value = _first_bad(bad, values)
            raise PriorityError(
                f"values must be finite and >= 0 in a SumTree; got {value!r} at position {position}"
            )


class MinTree(_SegmentTree):
    """Min segment tree over float64 leaves.

    Invariants:
        * leaves are any non-NaN float, ``±inf`` included; fresh and padding leaves are
          ``+inf`` (so ``+inf`` can stand for "absent");
        * every internal node is the minimum of its (up to 8) children, recomputed on each
          update.

    Cost: ``set`` is ``O(k log n)`` for ``k`` indices into ``n`` leaves, ``get`` is ``O(k)``,
    ``min`` is ``O(1)``. Memory: about ``8/7 * n`` float64.

    Example:
        >>> from rlreplay.sampling import MinTree
        >>> tree = MinTree(3)
        >>> tree.min
        inf
        >>> tree.set([0, 2], [4.0, 2.5])
        >>> tree.min
        2.5
    """

    _OP = _MIN
    _NEUTRAL = float("inf")
    _KIND = "min"

    __slots__ = ()

    @property
    def min(self) -> float:
        """Smallest leaf (the root); ``+inf`` when every leaf is ``+inf``."""
        return self._root_value()


class MaxTree(_SegmentTree):
    """Max segment tree over float64 leaves.

    Invariants:
        * leaves are any non-NaN float, ``±inf`` included; fresh and padding leaves are
          ``-inf``;
        * every internal node is the maximum of its (up to 8) children, recomputed on each
          update.

    Cost: ``set`` is ``O(k log n)`` for ``k`` indices into ``n`` leaves, ``get`` is ``O(k)``,
    ``max`` is ``O(1)``. Memory: about ``8/7 * n`` float64.

    Example:
        >>> from rlreplay.sampling import MaxTree
        >>> tree = MaxTree(3)
        >>> tree.max
        -inf
        >>> tree.set([0, 1, 1], [4.0, 9.0, 2.5])
        >>> tree.max
        4.0
    """

    _OP = _MAX
    _NEUTRAL = float("-inf")
    _KIND = "max"

    __slots__ = ()

    @property
    def max(self) -> float:
        """Largest leaf (the root); ``-inf`` when every leaf is ``-inf``."""
        return self._root_value()


def _sum_min_pair(capacity: int) -> tuple[SumTree, MinTree, NDArray[np.float64]]:
    """A :class:`SumTree` and a :class:`MinTree` of ``capacity`` leaves in one allocation.

    Returns ``(sums, mins, nodes)``: ``nodes`` has shape ``(2, groups, K)``, ``nodes[0]`` is the
    sum tree and ``nodes[1]`` the min tree (``sums._tree`` and ``mins._tree`` are these views).
    Each is a contiguous, line-aligned tree of its own: a descent reads only sum lines, eight
    sums per line. (Interleaving them, a line of sums next to the same line of mins, measured
    ~1 us faster for a 256-slot update but ~2-3 us slower for a 256-draw descent on 1,000,000
    slots: the adjacent-line prefetcher then fetches min lines a descent never reads.) Both are
    ordinary trees for every public method.
    """
    groups = _groups(_layout(capacity))
    nodes = _aligned_full((2, groups, _K), SumTree._NEUTRAL)
    nodes[1] = MinTree._NEUTRAL
    return SumTree._over(capacity, nodes[0]), MinTree._over(capacity, nodes[1]), nodes
