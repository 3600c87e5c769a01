"""Per-slot priorities and the segment trees that sample from them.

:class:`Priorities` is the bookkeeping half of prioritized replay. It knows slots (``0 ..
num_slots - 1``, one per stored step), which of them are *live* (sampleable now), the
priority of each slot's current occupant, and two trees over the slots:

* a :class:`~rlreplay.sampling.trees.SumTree` whose leaf ``s`` is the sampling mass ``m_s``
  of slot ``s``: ``m_s = 0`` unless ``s`` is live with a priority ``> 0``, so
  ``P(s) = m_s / total`` is exactly the law of :meth:`Priorities.draw` and a zero-mass slot
  is never drawn;
* a :class:`~rlreplay.sampling.trees.MinTree` holding the same ``m_s`` where it is ``> 0``
  and ``+inf`` elsewhere, whose root is the smallest mass of any drawable slot, i.e. the
  smallest probability, which fixes the largest importance weight over the whole buffer.

Masses, by variant, for a live slot with priority ``p > 0``:

* ``"proportional"``: ``m = p ** alpha``;
* ``"rank_based"``: ``m = rank ** -alpha`` with ``rank = 1 + #{live priorities > p}``
  (competition ranking: the highest priority has rank 1, equal priorities share a rank and
  so a probability, whatever slots they sit in).

Exact ranks change for up to every slot when one priority changes, so rank-based masses are
refreshed by a full re-sort (``O(N log N)``) only once ``sort_interval`` changes (insertions,
removals, priority updates) have accumulated, as nnabla-rl's ``sort_interval`` does. Between
re-sorts a slot that joins the live set or gets a new priority is ranked against the sorted
*snapshot* of the last re-sort: ``rank = 1 + #{snapshot priorities > p}`` (binary search,
``O(log N)``); other slots keep their snapshot rank. Bound: the snapshot and the current set
differ only in the ``D`` changes since the re-sort, and each change moves the count of larger
priorities by at most one, so ``|rank used - exact rank| <= D`` for every live slot;
re-sorting before a draw whenever ``D >= sort_interval`` keeps ``D < sort_interval`` at every
draw, and ``sort_interval = 1`` is exact.
Whatever the staleness of the ranks, draws follow the masses in the tree exactly and the
reported probabilities are those masses normalised, so importance weights stay correct for the
law actually sampled. (nnabla-rl also draws uniformly inside ``reset_segment_interval``-cached
rank segments; the sum tree makes that second approximation unnecessary.)

This module holds the class (its bookkeeping, checks and state); the Numba kernels it calls,
one per operation, live in :mod:`rlreplay.sampling.priority_kernels`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlreplay.errors import CheckpointError, EmptyBufferError, PriorityError
from rlreplay.sampling.priority_kernels import (
    _BAD_VALUE,
    _TOO_LARGE,
    _draw_kernel,
    _rank_kernel,
    _rebuild_kernel,
    _update_kernel,
    _write_kernel,
)
from rlreplay.sampling.trees import MinTree, SumTree, _check_sample, _sum_min_pair

__all__ = ["VARIANTS", "Priorities"]

Array = np.ndarray[Any, Any]

VARIANTS = ("proportional", "rank_based")


class Priorities:
    """Priorities of ``num_slots`` slots, their live set, and the Sum/Min trees over them.

    Invariants (checked by the tests after every operation):
        * ``sum_tree`` leaf ``s`` is ``mass(s)`` if ``live[s]`` and ``prio[s] > 0``, else 0;
        * ``min_tree`` leaf ``s`` is the same where it is ``> 0``, else ``+inf``;
        * rank-based: ``rank[s]`` of a live slot is its snapshot rank (see the module
          docstring), 1 for a slot that left the live set or got a new occupant since;
          ``changes`` counts insertions, removals and updates since the re-sort.

    Args:
        num_envs: ``E``.
        env_capacity: ``C``; slot ``e * C + t % C`` holds step ``t`` of env ``e``.
        alpha: Exponent ``>= 0`` of the masses.
        variant: ``"proportional"`` or ``"rank_based"``.
        sort_interval: Rank-based only: re-sort before a draw once this many changes
            accumulated; ``None`` means 1% of the slots ranked at the last re-sort (at least 1).

    Cost: every write or update of ``k`` slots is ``O(k log n)`` (tree updates); a draw of
    ``B`` is ``O(B log n)``; a rank-based re-sort is ``O(n log n)``, amortised over at least
    ``sort_interval`` changes. Each of ``on_write``, ``update`` and ``draw`` is one kernel call
    that does all of its work, both trees included. The trees are 8-ary, one cache line per
    node's children (see ``rlreplay.sampling.trees``): 1,000,000 slots take 7 levels, so a
    draw reads 7 lines (prefetched a level at a time for the whole batch) and an update
    recomputes 7 ancestors per path, each from one line, in both trees in the same pass.
    """

    def __init__(
        self,
        num_envs: int,
        env_capacity: int,
        *,
        alpha: float,
        variant: str,
        sort_interval: int | None,
    ) -> None:
        self.env_capacity = env_capacity
        self.num_slots = num_slots = num_envs * env_capacity
        self.alpha = alpha
        self.rank_based = variant == "rank_based"
        self.sort_interval = sort_interval
        self.prio = np.zeros(num_slots, np.float64)
        self.live = np.zeros(num_slots, np.bool_)
        # Both trees in one allocation (see _sum_min_pair); the kernels get the trees' arrays
        # (contiguous (groups, 8) halves of it) and their common level table.
        self.sum_tree: SumTree
        self.min_tree: MinTree
        self.sum_tree, self.min_tree, self._nodes = _sum_min_pair(num_slots)
        self._sums = self.sum_tree._tree
        self._mins = self.min_tree._tree
        self._levels = self.sum_tree._levels
        self._root = self.sum_tree._root
        n_rank = num_slots if self.rank_based else 0
        self.rank = np.ones(n_rank, np.int64)
        # Priorities of the last re-sort, negated so that the array is ascending.
        self.snapshot = np.zeros(n_rank, np.float64)
        self.snapshot_size = 0
        self.changes = 0
        self._limit = self._priority_limit()

    @property
    def nbytes(self) -> int:
        """Bytes of the per-slot arrays and of the two trees."""
        per_slot = self.prio.nbytes + self.live.nbytes + self.rank.nbytes + self.snapshot.nbytes
        return per_slot + self._nodes.nbytes

    # ------------------------------------------------------------------ changes
    def _snapshot(self) -> Array:
        return self.snapshot[: self.snapshot_size]

    def on_write(self, removed: Array, written: Array, priority: float, added: Array) -> None:
        """Apply one buffer write.

        Args:
            removed: Slots whose occupants stopped being sampleable (applied first: an added
                slot may be a removed one reused).
            written: Slots just written; their new occupants get ``priority``.
            priority: The priority of new transitions (already passed :meth:`check_priority`).
            added: Slots whose occupants just became sampleable.
        """
        _write_kernel(
            self.prio, self.live, self.rank, self._snapshot(), removed, written, priority,
            added, self.alpha, self.rank_based, self._sums, self._mins, self._levels,
        )  # fmt: skip
        if self.rank_based:
            self.changes += removed.shape[0] + added.shape[0]

    def _mass_limit(self) -> float:
        # Masses at most max/(2n) keep any sum over the n slots finite, rounding included.
        return float(np.finfo(np.float64).max) / (2 * self.num_slots)

    def _priority_limit(self) -> float:
        """The largest priority whose mass ``p ** alpha`` stays within :meth:`_mass_limit`."""
        if self.rank_based or self.alpha <= 0.0:
            return math.inf  # rank-based masses and p ** 0 are at most 1
        with np.errstate(over="ignore"):
            return float(np.power(self._mass_limit(), 1.0 / self.alpha))

    def check_priority(self, priority: float) -> None:
        """Refuse a priority whose mass could make a sum over all slots overflow.

        Raises:
            PriorityError: ``priority ** alpha`` is above ``float64 max / (2 * num_slots)``.
        """
        if priority > self._limit:
            raise self._too_large(priority)

    def _too_large(self, priority: float) -> PriorityError:
        return PriorityError(
            f"priorities: {priority!r} is above {self._limit:.3g}, whose mass ** alpha="
            f"{self.alpha} is the largest that {self.num_slots} slots can sum without overflow; "
            "scale the priorities down"
        )

    def update(
        self,
        slots: Array,
        stale: Array,
        values: Array,
        clip: tuple[float, float] | None,
        eps: float,
    ) -> float:
        """Set the priorities ``clip(values) + eps`` of non-stale ``slots``, in call order.

        Priorities up to a mass of ``float64 max / (2 * num_slots)`` are accepted, so no sum
        over the slots can overflow: a later write (which gives new transitions the largest
        priority ever applied) can never fail.

        Args:
            slots: Slot of each id (int64; anything for stale ids).
            stale: Which ids were overwritten since issued (ignored).
            values: float64 priorities, one per id.
            clip: Optional ``(lo, hi)``.
            eps: Added after clipping.

        Returns:
            The largest priority now held by an updated slot (0 if none).

        Raises:
            PriorityError: A value NaN, infinite or negative, or too large; then nothing
                changed.
        """
        lo, hi = clip if clip is not None else (0.0, np.inf)
        status, pos, k, top = _update_kernel(
            self.prio, self.live, self.rank, self._snapshot(), slots, stale, values, lo, hi,
            eps, self.alpha, self.rank_based, self._limit, self._sums, self._mins, self._levels,
        )  # fmt: skip
        if status == _BAD_VALUE:
            raise PriorityError(
                f"priorities: expected finite values >= 0, got {values[pos]!r} at position "
                f"{pos} (pass abs(td_error); NaN usually means the loss diverged)"
            )
        if status == _TOO_LARGE:
            raise self._too_large(top)
        if self.rank_based:
            self.changes += k
        return float(top)

    # ------------------------------------------------------------------ drawing
    @property
    def drawable(self) -> bool:
        """Whether some live slot has a priority ``> 0`` (the sum tree's root, read directly)."""
        return bool(self._sums[self._root, 0] > 0.0)

    def draw(
        self, n: int, rng: np.random.Generator, stratified: bool, beta: float, lo: Array
    ) -> tuple[Array, Array, Array, Array]:
        """Draw ``n`` slots with probability ``mass / total`` (which must be ``> 0``).

        Args:
            n: Number of draws.
            rng: The buffer's generator.
            stratified: One draw per equal slice of the total mass.
            beta: Importance exponent.
            lo: First sampleable step of each env (to turn slots into steps).

        Returns:
            ``(env_ids, t, probabilities, weights)``: int64, int64, float64 ``P = mass /
            total`` and float32 ``w = (P_min / P) ** beta = (smallest mass / mass) ** beta``
            in ``[0, 1]``.
        """
        if self.rank_based and self.changes >= self._sort_threshold():
            self.resort()
        n = _check_sample(n, rng)
        if not self._sums[self._root, 0] > 0.0:
            raise EmptyBufferError(
                "cannot sample from a SumTree whose total is 0 (set some priorities first)"
            )
        # One rng.random(n) call, exactly as SumTree.sample: the same stream of draws.
        uniforms = rng.random(n)
        out: tuple[Array, Array, Array, Array] = _draw_kernel(
            self._sums, self._levels, float(self._mins[self._root, 0]), uniforms,
            bool(stratified), beta, lo, self.env_capacity,
        )  # fmt: skip
        return out

    def tree_args(self) -> tuple[Array, Array, float]:
        """``(sums, levels, smallest mass)``: what :meth:`draw` hands its kernel (the one-kernel
        sample in :mod:`rlreplay.sampling.onecall` draws from the same arrays)."""
        return self._sums, self._levels, float(self._mins[self._root, 0])

    def draw_among(
        self, slots: Array, n: int, rng: np.random.Generator, stratified: bool, beta: float
    ) -> tuple[Array, Array, Array]:
        """Draw ``n`` of ``slots`` with probability ``mass / (sum of their masses)``: O(len).

        For draws restricted to a subset (sequence starts that fit). The same stratified or
        independent uniforms as :meth:`draw`; a zero-mass slot is never drawn, whatever the
        rounding.

        Returns:
            ``(positions in slots, probabilities, weights)``, weights normalised by the
            smallest positive mass among ``slots``.

        Raises:
            EmptyBufferError: Every slot has mass 0.
        """
        if self.rank_based and self.changes >= self._sort_threshold():
            self.resort()
        masses = self.sum_tree.get(slots)
        positive = np.flatnonzero(masses > 0.0)
        if positive.shape[0] == 0:
            raise EmptyBufferError("no candidate has a priority > 0")
        cum = np.cumsum(masses)
        total = float(cum[-1])
        u = rng.random(n)
        mass = (np.arange(n) + u) * (total / n) if stratified else u * total
        # The first position whose running sum exceeds the mass skips zero-mass slots; a mass
        # rounded up to the total falls back to the last positive slot.
        pos = np.minimum(np.searchsorted(cum, mass, side="right"), positive[-1])
        m = masses[pos]
        weights = (masses[positive].min() / m) ** beta
        return pos, m / total, weights.astype(np.float32)

    def _sort_threshold(self) -> int:
        if self.sort_interval is not None:
            return self.sort_interval
        return max(1, self.snapshot_size // 100)

    def resort(self) -> None:
        """Rank every live slot with priority ``> 0`` exactly: ``1 + #{larger priorities}``."""
        slots = np.flatnonzero(self.live & (self.prio > 0.0))
        order = np.argsort(-self.prio[slots])
        _rank_kernel(self.prio, slots, order, self.rank, self.snapshot)
        self.snapshot_size = slots.shape[0]
        self.changes = 0
        self.rebuild()

    def rebuild(self) -> None:
        """Recompute both trees from ``prio``, ``live`` (and ``rank``): O(n)."""
        _rebuild_kernel(
            self.prio, self.rank, self.live, self.alpha, self.rank_based, self._sums,
            self._mins, self._levels,
        )  # fmt: skip

    def restore(self, live_slots: Array) -> None:
        """After loading ``prio`` (and ``rank``, ``snapshot``): check them, set the live set,
        rebuild.

        Raises:
            CheckpointError: A priority NaN, infinite, negative or above what the trees can sum
                (:meth:`check_priority`); rank-based: a snapshot that is not the descending
                finite priorities >= 0 of a re-sort, or a rank below 1 or above what the
                snapshot gives (``snapshot_size + 1`` for a drawable slot).
        """
        prio = self.prio
        # The limit is inf where every finite mass sums safely: finiteness is its own check.
        bad = np.flatnonzero(~(np.isfinite(prio) & (prio >= 0.0) & (prio <= self._limit)))
        if bad.shape[0]:
            raise CheckpointError(
                f"checkpoint: priority {float(prio[bad[0]])!r} of slot {int(bad[0])} is not a "
                f"finite number in [0, {self._limit:.3g}]"
            )
        self.live[:] = False
        self.live[live_slots] = True
        if self.rank_based:
            self._check_ranks()
        self.rebuild()

    def _check_ranks(self) -> None:
        snap = self._snapshot()
        if not (np.isfinite(snap).all() and (snap <= 0.0).all() and (np.diff(snap) >= 0).all()):
            raise CheckpointError(
                "checkpoint: the rank snapshot is not the descending finite priorities >= 0 of "
                "a re-sort"
            )
        rank = self.rank
        drawable = self.live & (self.prio > 0.0)
        bad = np.flatnonzero(
            (rank < 1) | (rank > self.num_slots + 1) | (drawable & (rank > snap.shape[0] + 1))
        )
        if bad.shape[0]:
            raise CheckpointError(
                f"checkpoint: slot {int(bad[0])} has rank {int(rank[bad[0]])}, outside [1, "
                f"{snap.shape[0] + 1}] (the snapshot of {snap.shape[0]} priorities)"
            )

    # ------------------------------------------------------------------ state
    def state_meta(self) -> dict[str, Any]:
        """Scalars of the state (JSON-able)."""
        return {"snapshot_size": self.snapshot_size, "changes": self.changes}

    def load_meta(self, meta: dict[str, Any]) -> None:
        """Restore :meth:`state_meta`."""
        size, changes = int(meta["snapshot_size"]), int(meta["changes"])
        if not 0 <= size <= self.snapshot.shape[0] or changes < 0:
            raise CheckpointError(
                f"checkpoint: rank snapshot size {size} (of {self.snapshot.shape[0]} slots) or "
                f"change count {changes} is out of range"
            )
        self.snapshot_size = size
        self.changes = changes

    def state_rows(self) -> dict[str, tuple[str | int, Any]]:
        """Which of :meth:`state_arrays` a checkpoint holds in part, with the value a fresh
        row holds: per-slot priorities and ranks only for stored steps (``"slots"``), the rank
        snapshot only its first ``snapshot_size`` entries (an int); other slots' values are
        never read before a write sets them."""
        out: dict[str, tuple[str | int, Any]] = {"prio": ("slots", 0.0)}
        if self.rank_based:
            out["rank"] = ("slots", 1)
            out["snapshot"] = (self.snapshot_size, 0.0)
        return out

    def state_arrays(self) -> dict[str, Array]:
        """The arrays of the state (live views); the trees and ``live`` are derived."""
        out: dict[str, Array] = {"prio": self.prio}
        if self.rank_based:
            out["rank"] = self.rank
            out["snapshot"] = self.snapshot
        return out
