"""Segment trees (sum, min, max) over float64 leaves: validation, state, one kernel per batch.

The prioritized samplers keep one :class:`SumTree` of priorities (to sample proportionally and
to find the leaf under a prefix sum), a :class:`MinTree` (for the largest importance weight) and
sometimes a :class:`MaxTree` (for the priority given to new items).

The layout (a cache-line-wide tree of fan-out 8, leaves first, root last) and the Numba kernels
are in :mod:`rlreplay.sampling.tree_kernels`; this module checks every argument before a kernel
runs, so a rejected call changes nothing. Their private names are re-exported here for the
prioritized sampler and the tests.

Randomness: :meth:`SumTree.sample` draws its uniforms from the ``rng`` it is given, else from a
Generator the tree owns (seeded by ``SumTree(capacity, seed=...)``); the kernels draw nothing.
"""

from __future__ import annotations

import operator
from typing import Any, ClassVar, Self

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
from rlreplay.sampling.tree_kernels import _K as _K
from rlreplay.sampling.tree_kernels import _LANE as _LANE
from rlreplay.sampling.tree_kernels import _MAX as _MAX
from rlreplay.sampling.tree_kernels import _MIN as _MIN
from rlreplay.sampling.tree_kernels import _SHIFT as _SHIFT
from rlreplay.sampling.tree_kernels import _SUM as _SUM
from rlreplay.sampling.tree_kernels import _aligned_full as _aligned_full
from rlreplay.sampling.tree_kernels import _build_kernel as _build_kernel
from rlreplay.sampling.tree_kernels import _find_prefix_sum_kernel as _find_prefix_sum_kernel
from rlreplay.sampling.tree_kernels import _for_kernel as _for_kernel
from rlreplay.sampling.tree_kernels import _groups as _groups
from rlreplay.sampling.tree_kernels import _layout as _layout
from rlreplay.sampling.tree_kernels import _recompute_ancestors as _recompute_ancestors
from rlreplay.sampling.tree_kernels import _recompute_ancestors_pair as _recompute_ancestors_pair
from rlreplay.sampling.tree_kernels import _sample_kernel as _sample_kernel
from rlreplay.sampling.tree_kernels import _set_kernel as _set_kernel

__all__ = ["MaxTree", "MinTree", "SumTree"]

_STATE_VERSION = 1


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
        >>> a, b = SumTree(5, seed=7), SumTree(5, seed=7)  # draws from their own Generators
        >>> a.set([1, 2], 1.0); b.set([1, 2], 1.0)
        >>> bool((a.sample(64) == b.sample(64)).all())
        True
    """

    _OP = _SUM
    _NEUTRAL = 0.0
    _KIND = "sum"

    __slots__ = ("_own_rng", "_seed")

    def __init__(self, capacity: int, *, seed: int | None = None) -> None:
        """Creates a tree whose ``capacity`` leaves all hold 0.

        Args:
            capacity: Number of leaves, any integer ``>= 1``.
            seed: Seed of the Generator :meth:`sample` draws from when it is given no ``rng``
                (``None``: fresh entropy). Not part of :meth:`state_dict`.

        Raises:
            ConfigError: If ``capacity`` is not an integer ``>= 1``, or ``seed`` is neither
                ``None`` nor an integer ``>= 0``.
        """
        super().__init__(capacity)
        self._seed = None if seed is None else _integer_at_least("seed", seed, 0, ConfigError)
        self._own_rng: np.random.Generator | None = None  # made on the first draw that needs it

    @classmethod
    def _over(cls, capacity: int, tree: NDArray[np.float64]) -> Self:
        out = super()._over(capacity, tree)
        out._seed, out._own_rng = None, None
        return out

    @property
    def rng(self) -> np.random.Generator:
        """The Generator :meth:`sample` draws from when it is given none (seeded by ``seed``)."""
        if self._own_rng is None:
            self._own_rng = np.random.default_rng(self._seed)
        return self._own_rng

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
        self, n: int, rng: np.random.Generator | None = None, *, stratified: bool = True
    ) -> NDArray[np.int64]:
        """Draws ``n`` leaf indices, each with probability ``leaf / total``.

        The ``n`` uniforms come from ``rng.random(n)`` (one call), so the draws are a function
        of the Generator's state; without ``rng``, from the tree's own Generator (:attr:`rng`,
        seeded by ``SumTree(capacity, seed=...)``). Stratified (ReAgent's
        ``stratified_sample``): draw ``i`` is uniform in the ``i``-th of ``n`` equal strata of
        ``[0, total)``, which lowers the variance of a batch; the marginal law of each leaf is
        the same either way.

        Args:
            n: Number of draws, ``>= 0``.
            rng: The Generator to draw the uniforms from (default: the tree's own).
            stratified: One draw per stratum if true; ``n`` independent draws otherwise.

        Returns:
            int64 leaf indices of shape ``(n,)``; zero leaves are never returned.

        Raises:
            EmptyBufferError: If ``total`` is 0.
            TypeError: If ``rng`` is not a ``numpy.random.Generator``.
            ValueError: If ``n`` is negative or not an integer.
        """
        if rng is None:
            rng = self.rng
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
