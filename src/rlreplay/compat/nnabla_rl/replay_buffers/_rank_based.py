"""nnabla-rl's ``RankBasedPrioritizedReplayBuffer``, public in :mod:`.prioritized_replay_buffer`.

Checked against nnabla-rl 0.16.0 (``nnabla_rl/replay_buffers/prioritized_replay_buffer.py``,
Apache-2.0, Sony Group Corporation); see :mod:`.prioritized_replay_buffer` for the module's
overview and :mod:`._prioritized_base` for the protocol both buffers share.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from rlreplay.compat.nnabla_rl.replay_buffers._prioritized_base import (
    SegmentError,
    _PrioritizedReplayBuffer,
)
from rlreplay.compat.nnabla_rl.replay_buffers._prioritized_trees import MaxHeap

__all__ = ["RankBasedPrioritizedReplayBuffer"]

Array = np.ndarray[Any, Any]


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

    Cost: append O(1) (checks and one copy of the arrays; its heap push, O(log N), and the
    sort every ``sort_interval`` appends, O(N log N), run at the next read, in one kernel
    call per run of appends between two sorts); sample O(k) plus O(N) when the segments
    are redone; update O(k log N).

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
        self._heap = MaxHeap(self._slots)
        self._heap_pushed = 0  # appends pushed (priority inf); the newer: one kernel call later
        self._reset_segment_interval = reset_segment_interval
        self._sort_interval = sort_interval
        # a positive int interval: nnabla-rl sorts right after the appends numbered k *
        # sort_interval, which _max_heap replays when it pushes them; any other value (0
        # divides by zero at the first append, as there) is counted by _on_append
        self._regular_sorts = type(sort_interval) is int and sort_interval > 0
        self._append_hook = not self._regular_sorts
        self._boundaries: Array = np.zeros(0, np.int64)
        self._lows: Array = self._boundaries  # each segment's first heap index
        self._prev_num_samples = 0
        self._prev_num_steps = 0
        self._appends_since_prev_sort = 0
        # Python's float power, as nnabla-rl computes it (NumPy's can differ in the last bit)
        # (_get_weights reads its priorities from the table: one gather instead of a power
        # per sample)
        powers = ((1 / (i + 1)) ** alpha for i in range(self._slots))
        self._powers: Array = np.fromiter(powers, np.float64, self._slots)
        self._ps_cumsum: Array = np.cumsum(self._powers)

    @property
    def _max_heap(self) -> MaxHeap:
        """The heap, with every append pushed (pushes are batched: appends stay cheap)."""
        if self._heap_pushed != self._appended:
            self._push_appended()
        return self._heap

    def _push_appended(self) -> None:
        """nnabla-rl's ``MaxHeap.append(inf)`` of every append not pushed yet, in order, with
        its sorts (:meth:`MaxHeap.sort_data` after the appends numbered ``k *
        sort_interval``), one kernel call per run between two sorts."""
        heap, appended, pushed = self._heap, self._appended, self._heap_pushed
        if self._regular_sorts:
            interval = self._sort_interval
            while pushed < appended:
                next_sort = (pushed // interval + 1) * interval
                upto = min(appended, next_sort)
                heap.append_many(math.inf, upto - pushed)
                self._heap_pushed = pushed = upto
                if upto == next_sort:
                    heap.sort_data()
        else:
            heap.append_many(math.inf, appended - pushed)
            self._heap_pushed = appended

    def _on_append(self) -> None:
        # only for an irregular sort_interval (see __init__): nnabla-rl's count, as it is
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
            self._lows = np.concatenate(([0], self._boundaries[:-1]))
            self._prev_num_samples = num_samples
            self._prev_num_steps = num_steps
        limit, rng, b = n - num_steps + 1, self._rng, self._boundaries
        if b.shape[0] == 0:
            return self.sample_indices([], num_steps)
        positions = self._positions_at(rng.integers(low=self._lows, high=b))
        fits = positions < limit
        if (
            positions.shape[0] >= num_samples
            and fits.all()
            and type(self).sample_indices is _PrioritizedReplayBuffer.sample_indices
        ):  # the usual draw (no redraw): the positions as they are, not a list as in nnabla-rl
            # (a subclass's own sample_indices gets that list)
            return self.sample_indices(positions, num_steps)
        indices = positions[fits].tolist()
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
        heap = self._max_heap
        heap_indices = heap.heap_indices(slots)
        if heap_indices.size and heap_indices.min() < 0:  # a slot never filled: None there
            raise TypeError(
                "sample_indices: a position holds no experience yet (nnabla-rl computes "
                "None + 1 for its rank: unsupported operand type(s) for +: 'NoneType' and 'int')"
            )
        # nnabla-rl's (1 / (rank)) ** alpha per sample, as Python computes it: the table's
        # entry rank - 1 (the minimum's rank is the heap's length)
        powers = self._powers
        priorities = powers[heap_indices][:, np.newaxis]
        min_priority = powers[len(heap) - 1]
        weights: Array = (priorities / min_priority) ** (-self._beta)
        return weights

    def update_priorities(self, errors: Any) -> None:
        """Set the heap priorities of the last sampled experiences to ``|clip(error)|``.

        Paired with the sampled experiences in order, as nnabla-rl's ``zip`` pairs them:
        extra errors or extra experiences are left out (so no errors, e.g. shape ``(0,)`` or
        ``(0, 1)``, update nothing) and the pending sample ends; an experience overwritten
        since the sample is skipped. One error per row: shape ``(k,)`` or ``(k, 1)``.

        Raises:
            TypeError: Nothing was sampled since the last update, or ``errors`` is a scalar.
            ValueError: A paired row holds several numbers, or none (nnabla-rl stores such an
                array as a priority and fails at its first comparison: with one experience,
                at the next append). The pending sample is kept, as there.
        """
        e = self._preprocess_errors(errors)  # first, as nnabla-rl (its errors come first)
        slots = self._pending()
        if e.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        k = min(slots.shape[0], e.shape[0])
        rows = e[:k].reshape(k, -1 if k else 1).astype(np.float64, copy=False)  # e: ours
        if rows.shape[1] != 1:
            raise ValueError(
                f"update_priorities: expected one error per sampled experience, got rows of "
                f"shape {e.shape[1:]} (the truth value of an array with more than one element "
                "is ambiguous)"
            )
        if k:
            self._max_heap.update_many(slots[:k], rows[:, 0])
        self._last_sampled = None
