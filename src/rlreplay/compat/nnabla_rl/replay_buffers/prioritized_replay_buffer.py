"""Stand-in for ``nnabla_rl.replay_buffers.prioritized_replay_buffer``, checked against 0.16.0.

nnabla-rl's module (Apache-2.0, Sony Group Corporation) has two prioritized buffers and the
seed's ``PrioritizedReplayBuffer``, which builds one of them by ``variant``:

* :class:`ProportionalPrioritizedReplayBuffer`: a :class:`SumTree` of masses
  ``(|clip(e)| + epsilon) ** alpha`` (new experiences get the largest mass so far, at first
  ``init_max_error`` itself); ``num_samples`` stratified draws ``drng.uniform(i * S / k,
  (i + 1) * S / k)`` down the tree, each drawn again while it lands too close to the newest
  experience for ``num_steps``; weights ``(p_i / p_min) ** -beta`` with ``p_min`` the min
  tree's (``normalization_method="buffer_max"``) or the batch's (``"batch_max"``).
* :class:`RankBasedPrioritizedReplayBuffer`: a :class:`MaxHeap` of ``|clip(e)|`` (new
  experiences enter with ``inf``; the heap is sorted every ``sort_interval`` appends); an
  experience's rank is its heap position + 1. ``num_samples`` segments of heap positions with
  equal mass of ``rank ** -alpha`` (recomputed when ``num_samples`` or ``num_steps`` change,
  when ``len % reset_segment_interval == 0`` below capacity, or when there are none), one
  ``drng.integers`` per segment; a draw too close to the newest experience is dropped and
  replaced by a draw in a random segment. Weights ``(rank_i / len) ** (alpha * beta)``.

Both advance ``beta`` by ``(1 - beta) / betasteps`` (up to 1) in every ``sample_indices``
(which ``sample`` calls), and require ``update_priorities`` between two samples.

Modules: the shared protocol and errors are in :mod:`._prioritized_base`, the rank-based
buffer in :mod:`._rank_based` (both importable from here, as in nnabla-rl). The structures are
this package's :mod:`._prioritized_trees` (nnabla-rl's classes over
Numba kernels, see :mod:`._kernels`); the random numbers are drawn as nnabla-rl draws them
(vectorised where that gives the same stream), so a buffer seeded as nnabla-rl's gives the
same draws. Experiences are stored by the front-end's
:class:`~rlreplay.compat.nnabla_rl.replay_buffer.ReplayBuffer`; the ``t``-th appended one is
in ring slot ``t % capacity``, as in nnabla-rl's ring.

Deliberate differences (fixes of real bugs of nnabla-rl, see docs/migrating/nnabla_rl.md):
``update_priorities`` applies each error to the experience that was sampled (nnabla-rl keeps
relative indices, which point to other experiences once appends have moved the ring; an
experience overwritten since is skipped); a proportional draw that can never succeed (every
experience its slice of the mass reaches is too new for ``num_steps``) raises ``RuntimeError``
where nnabla-rl loops for ever; a proportional buffer of capacity 1 samples (nnabla-rl's
one-leaf ``SumTree`` raises ``UnboundLocalError``).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from rlreplay import ConfigError
from rlreplay.compat.nnabla_rl.replay_buffer import Indices, ReplayBuffer
from rlreplay.compat.nnabla_rl.replay_buffers._prioritized_base import (
    EndlessDrawError,
    NormalizationMethodError,
    NoSamplesError,
    SegmentError,
    _PrioritizedReplayBuffer,
)
from rlreplay.compat.nnabla_rl.replay_buffers._prioritized_trees import (
    MaxHeap,
    MaxHeapDataHolder,
    MinTree,
    SumTree,
    SumTreeDataHolder,
    as_float,
    kind_of,
)
from rlreplay.compat.nnabla_rl.replay_buffers._rank_based import RankBasedPrioritizedReplayBuffer

__all__ = [
    "EndlessDrawError",
    "MaxHeap",
    "MaxHeapDataHolder",
    "MinTree",
    "NoSamplesError",
    "NormalizationMethodError",
    "PrioritizedReplayBuffer",
    "ProportionalPrioritizedReplayBuffer",
    "RankBasedPrioritizedReplayBuffer",
    "SegmentError",
    "SumTree",
    "SumTreeDataHolder",
]

Array = np.ndarray[Any, Any]

# nnabla-rl's module path (repr, pickles): the class is defined in ._rank_based
RankBasedPrioritizedReplayBuffer.__module__ = __name__

#: Failed redraws of one draw before checking whether it can succeed at all.
_TRIES_BEFORE_CHECK = 1000
#: Redraws per call once a slice is known to be reachable (:meth:`_draw_in_blocks`).
_DRAW_BLOCK = 4096


class ProportionalPrioritizedReplayBuffer(_PrioritizedReplayBuffer):
    """nnabla-rl's proportional prioritized replay: ``P(i) ∝ (|clip(e_i)| + epsilon) ** alpha``.

    Args:
        capacity: Most experiences kept (``>= 1``).
        alpha: Prioritization exponent.
        beta: Importance-sampling exponent at the first sample, annealed to 1.
        betasteps: Samples over which ``beta`` reaches 1 (``0`` raises ``ZeroDivisionError``).
        error_clip: ``(lo, hi)`` applied to the TD errors, or None.
        epsilon: Added to every ``|clipped error|``.
        init_max_error: Mass of experiences appended before any larger mass is set (used as
            it is, not raised to ``alpha``, as in nnabla-rl).
        normalization_method: ``"buffer_max"`` (weights divided by the buffer's largest weight;
            a min tree is kept) or ``"batch_max"`` (the batch's).
        seed: Seed of a random generator of the buffer's own (an rlreplay addition); without
            it the buffer draws from nnabla-rl's global ``random.drng``, as nnabla-rl does.

    Raises:
        ValueError: ``capacity`` None or ``< 1``.
        AssertionError: an unknown ``normalization_method``.

    Cost: append O(1) (checks and one copy of the arrays; its leaves, O(log N), are set at
    the next read, in one kernel call for a run of appends); sample O(k log N) (one kernel
    call, redraws aside); update O(k log N).

    Example:
        >>> import numpy as np
        >>> buffer = ProportionalPrioritizedReplayBuffer(capacity=100, seed=0)
        >>> for t in range(10):
        ...     s, s_next = np.full(2, t, np.float32), np.full(2, t + 1, np.float32)
        ...     buffer.append((s, np.zeros(1), 1.0, float(t < 9), s_next, {}))
        >>> experiences, info = buffer.sample(num_samples=4)
        >>> info["weights"].shape, info["weights"].dtype
        ((4, 1), dtype('float64'))
        >>> buffer.update_priorities(np.array([0.5, 0.1, 2.0, 0.0]))
    """

    def __init__(
        self,
        capacity: int,
        alpha: float = 0.6,
        beta: float = 0.4,
        betasteps: int = 10000,
        error_clip: tuple[float, float] | None = (-1, 1),
        epsilon: float = 1e-8,
        init_max_error: float = 1.0,
        normalization_method: str = "buffer_max",
        *,
        seed: int | None = None,
    ) -> None:
        super().__init__(capacity, alpha, beta, betasteps, error_clip, seed)
        if normalization_method not in ("batch_max", "buffer_max"):
            raise NormalizationMethodError(
                f"normalization_method: expected 'batch_max' or 'buffer_max', got "
                f"{normalization_method!r}"
            )
        self._normalization_method = normalization_method
        self._keep_min = normalization_method == "buffer_max"
        self._sum = SumTree(self._slots)
        self._min = MinTree(self._slots if self._keep_min else 1)
        self._tree_synced = 0  # appends whose leaves are set (the newer await _sync_trees)
        self._max_priority = init_max_error
        self._epsilon = epsilon
        self._leaf_order: Array | None = None  # the descent's leaf order, once needed

    def _sync_trees(self) -> None:
        # nnabla-rl sets each new leaf to the top mass at its append; the leaves of a run of
        # appends are set in one kernel call before the trees are next read (the top mass
        # cannot change in between: only update_priorities changes it, and it reads the
        # trees first), so append itself does nothing here
        n = self._appended - self._tree_synced
        if n:
            self._tree_synced = self._appended
            first = self._appended - min(n, self._slots)
            slots = (first + np.arange(min(n, self._slots))) % self._slots
            kind = kind_of(self._max_priority)
            values = np.full(slots.shape[0], as_float(self._max_priority))
            self._sum.update_many(slots, values, kind)
            if self._keep_min:
                self._min.update_many(slots, values, kind)

    @property
    def _sum_tree(self) -> SumTree:
        """The sum tree, every append's leaf set."""
        self._sync_trees()
        return self._sum

    @property
    def _min_tree(self) -> MinTree:
        """The min tree, every append's leaf set."""
        self._sync_trees()
        return self._min

    def sample(self, num_samples: int = 1, num_steps: int = 1) -> tuple[Any, dict[str, Any]]:
        """Sample ``num_samples`` experiences by priority, one per equal slice of the mass.

        Returns:
            ``(experiences, info)``: as :meth:`sample_indices` for the drawn positions.

        Raises:
            ValueError: num_samples exceeds the buffer's length, or is 0 or negative.
            RuntimeError: The buffer holds fewer than num_steps experiences, the previous
                sample's priorities were not updated, or no experience within reach of a
                slice fits num_steps (nnabla-rl draws again for ever).
        """
        num_samples, num_steps = operator.index(num_samples), operator.index(num_steps)
        n = self._check_sizes(num_samples, num_steps)
        if num_samples == 0:
            raise NoSamplesError("num_samples: expected at least 1, got 0 (Indices are empty)")
        if num_samples < 0:
            raise ValueError("Indices are empty")
        limit = n - num_steps + 1  # nnabla-rl keeps a draw once its index < limit
        interval = self._sum_tree.sum() / num_samples
        rng, head = self._rng, self._head()
        state = rng.bit_generator.state
        # interval * i in interval's type (a float32 total gives float32 bounds, as there)
        strata = np.arange(num_samples + 1).astype(np.result_type(interval)) * interval
        queries = rng.uniform(strata[:-1], strata[1:])
        absolute = self._sum_tree.query_many(queries)
        if absolute is not None:
            positions = (absolute - head) % self._slots
            if (positions < limit).all():
                return self.sample_indices(positions, num_steps)
        rng.bit_generator.state = state  # replay nnabla-rl's draw-by-draw loop exactly
        try:
            drawn = self._draw_one_by_one(num_samples, interval, limit)
        except EndlessDrawError:
            rng.bit_generator.state = state  # (nnabla-rl would draw for ever): nothing drawn
            raise
        return self.sample_indices(drawn, num_steps)

    def _draw_one_by_one(self, k: int, interval: float, limit: int) -> list[int]:
        """nnabla-rl's loop: per slice, draw until the index is below ``limit``.

        Past :data:`_TRIES_BEFORE_CHECK` failures (the slice is then known to be reachable,
        and stays so: nothing changes the tree during a draw) the redraws go in blocks
        (:meth:`_draw_in_blocks`), with the same values and the same end state.
        """
        rng, head, tree = self._rng, self._head(), self._sum_tree
        indices = []
        for i in range(k):
            tries = 0
            while True:
                query = rng.uniform(interval * i, interval * (i + 1))
                index = (tree.get_absolute_index_from_query(query) - head) % self._slots
                if index < limit:
                    break
                tries += 1
                # an all-zero tree sends every query to one leaf: known at the first failure
                if (tries == 1 and interval == 0.0) or tries % _TRIES_BEFORE_CHECK == 0:
                    self._check_reachable(interval * i, interval * (i + 1), limit)
                    if tries == _TRIES_BEFORE_CHECK:
                        index = self._draw_in_blocks(interval * i, interval * (i + 1), limit)
                        break
            indices.append(index)
        return indices

    def _draw_in_blocks(self, lo: float, hi: float, limit: int) -> int:
        """The rest of nnabla-rl's redraw loop for one slice, ``_DRAW_BLOCK`` draws a call.

        ``rng.uniform(lo, hi, size=m)`` gives the values of ``m`` calls ``rng.uniform(lo,
        hi)`` (one double each), and the tree's vectorised descent treats them as the Python
        floats those calls return. The block is drawn from a saved state; once its first
        draw that ends the loop is known, the state is put back and exactly the draws up to
        it are made again, so the generator ends where the one-by-one loop ends it. A query
        out of the tree's range raises where the loop raises.
        """
        rng, head, tree = self._rng, self._head(), self._sum_tree
        while True:
            state = rng.bit_generator.state
            queries = rng.uniform(lo, hi, size=_DRAW_BLOCK)
            absolute = np.empty(_DRAW_BLOCK, np.int64)
            tree.query_many_into(queries, absolute)
            ends = np.flatnonzero((absolute < 0) | ((absolute - head) % self._slots < limit))
            if ends.shape[0] == 0:
                continue
            j = int(ends[0])
            rng.bit_generator.state = state
            rng.uniform(lo, hi, size=j + 1)  # the draws the loop made, no more
            if absolute[j] < 0:  # out of range: the loop's call raises
                tree.get_absolute_index_from_query(float(queries[j]))
            return int((absolute[j] - head) % self._slots)

    def _check_reachable(self, lo: float, hi: float, limit: int) -> None:
        """Raise if no query in ``[lo, hi]`` reaches a position below ``limit``.

        The descent maps the query range onto the leaves in its own (in-order) leaf order,
        leaf ``j`` taking the queries in ``[c_j, c_j + m_j)`` (``c`` the prefix sums in that
        order); an all-zero tree maps every query (all 0) to one leaf.
        """
        tree, cap = self._sum_tree, self._slots
        if lo == hi:
            reachable: Array = np.array([tree.get_absolute_index_from_query(lo)])
        else:
            if self._leaf_order is None:
                self._leaf_order = _in_order_leaves(cap)
            order = self._leaf_order
            masses = tree.values(order)
            starts = np.concatenate(([0.0], np.cumsum(masses)[:-1]))
            reachable = order[(masses > 0) & (starts < hi) & (starts + masses > lo)]
        if not (((reachable - self._head()) % cap) < limit).any():
            raise EndlessDrawError(
                f"sample: every experience a draw in [{lo}, {hi}] of the total priority can "
                f"reach is among the newest (position >= {limit}, too close for num_steps); "
                "nnabla-rl would draw again for ever. Update priorities or sample fewer steps"
            )

    def _get_weights(self, slots: Array) -> Array:
        # nnabla-rl's np.asarray of the leaf objects: float32 when all are np.float32
        priorities = self._sum_tree.leaves(slots)[:, np.newaxis]
        if self._normalization_method == "batch_max":
            min_priority = priorities.min()
        else:
            min_priority = self._min_tree.min()
        # a zero mass (epsilon=0) makes NaN/inf weights with NumPy's RuntimeWarning, as there
        weights: Array = (priorities / min_priority) ** (-self._beta)
        return weights

    def update_priorities(self, errors: Any) -> None:
        """Set the priorities of the last sampled experiences from their TD errors.

        ``mass = (|clip(error)| + epsilon) ** alpha``, computed in the errors' dtype as
        nnabla-rl computes it, paired with the sampled experiences in order (``zip``: extra
        errors or extra experiences are left out); an experience overwritten since the sample
        is skipped. The top mass, given to new experiences, follows Python's ``max``.

        Raises:
            TypeError: Nothing was sampled since the last update.
        """
        masses = ((self._preprocess_errors(errors) + self._epsilon) ** self._alpha).flatten()
        slots = self._pending()  # after the masses, as nnabla-rl (its errors come first)
        k = min(slots.shape[0], masses.shape[0])
        slots, values = slots[:k], masses[:k]
        live = slots >= 0
        values = values[live]  # in the masses' dtype: the trees keep each node's type
        self._sum_tree.update_many(slots[live], values)
        if self._keep_min:
            self._min_tree.update_many(slots[live], values)
        top = self._max_priority
        for v in values[values > top]:  # Python's max of the objects: a NaN never wins
            top = max(top, v)
        self._max_priority = top
        self._last_sampled = None


def _in_order_leaves(capacity: int) -> Array:
    """Absolute indices of nnabla-rl's tree leaves in the order its descent meets them."""
    out: list[int] = []
    stack: list[int] = []
    i = 0
    while stack or i < 2 * capacity - 1:
        while i < 2 * capacity - 1:
            stack.append(i)
            i = 2 * i + 1 if i < capacity - 1 else 2 * capacity - 1
        i = stack.pop()
        if i >= capacity - 1:
            out.append(i - (capacity - 1))
        i = 2 * i + 2 if i < capacity - 1 else 2 * capacity - 1
    return np.array(out, np.int64)


class PrioritizedReplayBuffer(ReplayBuffer):
    """nnabla-rl's ``PrioritizedReplayBuffer``: one of the two buffers, by ``variant``.

    ``variant="proportional"`` builds :class:`ProportionalPrioritizedReplayBuffer` (with
    ``epsilon``) and ``"rank_based"`` :class:`RankBasedPrioritizedReplayBuffer` (with
    ``reset_segment_interval`` and ``sort_interval``); every method is the built buffer's.

    Raises:
        ValueError: ``capacity`` None or ``< 1``, or an unknown ``variant``.

    Example:
        >>> import numpy as np
        >>> buffer = PrioritizedReplayBuffer(capacity=100, seed=0)
        >>> for t in range(10):
        ...     s, s_next = np.full(2, t, np.float32), np.full(2, t + 1, np.float32)
        ...     buffer.append((s, np.zeros(1), 1.0, float(t < 9), s_next, {}))
        >>> experiences, info = buffer.sample(num_samples=4)
        >>> info["weights"].shape
        (4, 1)
        >>> buffer.update_priorities(np.array([0.5, 0.1, 2.0, 0.0]))
    """

    _buffer_impl: _PrioritizedReplayBuffer

    def __init__(
        self,
        capacity: int,
        alpha: float = 0.6,
        beta: float = 0.4,
        betasteps: int = 10000,
        error_clip: tuple[float, float] | None = (-1, 1),
        epsilon: float = 1e-8,
        reset_segment_interval: int = 1000,
        sort_interval: int = 1000000,
        variant: str = "proportional",
        *,
        seed: int | None = None,
    ) -> None:
        # no base __init__, as nnabla-rl's: the built buffer holds everything
        if variant not in ("proportional", "rank_based"):
            raise ConfigError(f"Unknown prioritized replay buffer variant: {variant}")
        if variant == "proportional":
            self._buffer_impl = ProportionalPrioritizedReplayBuffer(
                capacity, alpha, beta, betasteps, error_clip, epsilon, seed=seed
            )
        else:
            self._buffer_impl = RankBasedPrioritizedReplayBuffer(
                capacity, alpha, beta, betasteps, error_clip, reset_segment_interval,
                sort_interval, seed=seed,
            )  # fmt: skip

    @property
    def capacity(self) -> int | None:
        return self._buffer_impl.capacity

    def append(self, experience: Any) -> None:
        self._buffer_impl.append(experience)

    def append_all(self, experiences: Sequence[Any]) -> None:
        self._buffer_impl.append_all(experiences)

    def sample(self, num_samples: int = 1, num_steps: int = 1) -> tuple[Any, dict[str, Any]]:
        return self._buffer_impl.sample(num_samples, num_steps)

    def sample_indices(self, indices: Indices, num_steps: int = 1) -> tuple[Any, dict[str, Any]]:
        return self._buffer_impl.sample_indices(indices, num_steps)

    def update_priorities(self, errors: Any) -> None:
        self._buffer_impl.update_priorities(errors)

    def __len__(self) -> int:
        return len(self._buffer_impl)

    def __getitem__(self, item: int) -> Any:
        return self._buffer_impl[item]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(capacity={self.capacity}, len={len(self)})"
