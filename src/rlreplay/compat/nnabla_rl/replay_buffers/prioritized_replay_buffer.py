"""Stand-in for ``nnabla_rl.replay_buffers.prioritized_replay_buffer`` over the rlreplay core.

nnabla-rl's module has two prioritized buffers and the seed's ``PrioritizedReplayBuffer``, which
builds one of them by ``variant``:

* :class:`ProportionalPrioritizedReplayBuffer`: ``P(i) ∝ priority_i ** alpha`` with
  ``priority_i = |clip(error_i)| + epsilon``, drawn stratified (one draw per equal slice of the
  total mass);
* :class:`RankBasedPrioritizedReplayBuffer`: ``P(i) ∝ rank_i ** -alpha`` (rank 1 = largest
  ``|clip(error)|``), ranks refreshed by a re-sort once they are stale (``sort_interval``
  changes, 1% of the buffer changed, or the buffer doubled).

Importance weights are ``w_i = (P(i) / P_min) ** -beta``, float64 of shape ``(num_samples,
1)``: ``P_min`` is the smallest probability in the whole buffer (``normalization_method=
"buffer_max"``, so the buffer's largest weight is 1) or in the batch (``"batch_max"``).
``beta`` grows by ``(1 - beta) / betasteps`` per :meth:`sample`, up to 1.

Experiences are stored by the front-end's :class:`~rlreplay.compat.nnabla_rl.replay_buffer.
ReplayBuffer` (whatever it stores, arbitrary objects included, comes back as it does there);
their priorities live in the core's :class:`rlreplay.sampling.priorities.Priorities` (a
:class:`rlreplay.SumTree` and :class:`rlreplay.MinTree` over ring slots, the bookkeeping of
:class:`rlreplay.PrioritizedReplayBuffer`), one slot per position of the ring: the ``t``-th
appended experience lives in slot ``t % capacity``. Every stored experience can be drawn at
once, the newest included, as in nnabla-rl.

The helper classes nnabla-rl exports from this module (``SumTree``, ``MinTree``, ``MaxHeap``,
``SumTreeDataHolder``, ``MaxHeapDataHolder``) are re-exported from
:mod:`._prioritized_trees`.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from rlreplay.compat.nnabla_rl.replay_buffer import ReplayBuffer
from rlreplay.compat.nnabla_rl.replay_buffers._prioritized_trees import (
    MaxHeap,
    MaxHeapDataHolder,
    MinTree,
    SumTree,
    SumTreeDataHolder,
)
from rlreplay.sampling.priorities import Priorities

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

_VARIANTS = ("proportional", "rank_based")
#: nnabla-rl's names, and the short forms ("buffer", "batch") accepted beside them.
_NORMALIZATION = {
    "buffer_max": "buffer",
    "batch_max": "batch",
    "buffer": "buffer",
    "batch": "batch",
}
#: Rejection rounds for ``num_steps > 1`` before drawing exactly among the valid positions.
_REDRAW_ROUNDS = 16
#: Added to rank-based priorities so that a zero TD error keeps a rank (and a chance to be
#: drawn), as every item of nnabla-rl's heap does; a common shift leaves every rank unchanged.
_RANK_EPSILON = 1e-8


class _PrioritizedReplayBuffer(ReplayBuffer):
    """Shared machinery of the prioritized buffers (see the module docstring).

    Protocol (nnabla-rl's): each :meth:`sample` or :meth:`sample_indices` must be followed by
    :meth:`update_priorities` with the TD errors of the returned experiences before the next
    one (``RuntimeError`` otherwise).

    Cost: :meth:`append` adds O(log N) (one slot of both trees); :meth:`sample` of ``B`` is
    O(B log N) plus the base buffer's gather; :meth:`update_priorities` O(B log N); a rank-based
    re-sort O(N log N) every ``sort_interval`` changes.
    """

    def __init__(
        self,
        capacity: int,
        *,
        variant: str,
        alpha: float,
        beta: float,
        betasteps: int,
        error_clip: tuple[float, float] | None,
        epsilon: float,
        init_max_error: float,
        normalization_method: str,
        sort_interval: int | None,
        seed: int | None,
    ) -> None:
        if capacity is None or operator.index(capacity) <= 0:
            raise ValueError("buffer size must be greater than 0")
        if normalization_method not in _NORMALIZATION:
            raise ValueError(f"Unknown normalization method: {normalization_method}")
        super().__init__(capacity=capacity, seed=seed)
        self._slots = operator.index(capacity)
        self._alpha = float(alpha)
        self._beta = float(beta)
        # nnabla-rl computes this here, so betasteps=0 raises ZeroDivisionError at construction
        self._beta_diff = (1.0 - self._beta) / betasteps
        self._error_clip = None if error_clip is None else (error_clip[0], error_clip[1])
        self._epsilon = float(epsilon)
        self._normalization = _NORMALIZATION[normalization_method]
        self._prios = Priorities(
            1, self._slots, alpha=self._alpha, variant=variant, sort_interval=sort_interval
        )
        self._max_priority = float(init_max_error)
        self._prios.check_priority(self._max_priority)
        # nnabla-rl's masses are ``priority ** alpha`` in Python, where ``0 ** 0 == 1``: with
        # alpha=0 a zero priority has mass 1 like any other. The core keeps a zero priority at
        # mass 0, so the front-end hands it 1.0 instead (mass 1.0 ** 0 == 1, the same law).
        self._zero_mass_one = variant == "proportional" and self._alpha == 0.0
        # Slots whose mass is 0 (epsilon=0 and a zero error): nnabla-rl's min tree holds them
        # (the core's min tree skips zero masses), so its buffer-wide minimum is then 0.
        self._zero_slots = np.zeros(self._slots, bool)
        self._zero_count = 0
        self._appended = 0  # experiences appended so far: the t-th is in slot t % capacity
        self._last_sampled: Array | None = None  # append numbers awaiting update_priorities

    # ------------------------------------------------------------------ writing
    def append(self, experience: Any) -> None:
        """Add new experience to the replay buffer, with the largest priority so far.

        Notes:
            If the replay buffer size is full, the oldest (head of the buffer) experience will
            be dropped off and the given experience will be added to the tail of the buffer.
        """
        super().append(experience)
        t = self._appended
        slot = np.array([t % self._slots], np.int64)
        removed = slot if t >= self._slots else slot[:0]
        priority = self._max_priority
        if self._zero_mass_one and priority == 0.0:
            priority = 1.0
        self._prios.on_write(removed, slot, priority, slot)
        self._track_zero_masses(slot)
        self._appended = t + 1

    def append_all(self, experiences: Sequence[Any]) -> None:
        """Add list of experiences to the replay buffer (each as :meth:`append`)."""
        for experience in experiences:
            self.append(experience)

    def _track_zero_masses(self, slots: Array) -> None:
        """Refresh :attr:`_zero_slots` and its count for the written ``slots`` (O(B))."""
        u = np.unique(slots)
        before = int(self._zero_slots[u].sum())
        now = self._prios.sum_tree.get(u) == 0.0
        self._zero_slots[u] = now
        self._zero_count += int(now.sum()) - before

    # ------------------------------------------------------------------ sampling
    def _first(self) -> int:
        """Append number of position 0 (the oldest stored experience)."""
        return self._appended - len(self)

    def _check_updated(self) -> None:
        if self._last_sampled is not None:
            raise RuntimeError(
                "Trying to sample data from buffer without updating priority. "
                "Check that the algorithm supports prioritized replay buffer."
            )

    def sample(self, num_samples: int = 1, num_steps: int = 1) -> tuple[Any, dict[str, Any]]:
        """Sample ``num_samples`` experiences by priority (with replacement), with weights.

        Args:
            num_samples: Number of samples to sample from the replay buffer. Defaults to 1.
            num_steps: Number of timesteps to sample. Should be greater than 0. Defaults to 1.

        Returns:
            ``(experiences, info)`` as the base buffer's, with ``info["weights"]`` the
            importance weights, float64 of shape ``(num_samples, 1)``.

        Raises:
            ValueError: num_samples exceeds the buffer's length or is below 1, or num_steps
                is 0 or negative.
            RuntimeError: The buffer holds fewer than num_steps experiences, or the previous
                sample's priorities were not updated.
        """
        num_samples, num_steps = operator.index(num_samples), operator.index(num_steps)
        n = len(self)
        if num_samples > n:
            raise ValueError(f"num_samples: {num_samples} is greater than the size of buffer: {n}")
        if n - num_steps < 0:
            raise RuntimeError(f"Insufficient buffer length. buffer: {n} < steps: {num_steps}")
        if num_steps <= 0:
            raise ValueError(f"num_steps: {num_steps} should be greater than 0!")
        if num_samples <= 0:
            raise ValueError(f"num_samples: {num_samples} should be greater than 0!")
        self._check_updated()
        positions = self._draw(num_samples, num_steps)
        experiences, info = ReplayBuffer.sample_indices(self, positions, num_steps=num_steps)
        info["weights"] = self._weights(positions)
        self._last_sampled = self._first() + positions
        self._beta = min(self._beta + self._beta_diff, 1.0)
        return experiences, info

    def _draw(self, k: int, num_steps: int) -> Array:
        """``k`` positions by priority among ``[0, len - num_steps]`` (stratified draws).

        nnabla-rl draws again while a draw lies too close to the newest experience; this does
        the same for a few rounds, then draws the rest exactly among the valid positions (the
        same conditional law, O(N)).
        """
        self._refresh_ranks()
        first = self._first()
        if not self._prios.drawable:
            return self._draw_from_zero_total(k, num_steps)
        lo = np.array([first], np.int64)
        _, t, _, _ = self._prios.draw(k, self._rng, True, self._beta, lo)
        positions: Array = t - first
        last = len(self) - num_steps  # the last position a draw may take
        for _ in range(_REDRAW_ROUNDS):
            bad = positions > last
            if not bad.any():
                return positions
            _, t, _, _ = self._prios.draw(int(bad.sum()), self._rng, True, self._beta, lo)
            positions[bad] = t - first
        bad = positions > last
        if bad.any():
            slots = (first + np.arange(last + 1)) % self._slots
            pos, _, _ = self._prios.draw_among(slots, int(bad.sum()), self._rng, True, 1.0)
            positions[bad] = pos
        return positions

    def _refresh_ranks(self) -> None:
        """Rank-based: re-sort before a draw once the snapshot ranks are stale.

        Stale means: ``sort_interval`` changes (appends, overwrites, updates) since the last
        re-sort, or 1% of the snapshot's size (at least 1), or a buffer holding more than
        twice the snapshot's experiences (an empty snapshot included). nnabla-rl's max-heap
        keeps every experience roughly ordered at all times, so its draws favour large errors
        long before its ``sort_interval`` (1000000 by default) comes; a snapshot re-sorted only
        then would rank everything changed since against old values (every experience rank 1
        before the first re-sort: uniform draws). Cost: O(N log N) per re-sort, amortised
        O(100 log N) per change (the core's own default for rank-based buffers).
        """
        prios = self._prios
        if not prios.rank_based:
            return
        size = prios.snapshot_size
        stale = min(prios.sort_interval or 1, max(1, size // 100))
        if prios.changes >= stale or len(self) > 2 * size:
            prios.resort()

    def _draw_from_zero_total(self, k: int, num_steps: int) -> Array:
        """nnabla-rl's draws when every priority is 0 (``epsilon=0``, all errors 0).

        Its stratified draw queries ``drng.uniform(0, 0) == 0`` in each slice, and its sum
        tree's descent (left while ``query <= left``) takes the left-most leaf of the deepest
        level: absolute index ``2 ** ceil(log2(capacity)) - capacity`` (0 for a power of two),
        i.e. that ring slot, ``k`` times. (Weights are then ``(0 / 0) ** -beta``, NaN.)

        Raises:
            RuntimeError: That slot holds no experience that fits ``num_steps`` (nnabla-rl
                draws it again for ever: an endless loop).
        """
        leaf = (1 << (self._slots - 1).bit_length()) - self._slots
        position = (leaf - self._first()) % self._slots
        if position > len(self) - num_steps:
            raise RuntimeError(
                "every priority is 0 (epsilon=0): nnabla-rl's sum tree then returns slot "
                f"{leaf} for every draw, which holds no experience that fits num_steps="
                f"{num_steps}, and nnabla-rl would draw again for ever"
            )
        return np.full(k, position, np.int64)

    def _weights(self, positions: Array) -> Array:
        """``(P(i) / P_min) ** -beta`` in float64, shape ``(B, 1)``, from the tree masses."""
        prios = self._prios
        self._refresh_ranks()  # as a draw does: the weights follow the ranks draws use
        masses = prios.sum_tree.get((self._first() + positions) % self._slots)
        # "buffer": the smallest mass of the buffer (its largest weight is 1); "batch": the batch's
        # (nnabla-rl's min tree holds zero masses too: then its minimum is 0, see __init__)
        if self._normalization == "batch":
            smallest = float(masses.min())
        else:
            smallest = 0.0 if self._zero_count else prios.min_tree.min
        with np.errstate(divide="ignore", invalid="ignore"):
            weights: Array = (masses / smallest) ** -self._beta
        return weights[:, None]

    def sample_indices(
        self, indices: Sequence[int] | Array, num_steps: int = 1
    ) -> tuple[Any, dict[str, Any]]:
        """Sample experiences for given indices, with their current importance weights.

        The weights use the current ``beta`` (only :meth:`sample` advances it).

        Raises:
            ValueError: If indices are empty or num_steps is 0 or negative.
            RuntimeError: The previous sample's priorities were not updated.
        """
        self._check_updated()
        experiences, info = super().sample_indices(indices, num_steps=num_steps)
        positions = np.asarray(indices).astype(np.int64).reshape(-1)
        positions = np.where(positions < 0, positions + len(self), positions)
        info["weights"] = self._weights(positions)
        self._last_sampled = self._first() + positions
        return experiences, info

    # ------------------------------------------------------------------ priorities
    def update_priorities(self, errors: Any) -> None:
        """Set the priorities of the last sampled experiences from their TD errors.

        ``priority = |clip(error, *error_clip)| + epsilon``, paired with the sampled
        experiences in order as nnabla-rl's ``zip`` does (extra errors, or extra experiences,
        are left out). An experience overwritten since the sample is skipped.

        Args:
            errors: One TD error per sampled experience: shape ``(B,)``, ``(B, 1)``, a list.

        Raises:
            TypeError: Nothing was sampled since the last update, or ``errors`` is a scalar.
            ValueError: An element of ``errors`` is not one number.
            PriorityError: A NaN or infinite priority (a ``ValueError``).
        """
        last = self._last_sampled
        if last is None:
            raise TypeError(
                "update_priorities: no sampled experiences await new priorities (nnabla-rl "
                "zips the errors with None here); call sample or sample_indices first"
            )
        e = np.asarray(errors)
        if e.ndim == 0:
            raise TypeError(f"update_priorities: errors must be iterable, got {errors!r}")
        k = min(last.shape[0], e.shape[0])
        rows = e[:k].reshape(k, -1) if k else np.zeros((0, 1))
        if rows.shape[1] != 1:
            raise ValueError(
                f"update_priorities: expected one error per sampled experience, got elements of "
                f"shape {e.shape[1:]} (setting an array element with a sequence)"
            )
        values = rows[:, 0].astype(np.float64)
        if self._error_clip is not None:
            values = np.clip(values, *self._error_clip)
        ids = last[:k]
        magnitudes = np.abs(values)
        if self._zero_mass_one:  # 0 ** 0 == 1 in nnabla-rl: see __init__
            magnitudes = np.where(magnitudes + self._epsilon == 0.0, 1.0, magnitudes)
        top = self._prios.update(
            ids % self._slots, ids < self._first(), magnitudes, None, self._epsilon
        )
        self._max_priority = max(self._max_priority, top)
        self._track_zero_masses(ids % self._slots)
        self._last_sampled = None


class ProportionalPrioritizedReplayBuffer(_PrioritizedReplayBuffer):
    """nnabla-rl's proportional prioritized replay: ``P(i) ∝ (|clip(e_i)| + epsilon) ** alpha``.

    Args:
        capacity: Most experiences kept (``>= 1``).
        alpha: Prioritization exponent.
        beta: Importance-sampling exponent at the first sample, annealed to 1.
        betasteps: Samples over which ``beta`` reaches 1 (``0`` raises ``ZeroDivisionError``,
            as in nnabla-rl; ``float("inf")`` keeps ``beta``).
        error_clip: ``(lo, hi)`` applied to the TD errors, or None.
        epsilon: Added to every ``|clipped error|``.
        init_max_error: Priority of experiences appended before any larger one is set.
        normalization_method: ``"buffer_max"`` (weights divided by the largest weight of the
            buffer) or ``"batch_max"`` (of the batch); ``"buffer"``/``"batch"`` too.
        keep_min: Accepted for compatibility (the min tree is always kept).
        seed: Seed of a random generator of the buffer's own (an rlreplay addition); without
            it the buffer draws from nnabla-rl's global ``random.drng``, as nnabla-rl does.

    Raises:
        ValueError: ``capacity`` None or ``< 1``, or an unknown ``normalization_method``.

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
        keep_min: bool = True,
        *,
        seed: int | None = None,
    ) -> None:
        super().__init__(
            capacity,
            variant="proportional",
            alpha=alpha,
            beta=beta,
            betasteps=betasteps,
            error_clip=error_clip,
            epsilon=epsilon,
            init_max_error=init_max_error,
            normalization_method=normalization_method,
            sort_interval=None,
            seed=seed,
        )


class RankBasedPrioritizedReplayBuffer(_PrioritizedReplayBuffer):
    """nnabla-rl's rank-based prioritized replay: ``P(i) ∝ rank_i ** -alpha``.

    Rank 1 is the largest ``|clip(error)|``; equal priorities share a rank. Ranks are exact
    after a re-sort, done before a draw once ``sort_interval`` changes (appends, overwrites,
    updates) accumulated, or 1% of the buffer changed, or the buffer more than doubled since
    the last one (see ``_refresh_ranks``); between re-sorts a changed experience is ranked
    against the last sorted snapshot. Draws are stratified over the rank masses.

    Args:
        capacity: Most experiences kept (``>= 1``).
        alpha: Exponent of the rank law.
        beta: Importance-sampling exponent at the first sample, annealed to 1.
        betasteps: Samples over which ``beta`` reaches 1 (``0`` raises ``ZeroDivisionError``,
            as in nnabla-rl; ``float("inf")`` keeps ``beta``).
        error_clip: ``(lo, hi)`` applied to the TD errors, or None.
        reset_segment_interval: Accepted for compatibility: the sum tree draws exactly, so
            there are no cached rank segments to reset.
        sort_interval: Most changes between two re-sorts of the ranks.
        init_max_error: Priority of experiences appended before any larger one is set.
        normalization_method: ``"buffer_max"`` or ``"batch_max"`` (``"buffer"``/``"batch"``).
        seed: Seed of a random generator of the buffer's own (an rlreplay addition); without
            it the buffer draws from nnabla-rl's global ``random.drng``, as nnabla-rl does.

    Example:
        >>> import numpy as np
        >>> buffer = RankBasedPrioritizedReplayBuffer(capacity=10, seed=0)
        >>> buffer.append_all([(np.zeros(1), 0, 0.0, 1.0, np.zeros(1), {})] * 3)
        >>> _, info = buffer.sample(num_samples=3)
        >>> info["weights"].ravel().tolist()  # every rank is 1 before any update
        [1.0, 1.0, 1.0]
        >>> buffer.update_priorities([0.1, 0.2, 0.3])
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
        init_max_error: float = 1.0,
        normalization_method: str = "buffer_max",
        *,
        seed: int | None = None,
    ) -> None:
        self._reset_segment_interval = reset_segment_interval
        super().__init__(
            capacity,
            variant="rank_based",
            alpha=alpha,
            beta=beta,
            betasteps=betasteps,
            error_clip=error_clip,
            epsilon=_RANK_EPSILON,
            init_max_error=init_max_error,
            normalization_method=normalization_method,
            sort_interval=max(1, operator.index(sort_interval)),
            seed=seed,
        )


class PrioritizedReplayBuffer(_PrioritizedReplayBuffer):
    """nnabla-rl's ``PrioritizedReplayBuffer``: proportional or rank-based by ``variant``.

    ``variant="proportional"`` behaves as :class:`ProportionalPrioritizedReplayBuffer` and
    ``"rank_based"`` as :class:`RankBasedPrioritizedReplayBuffer` with the arguments given here
    (``epsilon`` for the first, ``reset_segment_interval`` and ``sort_interval`` for the second),
    weights normalised over the whole buffer, as nnabla-rl's wrapper builds them.

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
        if variant not in _VARIANTS:
            raise ValueError(f"Unknown prioritized replay buffer variant: {variant}")
        self.variant = variant
        self._reset_segment_interval = reset_segment_interval
        rank_based = variant == "rank_based"
        super().__init__(
            capacity,
            variant=variant,
            alpha=alpha,
            beta=beta,
            betasteps=betasteps,
            error_clip=error_clip,
            epsilon=_RANK_EPSILON if rank_based else epsilon,
            init_max_error=1.0,
            normalization_method="buffer_max",
            sort_interval=max(1, operator.index(sort_interval)) if rank_based else None,
            seed=seed,
        )
