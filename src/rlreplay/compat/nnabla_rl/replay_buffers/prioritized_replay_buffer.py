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

The structures are this package's :mod:`._prioritized_trees` (nnabla-rl's classes over
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

import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from rlreplay.compat.nnabla_rl.replay_buffer import Indices, ReplayBuffer
from rlreplay.compat.nnabla_rl.replay_buffers._prioritized_trees import (
    MaxHeap,
    MaxHeapDataHolder,
    MinTree,
    SumTree,
    SumTreeDataHolder,
)
from rlreplay.errors import ConfigError, ReplayError

__all__ = [
    "MaxHeap",
    "MaxHeapDataHolder",
    "MinTree",
    "PrioritizedReplayBuffer",
    "ProportionalPrioritizedReplayBuffer",
    "RankBasedPrioritizedReplayBuffer",
    "SumTree",
    "SumTreeDataHolder",
]

Array = np.ndarray[Any, Any]

#: Failed redraws of one draw before checking whether it can succeed at all.
_TRIES_BEFORE_CHECK = 1000


class NormalizationMethodError(ConfigError, AssertionError):
    """nnabla-rl's ``assert normalization_method in ("batch_max", "buffer_max")``."""


class SegmentError(ReplayError, AssertionError):
    """nnabla-rl's ``assert len(boundaries) == k`` in the rank-based segment computation."""


class NoSamplesError(ReplayError, ValueError, ZeroDivisionError):
    """``num_samples=0``: nnabla-rl divides by it (``ZeroDivisionError``) or, once the total
    priority is a NumPy float, samples nothing (``ValueError: Indices are empty``)."""


class EndlessDrawError(ReplayError, RuntimeError):
    """A draw nnabla-rl would repeat for ever (no reachable experience fits ``num_steps``)."""


class _PrioritizedReplayBuffer(ReplayBuffer):
    """nnabla-rl's ``_PrioritizedReplayBuffer``: the protocol both prioritized buffers share.

    Each :meth:`sample` or :meth:`sample_indices` must be followed by
    :meth:`update_priorities` with the TD errors of the returned experiences before the next
    one (``RuntimeError`` otherwise).
    """

    def __init__(
        self,
        capacity: int,
        alpha: float,
        beta: float,
        betasteps: int,
        error_clip: tuple[float, float] | None,
        seed: int | None,
    ) -> None:
        if capacity is None or capacity <= 0:
            raise ConfigError("buffer size must be greater than 0")
        super().__init__(capacity=operator.index(capacity), seed=seed)
        self._slots = operator.index(capacity)
        self._alpha = alpha
        self._beta = beta
        self._beta_diff = (1.0 - beta) / betasteps  # betasteps=0: ZeroDivisionError, as there
        self._error_clip = error_clip
        self._appended = 0  # experiences appended so far: the t-th is in slot t % capacity
        self._last_sampled: Array | None = None  # append numbers awaiting update_priorities

    # ------------------------------------------------------------------ writing
    def append(self, experience: Any) -> None:
        """Add new experience to the replay buffer, with the top priority.

        Notes:
            If the replay buffer size is full, the oldest (head of the buffer) experience will
            be dropped off and the given experience will be added to the tail of the buffer.
        """
        super().append(experience)
        self._appended += 1
        self._on_append()

    def append_all(self, experiences: Sequence[Any]) -> None:
        """Add list of experiences to the replay buffer (each as :meth:`append`)."""
        for experience in experiences:
            self.append(experience)

    def _on_append(self) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------ sampling
    def _first(self) -> int:
        """Append number of position 0 (the oldest stored experience)."""
        return self._appended - len(self)

    def _head(self) -> int:
        """Ring slot of position 0 (nnabla-rl's ``RingBuffer._head``)."""
        return self._first() % self._slots

    def _check_updated(self) -> None:
        if self._last_sampled is not None:
            raise RuntimeError(
                "Trying to sample data from buffer without updating priority. "
                "Check that the algorithm supports prioritized replay buffer."
            )

    def _check_sizes(self, num_samples: int, num_steps: int) -> int:
        n = len(self)
        if num_samples > n:
            raise ValueError(f"num_samples: {num_samples} is greater than the size of buffer: {n}")
        if n - num_steps < 0:
            raise RuntimeError(f"Insufficient buffer length. buffer: {n} < steps: {num_steps}")
        self._check_updated()
        return n

    def sample_indices(self, indices: Indices, num_steps: int = 1) -> tuple[Any, dict[str, Any]]:
        """Sample experiences for given indices, with their importance weights.

        As nnabla-rl: the weights use the current ``beta``, which then advances; with
        ``num_steps < 1`` the experiences are an empty tuple.

        Returns:
            ``(experiences, info)`` as the base buffer's, ``info["weights"]`` of shape
            ``(len(indices), 1)`` and nnabla-rl's dtype (proportional: float32 when every
            sampled mass and the normalising one are ``np.float32``s, else float64).

        Raises:
            ValueError: If indices are empty.
            RuntimeError: The previous sample's priorities were not updated.
            KeyError: A position outside ``[0, len)``.
        """
        if len(indices) == 0:
            raise ValueError("Indices are empty")
        self._check_updated()
        num_steps = operator.index(num_steps)
        positions = np.asarray(indices).astype(np.int64).reshape(-1)
        experiences: Any = ()
        if num_steps >= 1:
            experiences, _ = ReplayBuffer.sample_indices(self, positions, num_steps=num_steps)
        weights = self._get_weights((positions + self._head()) % self._slots)
        self._beta = min(self._beta + self._beta_diff, 1.0)
        self._last_sampled = self._first() + positions
        return experiences, {"weights": weights}

    def _get_weights(self, slots: Array) -> Array:
        raise NotImplementedError

    # ------------------------------------------------------------------ priorities
    def _preprocess_errors(self, errors: Any) -> Array:
        if self._error_clip is not None:
            errors = np.clip(errors, self._error_clip[0], self._error_clip[1])
        out: Array = np.abs(errors)
        return out

    def _pending(self) -> Array:
        """Slots of the last sampled experiences (-1: overwritten since), then forgotten.

        Raises:
            TypeError: Nothing was sampled since the last update (nnabla-rl zips None).
        """
        last = self._last_sampled
        if last is None:
            raise TypeError(
                "update_priorities: no sampled experiences await new priorities (nnabla-rl "
                "zips the errors with None here); call sample or sample_indices first"
            )
        slots: Array = np.where(last < self._first(), -1, last % self._slots)
        return slots

    def update_priorities(self, errors: Any) -> None:
        raise NotImplementedError


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

    Cost: append O(log N); sample O(k log N) (one kernel call, redraws aside); update
    O(k log N).

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
        self._sum_tree = SumTree(self._slots)
        self._min_tree = MinTree(self._slots if self._keep_min else 1)
        self._max_priority = init_max_error
        self._epsilon = epsilon
        self._leaf_order: Array | None = None  # the descent's leaf order, once needed

    def _on_append(self) -> None:
        slot = (self._appended - 1) % self._slots
        self._sum_tree.update(slot, self._max_priority)
        if self._keep_min:
            self._min_tree.update(slot, self._max_priority)

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
        return self.sample_indices(self._draw_one_by_one(num_samples, interval, limit), num_steps)

    def _draw_one_by_one(self, k: int, interval: float, limit: int) -> list[int]:
        """nnabla-rl's loop: per slice, draw until the index is below ``limit``."""
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
            indices.append(index)
        return indices

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
        slots = self._pending()
        masses = ((self._preprocess_errors(errors) + self._epsilon) ** self._alpha).flatten()
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


class RankBasedPrioritizedReplayBuffer(_PrioritizedReplayBuffer):
    """nnabla-rl's rank-based prioritized replay: ``P(rank) ∝ rank ** -alpha`` over heap ranks.

    The rank of an experience is its position in a max-heap of ``|clip(error)|`` plus one
    (new experiences enter with ``inf``); the heap is sorted (ranks exact) every
    ``sort_interval`` appends. Draws: one uniform heap position per segment of equal rank
    mass, the segments computed for the buffer's length when ``num_samples`` or
    ``num_steps`` change, when ``len % reset_segment_interval == 0`` (below capacity) or at the
    first sample, and kept otherwise (positions past the length they were computed for are
    then not drawn, as in nnabla-rl).

    Args:
        capacity: Most experiences kept (``>= 1``).
        alpha: Exponent of the rank law.
        beta: Importance-sampling exponent at the first sample, annealed to 1.
        betasteps: Samples over which ``beta`` reaches 1 (``0`` raises ``ZeroDivisionError``).
        error_clip: ``(lo, hi)`` applied to the TD errors, or None.
        reset_segment_interval: Buffer lengths (multiples of it) at which segments are redone.
        sort_interval: Appends between two sorts of the heap.
        seed: Seed of a random generator of the buffer's own (an rlreplay addition); without
            it the buffer draws from nnabla-rl's global ``random.drng``, as nnabla-rl does.

    Cost: append O(log N) (O(N log N) when it sorts); sample O(k) plus O(N) when the
    segments are redone; update O(k log N).

    Example:
        >>> import numpy as np
        >>> buffer = RankBasedPrioritizedReplayBuffer(capacity=10, seed=0)
        >>> buffer.append_all([(np.zeros(1), 0, 0.0, 1.0, np.zeros(1), {})] * 4)
        >>> _, info = buffer.sample(num_samples=2)
        >>> info["weights"].shape
        (2, 1)
        >>> buffer.update_priorities([0.1, 0.2])
    """

    def __init__(
        self,
        capacity: int,
        alpha: float = 0.7,
        beta: float = 0.5,
        betasteps: int = 10000,
        error_clip: tuple[float, float] | None = (-1, 1),
        reset_segment_interval: int = 1000,
        sort_interval: int = 1000000,
        *,
        seed: int | None = None,
    ) -> None:
        super().__init__(capacity, alpha, beta, betasteps, error_clip, seed)
        self._max_heap = MaxHeap(self._slots)
        self._reset_segment_interval = reset_segment_interval
        self._sort_interval = sort_interval
        self._boundaries: Array = np.zeros(0, np.int64)
        self._prev_num_samples = 0
        self._prev_num_steps = 0
        self._appends_since_prev_sort = 0
        # Python's float power, as nnabla-rl computes it (NumPy's can differ in the last bit)
        powers = ((1 / (i + 1)) ** alpha for i in range(self._slots))
        self._ps_cumsum: Array = np.cumsum(np.fromiter(powers, np.float64, self._slots))

    def _on_append(self) -> None:
        self._max_heap.append(math.inf)
        self._appends_since_prev_sort += 1
        if self._appends_since_prev_sort % self._sort_interval == 0:
            self._max_heap.sort_data()
            self._appends_since_prev_sort = 0

    def sample(self, num_samples: int = 1, num_steps: int = 1) -> tuple[Any, dict[str, Any]]:
        """Sample ``num_samples`` experiences, one per rank segment.

        Returns:
            ``(experiences, info)``: as :meth:`sample_indices` for the drawn positions.

        Raises:
            ValueError: num_samples exceeds the buffer's length.
            RuntimeError: The buffer holds fewer than num_steps experiences, or the previous
                sample's priorities were not updated.
            ZeroDivisionError: num_samples is 0 (as nnabla-rl's segment computation).
            AssertionError: The segments cannot be split as asked (nnabla-rl's assert).
        """
        num_samples, num_steps = operator.index(num_samples), operator.index(num_steps)
        n = self._check_sizes(num_samples, num_steps)
        if (
            (num_samples != self._prev_num_samples)
            or (num_steps != self._prev_num_steps)
            or (n % self._reset_segment_interval == 0 and n != self._slots)
            or (len(self._boundaries) == 0)
        ):
            self._boundaries = self._compute_segment_boundaries(N=n, k=num_samples)
            self._prev_num_samples = num_samples
            self._prev_num_steps = num_steps
        limit, rng, b = n - num_steps + 1, self._rng, self._boundaries
        if b.shape[0] == 0:
            return self.sample_indices([], num_steps)
        lows = np.concatenate(([0], b[:-1]))
        positions = self._positions_at(rng.integers(low=lows, high=b))
        indices = positions[positions < limit].tolist()
        while len(indices) < num_samples:
            # nnabla-rl: only when num_steps > 1 and draws were too new; one random segment.
            # This ends: the segments reach the N0 >= num_steps heap positions of the length
            # N0 they were computed for, at most num_steps - 1 experiences are too new.
            boundary_index = int(rng.choice(len(b)))
            low = int(b[boundary_index - 1]) if boundary_index != 0 else 0
            heap_index = rng.integers(low=low, high=int(b[boundary_index]))
            index = int(self._positions_at(np.array([heap_index]))[0])
            if index < limit:
                indices.append(index)
        return self.sample_indices(indices, num_steps)

    def _positions_at(self, heap_indices: Array) -> Array:
        """Relative positions of the experiences at ``heap_indices``."""
        absolute = self._max_heap.absolute_indices(heap_indices)
        return (absolute - self._head()) % self._slots

    def _compute_segment_boundaries(self, N: int, k: int) -> Array:
        """nnabla-rl's boundaries: heap index ``i + 1`` closes a segment when the next of
        the thresholds ``j / k`` is ``<= cumsum[i] / cumsum[N - 1]``, at most one per ``i``.

        Vectorised: with ``c_i`` the number of thresholds ``<= r_i`` (non-decreasing), the
        count after ``i`` is ``b_i = min(b_{i-1} + 1, c_i)``, i.e. ``i + min(1, min_{m <= i}
        (c_m - m))``; a boundary closes wherever the count grows.
        """
        if k > N:
            raise ValueError(f"Batch size {k} is greater than buffer size {N}")
        idx = np.arange(N)
        if k > 0:
            ratios = self._ps_cumsum[:N] / self._ps_cumsum[N - 1]
            thresholds = np.arange(1, k + 1) / k  # (len(boundaries) + 1) / k, as Python divides
            c = np.searchsorted(thresholds, ratios, side="right")
            counts = idx + np.minimum(1, np.minimum.accumulate(c - idx)) if N else idx
            boundaries = np.flatnonzero(np.diff(counts, prepend=0)) + 1
        elif N == 0:
            boundaries = idx
        elif k == 0:
            raise ZeroDivisionError("division by zero: num_samples=0 segments")
        else:  # a negative k: every threshold passes, one boundary per heap index
            boundaries = idx + 1
        if len(boundaries) != k:
            raise SegmentError(
                f"segment boundaries: expected {k} segments of {N} ranks, got "
                f"{len(boundaries)} (nnabla-rl's assert len(boundaries) == k)"
            )
        return boundaries.astype(np.int64)

    def _get_weights(self, slots: Array) -> Array:
        heap_indices = self._max_heap.heap_indices(slots).tolist()
        alpha = self._alpha
        priorities = np.asarray([(1 / (h + 1)) ** alpha for h in heap_indices])[:, np.newaxis]
        min_priority = (1 / len(self._max_heap)) ** alpha
        weights: Array = (priorities / min_priority) ** (-self._beta)
        return weights

    def update_priorities(self, errors: Any) -> None:
        """Set the heap priorities of the last sampled experiences to ``|clip(error)|``.

        Paired with the sampled experiences in order (``zip``; an experience overwritten
        since the sample is skipped), one error per row: shape ``(k,)`` or ``(k, 1)``.

        Raises:
            TypeError: Nothing was sampled since the last update, or ``errors`` is a scalar.
            ValueError: A row holds several numbers.
        """
        slots = self._pending()
        e = self._preprocess_errors(errors)
        if e.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        k = min(slots.shape[0], e.shape[0])
        rows = e[:k].reshape(k, -1).astype(np.float64)
        if rows.shape[1] != 1:
            raise ValueError(
                f"update_priorities: expected one error per sampled experience, got rows of "
                f"shape {e.shape[1:]} (the truth value of an array with more than one element "
                "is ambiguous)"
            )
        self._max_heap.update_many(slots[:k], rows[:, 0])
        self._last_sampled = None


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
