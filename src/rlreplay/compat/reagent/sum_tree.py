"""Stand-in for ``reagent.replay_memory.sum_tree``: ReAgent's ``SumTree`` over the core's tree.

ReAgent's (and Dopamine's) sum tree keeps a list of per-level NumPy arrays and adjusts every
ancestor by a delta on each ``set``. This adapter keeps one :class:`rlreplay.SumTree` (flat
float64 array, every parent recomputed from its children, so no drift) and answers ReAgent's
API on top of it: ``get``, ``set``, ``sample(query_value)``, ``stratified_sample`` and the
``nodes`` levels, ``max_recorded_priority``. Query values are fractions of the total, drawn
from Python's :mod:`random` as ReAgent does (so ``random.seed`` makes draws reproducible).
"""

from __future__ import annotations

import functools
import math
import operator
import random
from typing import Any

import numpy as np

from rlreplay import CheckpointError, ConfigError, EmptyBufferError, PriorityError
from rlreplay import SumTree as _CoreSumTree
from rlreplay.compat.reagent._errors import (
    ConfigAssertionError,
    IndexAssertionError,
    SlotRangeError,
)

__all__ = ["SumTree"]

Array = np.ndarray[Any, Any]


@functools.lru_cache(maxsize=8)
def strata(batch_size: int) -> tuple[float, ...]:
    """The bounds of ``batch_size`` equal strata of ``[0, 1]``: ``np.linspace(0, 1, B + 1)``
    as Python floats (``random.uniform`` of two of them computes what it computes of the
    NumPy values: the same float64 operations)."""
    out: tuple[float, ...] = tuple(np.linspace(0.0, 1.0, batch_size + 1).tolist())
    return out


class SumTree:
    """A sum tree of non-negative priorities: proportional sampling in ``O(log capacity)``.

    Leaves hold priorities; every internal node holds the sum of the leaves below it. For
    ``capacity = 4`` with leaves ``0.5, 1, 0.5, 0.5`` the levels are::

        nodes = [[2.5], [1.5, 1.0], [0.5, 1.0, 0.5, 0.5]]

    Levels are allocated as powers of two; leaves past ``capacity`` are 0 and never drawn.

    Invariants: every leaf is finite and ``>= 0``; every node is exactly the float64 sum of its
    two children (recomputed, never adjusted by a delta). ``max_recorded_priority`` is the
    largest value ever :meth:`set` (1.0 before any), as in ReAgent.

    Cost: ``set``/``sample`` ``O(log capacity)``; ``stratified_sample(B)`` ``O(B log capacity)``;
    ``nodes`` builds the levels afresh, ``O(capacity)`` (it is for inspection).

    Args:
        capacity: Number of leaves, an int ``>= 1``.

    Raises:
        AssertionError: ``capacity`` is not an int, as ReAgent asserts (also a
            :class:`rlreplay.ConfigError`).
        ValueError: ``capacity`` is not positive (:class:`rlreplay.ConfigError`).

    Example:
        >>> from rlreplay.compat.reagent.sum_tree import SumTree
        >>> tree = SumTree(4)
        >>> for i, p in enumerate([0.5, 1.0, 0.5, 0.5]):
        ...     tree.set(i, p)
        >>> [level.tolist() for level in tree.nodes]
        [[2.5], [1.5, 1.0], [0.5, 1.0, 0.5, 0.5]]
        >>> tree.sample(query_value=0.3)
        1
    """

    def __init__(self, capacity: int) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int | np.integer):
            # ReAgent: assert isinstance(capacity, int)
            raise ConfigAssertionError(f"Sum tree capacity should be an int. Got: {capacity!r}")
        if capacity <= 0:
            raise ConfigError(f"Sum tree capacity should be positive. Got: {capacity}")
        self._tree = _CoreSumTree(int(capacity))
        self.max_recorded_priority = 1.0

    @property
    def capacity(self) -> int:
        """Number of leaves."""
        return self._tree.capacity

    @property
    def nodes(self) -> list[Array]:
        """The tree level by level, root first, as ReAgent's ``nodes`` (fresh float64 copies).

        Level ``d`` has ``2**d`` entries; the last level holds the leaves padded with zeros to
        a power of two. Writing into these arrays does not change the tree: use :meth:`set`.
        """
        size = self._leaf_count()
        leaves = np.zeros(size, np.float64)
        leaves[: self.capacity] = self._tree.get(np.arange(self.capacity))
        # Pairwise sums bottom-up: the core computes each parent as left + right, so these are
        # bit-identical to the nodes it holds.
        levels = [leaves]
        while levels[0].shape[0] > 1:
            below = levels[0]
            levels.insert(0, below[0::2] + below[1::2])
        return levels

    def __getstate__(self) -> dict[str, Any]:
        """ReAgent's pickled state: ``{"nodes": levels, "max_recorded_priority": float}``."""
        return {"nodes": self.nodes, "max_recorded_priority": float(self.max_recorded_priority)}

    def __setstate__(self, state: Any) -> None:
        """Take the state a pickled ReAgent (or Dopamine) ``SumTree`` holds.

        Only the leaves (the last level) are read; the sums above them are recomputed. The
        capacity becomes the number of leaves (a power of two in ReAgent's trees; its padding
        leaves are 0, so draws are unchanged).

        Raises:
            rlreplay.CheckpointError: Not a dict with ``nodes`` (levels of ``1, 2, 4, ...``
                finite values ``>= 0``) and a finite ``max_recorded_priority``.
        """
        if not isinstance(state, dict) or not isinstance(state.get("nodes"), list | tuple):
            raise CheckpointError(
                f"SumTree state: expected a dict with 'nodes', got {state!r:.200}"
            )
        levels = state["nodes"]
        sizes = [np.shape(level) for level in levels]
        if not levels or sizes != [(1 << d,) for d in range(len(levels))]:
            raise CheckpointError(
                f"SumTree state: expected levels of 1, 2, 4, ... nodes, got {sizes}"
            )
        try:
            leaves = np.asarray(levels[-1], np.float64)
            top = float(state.get("max_recorded_priority", 1.0))
        except (TypeError, ValueError) as exc:
            raise CheckpointError(f"SumTree state: non-numeric values ({exc})") from None
        if not (np.isfinite(leaves).all() and (leaves >= 0).all() and math.isfinite(top)):
            raise CheckpointError("SumTree state: values must be finite and >= 0")
        self._fill(leaves, top)

    @classmethod
    def _from_leaves(cls, leaves: Array, max_recorded_priority: float) -> SumTree:
        """A tree of ``len(leaves)`` leaves holding ``leaves`` (finite, ``>= 0``)."""
        tree = cls.__new__(cls)
        tree._fill(np.asarray(leaves, np.float64), float(max_recorded_priority))
        return tree

    def _fill(self, leaves: Array, max_recorded_priority: float) -> None:
        self._tree = _CoreSumTree(int(leaves.size))
        self._tree.set(np.arange(leaves.size), leaves)
        self.max_recorded_priority = max_recorded_priority

    def _total_priority(self) -> float:
        """The value at the root: the sum of all leaves."""
        return self._tree.total

    def sample(self, query_value: float | None = None) -> int:
        """Samples an element: leaf ``i`` with probability ``p_i / sum_j p_j``.

        Args:
            query_value: A fraction in ``[0, 1]`` of the total: the leaf returned is the first
                whose running sum exceeds ``query_value * total``. ``None`` draws it from
                ``random.random()`` in ``[0, 1)``.

        Returns:
            The index of a leaf with a value ``> 0``.

        Raises:
            Exception: The tree is empty (its values sum to 0): an
                :class:`rlreplay.EmptyBufferError`, which is a ``ValueError``.
            ValueError: ``query_value`` lies outside ``[0, 1]``, i.e. beyond the total sum.
        """
        total = self._check_not_empty()
        if query_value is None:
            query_value = random.random()
        elif not 0.0 <= query_value <= 1.0:  # also refuses NaN
            raise ValueError(
                f"query_value must be in [0, 1] (a fraction of the total sum {total}); "
                f"got {query_value!r}"
            )
        # q <= 1 so q * total <= total exactly; at q == 1 the core returns the last non-zero
        # leaf (ReAgent's walk can end on a zero padding leaf there).
        return int(self._tree.find_prefix_sum(np.array([query_value * total]))[0])

    def stratified_sample(self, batch_size: int) -> list[int]:
        """Draws one element from each of ``batch_size`` equal strata of ``[0, total)``.

        Stratum ``i`` is ``[i / B, (i + 1) / B)`` of the total (Schaul et al., 2015); its query
        value is ``random.uniform`` over it, as in ReAgent.

        Args:
            batch_size: The number of strata ``B``.

        Returns:
            ``batch_size`` leaf indices, in stratum order.

        Raises:
            Exception: The tree is empty (:class:`rlreplay.EmptyBufferError`).
        """
        out: list[int] = self._stratified(operator.index(batch_size)).tolist()
        return out

    def _stratified(self, batch_size: int) -> Array:
        """:meth:`stratified_sample` as an int64 array (the same ``random`` calls)."""
        total = self._check_not_empty()
        bounds = strata(batch_size)
        queries = np.array(
            [random.uniform(bounds[i], bounds[i + 1]) for i in range(batch_size)], np.float64
        )
        masses = np.minimum(queries * total, total)
        return np.asarray(self._tree.find_prefix_sum(masses), np.int64)

    def get(self, node_index: int) -> float:
        """Returns the value of leaf ``node_index`` (a ``np.float64``, as ReAgent's level array).

        The index reads the leaf level as ReAgent's ``nodes[-1][node_index]`` does: a negative
        one counts back from its end, and the padding leaves past ``capacity`` read 0.

        Raises:
            IndexError: ``node_index`` is not an int or lies outside ``[-leaves, leaves)``
                (also a :class:`rlreplay.InvalidIdError`).
        """
        i = self._leaf(node_index) % self._leaf_count()
        if i >= self.capacity:
            return np.float64(0.0)
        return np.float64(self._tree.get(np.array([i]))[0])

    def set(self, node_index: int, value: float) -> None:
        """Sets leaf ``node_index`` to ``value`` and updates its ancestors, ``O(log capacity)``.

        Args:
            node_index: The leaf to update, in ``[0, capacity)``.
            value: A finite priority ``>= 0``; 0 means the element is never sampled.

        Raises:
            ValueError: ``value`` is negative (or NaN/infinite) (:class:`rlreplay.PriorityError`).
            IndexError: ``node_index`` lies outside the leaf level, as in ReAgent, or on a
                padding leaf past ``capacity`` (ReAgent writes it, then draws that missing
                element: deliberate difference 6).
            AssertionError: A negative ``node_index``: ReAgent's walk up the tree ends at
                ``-1`` and it asserts ("Sum tree traversal failed"), after writing; here
                before anything changes. Both also :class:`rlreplay.InvalidIdError`.
        """
        value = float(value)
        if not (math.isfinite(value) and value >= 0.0):
            raise PriorityError(f"Sum tree values should be nonnegative. Got {value}")
        i = self._leaf(node_index)
        if i < 0:
            raise IndexAssertionError(
                f"Sum tree traversal failed, final node index is not 0 (node_index={i})."
            )
        if i >= self.capacity:
            raise SlotRangeError(
                f"node_index {i} is a padding leaf past capacity {self.capacity}: it would be "
                "drawn as an element that does not exist"
            )
        self._tree.set(np.array([i]), np.array([value]))
        self.max_recorded_priority = max(value, self.max_recorded_priority)

    def _leaf_count(self) -> int:
        """Leaves of ReAgent's level array: the power of two ``>= capacity``."""
        return 1 << (self.capacity - 1).bit_length()

    def _leaf(self, node_index: Any) -> int:
        """``node_index`` as NumPy reads ``nodes[-1][node_index]``: in ``[-leaves, leaves)``."""
        leaves = self._leaf_count()
        try:
            i = operator.index(node_index)
        except TypeError:
            raise SlotRangeError(
                f"node_index: only integers index the leaves, got {node_index!r}"
            ) from None
        if not -leaves <= i < leaves:
            raise SlotRangeError(f"index {i} is out of bounds for axis 0 with size {leaves}")
        return i

    def _set_many(self, indices: Array, values: Array) -> None:
        """Set leaves ``indices`` to ``values`` (checked by the caller); the last duplicate wins.

        Unlike :meth:`set` it leaves ``max_recorded_priority`` alone (the buffer keeps its own).
        """
        self._tree.set(np.asarray(indices, np.int64), np.asarray(values, np.float64))

    def _leaves(self, indices: Array) -> Array:
        """The values of leaves ``indices`` (float64; checked by the caller)."""
        return np.asarray(self._tree.get(np.asarray(indices, np.int64)), np.float64)

    def _check_not_empty(self) -> float:
        total = self._tree.total
        if not total > 0.0 or not math.isfinite(total):
            raise EmptyBufferError("Cannot sample from an empty sum tree (all values are 0).")
        return total

    def __repr__(self) -> str:
        return f"SumTree(capacity={self.capacity}, total={self._tree.total!r})"
