"""Segment trees (sum, min, max) over float64 leaves, with Numba kernels.

The prioritized samplers keep one :class:`SumTree` of priorities (to sample proportionally and
to find the leaf under a prefix sum), a :class:`MinTree` (for the largest importance weight) and
sometimes a :class:`MaxTree` (for the priority given to new items).

Layout, shared by the three trees: ``size`` is the smallest power of two ``>= capacity`` and the
tree is one float64 array of ``2 * size`` slots, 1-based like a binary heap:

* node ``1`` is the root; node ``i`` has children ``2 * i`` and ``2 * i + 1`` and parent
  ``i // 2`` (``i >> 1``);
* leaf ``k`` (``0 <= k < capacity``) lives at node ``size + k``; nodes ``size + capacity`` to
  ``2 * size - 1`` are padding leaves that always hold the operation's neutral element (``0``
  for sum, ``+inf`` for min, ``-inf`` for max), so they never change a parent;
* slot ``0`` is unused (it holds the neutral element too).

Because every leaf sits at the same depth, ``log2(size)`` levels separate a leaf from the root,
which lets :func:`_recompute_ancestors` recompute the ancestors of a batch one level at a time
and :func:`_descend_all` walk a batch of prefix sums down one level at a time.

The kernels index the tree array and nothing else, so they also run on a strided view: the
prioritized sampler keeps its sum and min trees interleaved in one ``(2 * size, 2)`` array (see
:func:`_sum_min_pair`), node ``i`` of both trees in one cache line, and updates both in one pass.

Every internal node is *recomputed* from its two children, never adjusted by a delta, so the
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

__all__ = ["MaxTree", "MinTree", "SumTree"]

# Operation codes understood by the kernels (module constants are compile-time constants in Numba).
_SUM = 0
_MIN = 1
_MAX = 2

_STATE_VERSION = 1


# --------------------------------------------------------------------------------------------
# Kernels. Pure functions over the flat tree array; the per-item loops live here.
# --------------------------------------------------------------------------------------------


@numba.njit(cache=True, inline="always")
def _combine(op: int, a: float, b: float) -> float:
    """Combines two children under ``op``: every parent holds exactly this of its children."""
    if op == _SUM:
        return a + b
    if op == _MIN:
        return a if a <= b else b
    return a if a >= b else b


@numba.njit(cache=True, inline="always")
def _recompute_ancestors(
    tree: NDArray[np.float64], size: int, op: int, nodes: NDArray[np.int64]
) -> None:  # pragma: no cover - compiled
    """Recomputes every ancestor of the leaf nodes ``nodes`` from its children, bottom-up.

    ``nodes`` holds leaf node numbers (``size + k``) whose leaves are already written, in any
    order, duplicates allowed; it is used as scratch and overwritten. Every other internal node
    must already equal the combination of its children (the invariant of every tree here).

    Level by level, so every child is final before its parent is recomputed. While a level is
    wider than the batch, each path recomputes its own parent: a parent shared by several paths
    is recomputed once per path, from the same final children, so repeats are harmless and no
    sort or deduplication is needed (the loop has no data-dependent branch, which lets the CPU
    overlap the cache misses of all paths). Once a level is no wider than the batch, the whole
    level is recomputed in order, at most ``len(nodes)`` nodes. A node off every path is
    recomputed from unchanged children, which reproduces its value bit for bit. Cost:
    ``O(k log(size / k) + k)`` for ``k`` nodes.
    """
    n = nodes.shape[0]
    level = size  # first node of the level ``nodes`` are on (leaves: size .. 2 * size - 1)
    while level > 1 and (level >> 1) > n:
        level >>= 1
        for j in range(n):
            parent = nodes[j] >> 1
            left = parent << 1
            tree[parent] = _combine(op, tree[left], tree[left + 1])
            nodes[j] = parent
    while level > 1:
        level >>= 1
        for parent in range(level, level << 1):
            tree[parent] = _combine(op, tree[2 * parent], tree[2 * parent + 1])


@numba.njit(cache=True, inline="always")
def _recompute_ancestors_pair(
    tree_a: NDArray[np.float64],
    op_a: int,
    tree_b: NDArray[np.float64],
    op_b: int,
    size: int,
    nodes: NDArray[np.int64],
) -> None:  # pragma: no cover - compiled
    """:func:`_recompute_ancestors` on two trees of the same ``size`` in one pass.

    Both trees get the same paths; when they are interleaved (:func:`_sum_min_pair`) a node of
    one shares its cache line with the same node of the other, so the second costs no miss.
    """
    n = nodes.shape[0]
    level = size
    while level > 1 and (level >> 1) > n:
        level >>= 1
        for j in range(n):
            parent = nodes[j] >> 1
            left = parent << 1
            tree_a[parent] = _combine(op_a, tree_a[left], tree_a[left + 1])
            tree_b[parent] = _combine(op_b, tree_b[left], tree_b[left + 1])
            nodes[j] = parent
    while level > 1:
        level >>= 1
        for parent in range(level, level << 1):
            left = parent << 1
            tree_a[parent] = _combine(op_a, tree_a[left], tree_a[left + 1])
            tree_b[parent] = _combine(op_b, tree_b[left], tree_b[left + 1])


@numba.njit(cache=True)
def _set_kernel(
    tree: NDArray[np.float64],
    size: int,
    op: int,
    indices: NDArray[np.int64],
    values: NDArray[np.float64],
) -> None:  # pragma: no cover - compiled
    """Writes ``values`` to the leaves ``indices`` and recomputes every affected ancestor.

    Indices must be valid and ``values`` as long as ``indices`` (the caller checks both).
    Leaves are written in call order, so a duplicated index keeps its last value; then
    :func:`_recompute_ancestors`. Cost: ``O(k log(size / k) + k)`` for ``k`` indices.
    """
    n = indices.shape[0]
    if n == 0:
        return
    nodes = np.empty(n, dtype=np.int64)
    for j in range(n):
        node = size + indices[j]
        tree[node] = values[j]
        nodes[j] = node
    _recompute_ancestors(tree, size, op, nodes)


@numba.njit(cache=True)
def _build_kernel(
    tree: NDArray[np.float64], size: int, op: int
) -> None:  # pragma: no cover - compiled
    """Recomputes every internal node from the leaves (children before parents: high to low)."""
    for node in range(size - 1, 0, -1):
        tree[node] = _combine(op, tree[2 * node], tree[2 * node + 1])


@numba.njit(cache=True, inline="always")
def _descend_all(
    tree: NDArray[np.float64], size: int, rest: NDArray[np.float64], out: NDArray[np.int64]
) -> None:  # pragma: no cover - compiled
    """Finds, for each mass ``rest[i]``, the smallest leaf ``k`` with ``mass < leaf[0] + ... +
    leaf[k]`` in a sum tree whose total is ``> 0``, and writes it to ``out[i]``.

    ``rest`` is overwritten (it holds each mass still to cover). If ``mass >= total`` (no leaf
    qualifies), the result is the rightmost non-zero leaf. If rounding pushes the remaining mass
    past the end of a subtree on the way down, it is the rightmost non-zero leaf of that subtree.

    All masses descend together, one level per pass: a pass has no data-dependent branch (the
    choices are selects) and its draws are independent, so the CPU overlaps their cache misses
    instead of waiting for each path in turn. The result is that of a per-mass descent:

    * start at the root; a mass ``>= total`` is "at the end" from the start;
    * at node ``v`` with children ``l`` and ``r``: go to ``l`` if ``mass < l``; otherwise
      ``mass -= l`` and go to ``r`` if ``mass < r``; otherwise the mass is at the end of
      ``v``'s subtree: from then on take, at each level, ``r`` if ``r > 0`` else ``l`` (the
      rightmost non-zero leaf). "At the end" is stored as ``mass = inf``, which fails both
      comparisons at every later level (subtracting a finite ``l`` keeps it ``inf``), so one
      rule serves both phases.

    Rounding safety: the descent only ever enters a node whose sum is ``> 0``. The root
    qualifies; going left needs ``mass < l``, going right needs ``mass - l < r``; at the end,
    right is taken when ``r > 0`` and otherwise left, where the whole (positive) sum of the
    parent then is. Padding leaves hold 0, so the leaf reached is a real leaf ``< capacity``
    whose value is ``> 0``.
    """
    n = rest.shape[0]
    total = tree[1]
    for i in range(n):
        out[i] = 1
        if not rest[i] < total:
            rest[i] = np.inf
    level = size
    while level > 1:  # one pass per level below the root
        level >>= 1
        for i in range(n):
            left = out[i] << 1
            left_sum = tree[left]
            right_sum = tree[left + 1]
            mass = rest[i]
            # ``&`` and ``|`` (not ``and``/``or``, which branch) keep the pass branch-free.
            right = mass >= left_sum
            after = mass - left_sum  # the mass still to cover once the left subtree is skipped
            at_end = right & (after >= right_sum)
            rest[i] = np.inf if at_end else (after if right else mass)
            out[i] = left + (right & ((not at_end) | (right_sum > 0.0)))
    for i in range(n):
        out[i] -= size


@numba.njit(cache=True)
def _find_prefix_sum_kernel(
    tree: NDArray[np.float64], size: int, masses: NDArray[np.float64]
) -> NDArray[np.int64]:  # pragma: no cover - compiled
    """Applies :func:`_descend_all` to every mass (``masses`` must lie in ``[0, total]``)."""
    out = np.empty(masses.shape[0], dtype=np.int64)
    _descend_all(tree, size, masses.copy(), out)
    return out


@numba.njit(cache=True)
def _sample_kernel(
    tree: NDArray[np.float64], size: int, uniforms: NDArray[np.float64], stratified: bool
) -> NDArray[np.int64]:  # pragma: no cover - compiled
    """Turns uniforms in ``[0, 1)`` into leaves drawn with probability ``leaf / total``.

    Stratified: ``mass_i = (i + u_i) * (total / n)``, one draw in each of ``n`` equal strata of
    ``[0, total)``; otherwise ``mass_i = u_i * total``. A mass that rounds up to ``total`` or
    beyond gets the rightmost non-zero leaf from :func:`_descend_all`, never a zero leaf.
    """
    n = uniforms.shape[0]
    total = tree[1]
    stratum = total / n if n > 0 else 0.0
    masses = np.empty(n, dtype=np.float64)
    for i in range(n):
        masses[i] = (i + uniforms[i]) * stratum if stratified else uniforms[i] * total
    out = np.empty(n, dtype=np.int64)
    _descend_all(tree, size, masses, out)
    return out


# --------------------------------------------------------------------------------------------
# Python front-end: validation, then one kernel call per batch.
# --------------------------------------------------------------------------------------------


def _first_bad(mask: NDArray[np.bool_], array: NDArray[Any]) -> tuple[int, Any]:
    """Returns ``(flat position, value)`` of the first ``True`` of ``mask`` (for messages)."""
    position = int(np.flatnonzero(mask.ravel())[0])
    return position, array.ravel()[position].item()


def _check_sample(n: int, rng: np.random.Generator) -> int:
    """Checks the arguments of a sample of ``n`` draws from ``rng``; returns ``n`` as an int.

    Raises:
        TypeError: If ``rng`` is not a ``numpy.random.Generator``.
        ValueError: If ``n`` is negative or not an integer.
    """
    if isinstance(n, bool):
        raise ValueError(f"n must be an integer >= 0; got {n!r}")
    try:
        n = operator.index(n)
    except TypeError:
        raise ValueError(f"n must be an integer >= 0; got {n!r}") from None
    if n < 0:
        raise ValueError(f"n must be an integer >= 0; got {n}")
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

    __slots__ = ("_capacity", "_size", "_tree")

    def __init__(self, capacity: int) -> None:
        """Creates a tree whose ``capacity`` leaves all hold the neutral element.

        Args:
            capacity: Number of leaves, any integer ``>= 1`` (it need not be a power of two).

        Raises:
            ConfigError: If ``capacity`` is not an integer ``>= 1``.
        """
        if isinstance(capacity, bool):
            raise ConfigError(f"capacity must be an integer >= 1; got {capacity!r}")
        try:
            capacity = operator.index(capacity)
        except TypeError:
            raise ConfigError(f"capacity must be an integer >= 1; got {capacity!r}") from None
        if capacity < 1:
            raise ConfigError(f"capacity must be an integer >= 1; got {capacity}")
        self._capacity = capacity
        # Smallest power of two >= capacity: (capacity - 1).bit_length() is the number of bits
        # needed for the largest leaf index, so 1 << it covers every index (1 -> 1, 5 -> 8).
        self._size = 1 << (capacity - 1).bit_length()
        self._tree = np.full(2 * self._size, self._NEUTRAL, dtype=np.float64)

    @classmethod
    def _over(cls, capacity: int, tree: NDArray[np.float64]) -> Self:
        """Returns a tree of ``capacity`` leaves kept in ``tree`` (not copied; may be strided).

        ``tree`` must be a float64 array of ``2 * next_pow2(capacity)`` slots that already is
        a valid tree of this kind (e.g. all neutral). For :func:`_sum_min_pair`.
        """
        size = 1 << (capacity - 1).bit_length()
        if tree.dtype != np.float64 or tree.shape != (2 * size,):
            raise ValueError(
                f"tree must be float64 of shape ({2 * size},); got {tree.dtype} {tree.shape}"
            )
        out = cls.__new__(cls)
        out._capacity = capacity
        out._size = size
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
        return f"{type(self).__name__}(capacity={self._capacity}, root={self._tree[1]!r})"

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
        # Through a flat view so that a scalar index also gives an array (0-d), not a scalar.
        return self._tree[self._size + idx.reshape(-1)].reshape(idx.shape)

    def state_dict(self) -> dict[str, Any]:
        """Returns the full state: ``version``, ``kind``, ``capacity`` and a copy of ``leaves``.

        Internal nodes are not stored: they are a function of the leaves and are rebuilt on load.
        """
        return {
            "version": _STATE_VERSION,
            "kind": self._KIND,
            "capacity": self._capacity,
            "leaves": self._tree[self._size : self._size + self._capacity].copy(),
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
        self._tree[self._size : self._size + capacity] = leaves
        _build_kernel(self._tree, self._size, self._OP)

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
        _set_kernel(self._tree, self._size, self._OP, idx, vals)

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
        * every internal node equals the sum of its two children, recomputed from them on each
          update (never a running delta), so the root ``total`` does not drift;
        * ``total`` is finite (an update that would overflow it is rejected);
        * a node is ``> 0`` exactly when some leaf below it is, so a descent that enters only
          positive nodes ends on a positive leaf.

    Cost, with ``n`` the capacity and ``k`` the batch size: ``set`` is ``O(k log n)`` (the
    ancestors of the batch, level by level), ``get`` is ``O(k)``, ``find_prefix_sum`` and
    ``sample`` are ``O(k log n)`` (all masses descend together, one level per pass), ``total`` is
    ``O(1)``. Memory: ``2 * next_pow2(n)`` float64.

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
        return float(self._tree[1])

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
        total = float(self._tree[1])
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
            self._tree, self._size, _for_kernel(masses)
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
        if self._tree[1] <= 0.0:
            raise EmptyBufferError(
                "cannot sample from a SumTree whose total is 0 (set some priorities first)"
            )
        uniforms = rng.random(n)
        out: NDArray[np.int64] = _sample_kernel(self._tree, self._size, uniforms, bool(stratified))
        return out

    def _apply(self, idx: NDArray[np.int64], vals: NDArray[np.float64]) -> None:
        """Sets the leaves, and undoes the call if the total overflowed to ``inf``."""
        old = self._tree[self._size + idx]
        _set_kernel(self._tree, self._size, self._OP, idx, vals)
        if not np.isfinite(self._tree[1]):
            # Every index of a duplicate gets the same old value, so call order does not matter.
            _set_kernel(self._tree, self._size, self._OP, idx, old)
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
        * every internal node is the minimum of its two children, recomputed on each update.

    Cost: ``set`` is ``O(k log n)`` for ``k`` indices into ``n`` leaves, ``get`` is ``O(k)``,
    ``min`` is ``O(1)``. Memory: ``2 * next_pow2(n)`` float64.

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
        return float(self._tree[1])


class MaxTree(_SegmentTree):
    """Max segment tree over float64 leaves.

    Invariants:
        * leaves are any non-NaN float, ``±inf`` included; fresh and padding leaves are
          ``-inf``;
        * every internal node is the maximum of its two children, recomputed on each update.

    Cost: ``set`` is ``O(k log n)`` for ``k`` indices into ``n`` leaves, ``get`` is ``O(k)``,
    ``max`` is ``O(1)``. Memory: ``2 * next_pow2(n)`` float64.

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
        return float(self._tree[1])


def _sum_min_pair(capacity: int) -> tuple[SumTree, MinTree, NDArray[np.float64]]:
    """A :class:`SumTree` and a :class:`MinTree` of ``capacity`` leaves sharing one array.

    Returns ``(sums, mins, nodes)``: ``nodes`` has shape ``(2 * size, 2)``, column 0 is the sum
    tree and column 1 the min tree (``sums._tree`` and ``mins._tree`` are views of them), so
    node ``i`` of both trees sits in the same 16 bytes, hence the same cache line. Kernels that
    update both trees along the same paths (:func:`_recompute_ancestors_pair`) then miss once
    per node instead of twice. Both are ordinary trees for every public method.
    """
    size = 1 << (capacity - 1).bit_length()
    nodes = np.empty((2 * size, 2), dtype=np.float64)
    nodes[:, 0] = SumTree._NEUTRAL
    nodes[:, 1] = MinTree._NEUTRAL
    return SumTree._over(capacity, nodes[:, 0]), MinTree._over(capacity, nodes[:, 1]), nodes
