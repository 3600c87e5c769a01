"""Reference models of nnabla-rl 0.16.0's replay buffers, for the state machines.

Written from nnabla-rl 0.16.0's source (``/tmp/orig``) with the deliberate differences of
``docs/migrating/nnabla_rl.md``:

* :class:`BufferModel`: ``ReplayBuffer``'s ring (``capacity``; ``None`` a deque) of the appended
  experiences, and for the prioritized variants the priority bookkeeping of nnabla-rl's own data
  holders (``SumTreeDataHolder`` / ``MaxHeapDataHolder``, transcribed verbatim in
  ``tests/compat/_nnabla_rl_reference.py``), appended in step with the ring, with nnabla-rl's
  weights, ``beta`` schedule, sort interval and update rules; ``update_priorities`` goes to the
  experiences that were sampled, skipping those dropped since (prioritized difference 1);
* :class:`TrajectoryModel`: ``TrajectoryReplayBuffer``'s trajectories, the oldest dropped past
  ``num_trajectories`` (difference 3), with nnabla-rl's experience positions and portions.

Every experience names itself: its state's first entry is its step number ``g``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.compat._nnabla_rl_reference import (
    MaxHeapDataHolder,
    RankBasedPrioritizedReplayBuffer,
    SumTreeDataHolder,
)

Array = np.ndarray[Any, Any]
Experience = tuple[Any, ...]


def experience(g: int, terminal: bool = False, wide: bool = False) -> Experience:
    """nnabla-rl's ``(s, a, r, non_terminal, s_next, info)`` of step ``g``.

    ``wide`` states (3 entries instead of 2) do not fit a columnar store of 2-entry states: the
    buffer then moves to its object store.
    """
    d = 3 if wide else 2
    s = np.full(d, g, np.float32)
    return (s, np.array([g % 4], np.int64), 0.5 * g, 0.0 if terminal else 1.0, s + 1, {"g": g})


def step_of(e: Experience) -> int:
    return int(e[0][0])


def same(got: Any, want: Experience) -> None:
    """``got`` is ``want``: every element equal (arrays by value, dtype and shape)."""
    assert len(got) == len(want), (got, want)
    for x, y in zip(got, want, strict=True):
        if isinstance(y, np.ndarray):
            assert isinstance(x, np.ndarray) and x.dtype == y.dtype, (x, y)
            np.testing.assert_array_equal(x, y)
        else:
            assert x == y and type(x) is type(y), (x, y)


class BufferModel:
    """nnabla-rl's ``ReplayBuffer`` (``kind="plain"``) or a prioritized buffer's state."""

    def __init__(self, capacity: int | None, kind: str = "plain", **kw: Any) -> None:
        self.capacity, self.kind = capacity, kind
        self.data: list[Experience] = []
        self.last: list[int] | None = None  # the steps sampled and not updated yet
        if kind == "plain":
            return
        assert capacity is not None
        self.alpha, self.beta = kw["alpha"], kw["beta"]
        self.beta_diff = (1.0 - self.beta) / kw["betasteps"]
        self.epsilon = kw.get("epsilon", 1e-8)
        self.method = kw.get("normalization_method", "buffer_max")
        self.sort_interval = kw.get("sort_interval", 1_000_000)
        self.since_sort = 0
        self.holder: Any
        if kind == "proportional":
            keep_min = self.method == "buffer_max"
            self.holder = SumTreeDataHolder(capacity, 1.0, keep_min=keep_min)  # type: ignore[no-untyped-call]
        else:
            self.holder = MaxHeapDataHolder(capacity, self.alpha)
            # nnabla-rl's segment bookkeeping (RankBasedPrioritizedReplayBuffer.sample)
            self.reset_segment_interval = kw.get("reset_segment_interval", 1000)
            self.boundaries: list[int] = []
            self.prev_num_samples = self.prev_num_steps = 0
            powers = [(1 / (i + 1)) ** self.alpha for i in range(capacity)]
            self._ps_cumsum = np.cumsum(np.asarray(powers))

    def __len__(self) -> int:
        return len(self.data)

    def append(self, e: Experience) -> None:
        self.data.append(e)
        if self.capacity is not None and len(self.data) > self.capacity:
            self.data.pop(0)
        if self.kind == "plain":
            return
        self.holder.append(step_of(e))
        if self.kind == "rank":
            self.since_sort += 1
            if self.since_sort % self.sort_interval == 0:
                self.holder.sort_data()
                self.since_sort = 0

    def position(self, g: int) -> int | None:
        """The position of step ``g``, or None when it was dropped."""
        first = step_of(self.data[0]) if self.data else 0
        p = g - first
        return p if 0 <= p < len(self.data) and step_of(self.data[p]) == g else None

    # ------------------------------------------------------------------ prioritized
    def weights(self, positions: list[int]) -> Array:
        """nnabla-rl's ``_get_weights`` of the positions, at the current ``beta``."""
        prios = np.asarray([self.holder.get_priority(i) for i in positions])[:, np.newaxis]
        if self.kind == "rank":
            low = (1 / len(self.data)) ** self.alpha
        elif self.method == "batch_max":
            low = prios.min()
        else:
            low = self.holder.min_priority()
        out: Array = (prios / low) ** (-self.beta)
        return out

    # ------------------------------------------------------------------ draw laws
    def segments(self, num_samples: int, num_steps: int) -> list[int]:
        """nnabla-rl's rank-based ``sample`` (past its size checks): the segment boundaries it
        draws from, recomputed by the transcribed ``_compute_segment_boundaries`` only when
        ``num_samples`` or ``num_steps`` changed, at a length that is a multiple of
        ``reset_segment_interval`` below capacity, or when there are none; kept otherwise."""
        n = len(self.data)
        if (
            num_samples != self.prev_num_samples
            or num_steps != self.prev_num_steps
            or (n % self.reset_segment_interval == 0 and n != self.capacity)
            or len(self.boundaries) == 0
        ):
            compute = RankBasedPrioritizedReplayBuffer._compute_segment_boundaries
            # the transcribed method reads only self._ps_cumsum
            self.boundaries = compute(self, N=n, k=num_samples)  # type: ignore[arg-type]
            self.prev_num_samples, self.prev_num_steps = num_samples, num_steps
        return self.boundaries

    def heap_index(self, position: int) -> int:
        """The heap position (rank - 1) of the experience at ``position``."""
        absolute = self.holder._relative_to_absolute_index(position)
        out: int = self.holder._max_heap.absolute_to_heap_index(absolute)
        return out

    def at_heap(self, heap_index: int) -> int:
        """The position of the experience at heap position ``heap_index``."""
        out: int = self.holder.get_relative_index_from_heap_index(heap_index)
        return out

    def rank_law(self, boundaries: list[int]) -> list[Array]:
        """For each draw of a rank-based ``sample(k, 1)``: P(position), uniform over the heap
        positions of its segment ``[boundaries[i - 1], boundaries[i])``."""
        out = []
        for low, high in zip([0, *boundaries[:-1]], boundaries, strict=True):
            law = np.zeros(len(self.data))
            for h in range(low, high):
                law[self.at_heap(h)] += 1 / (high - low)
            out.append(law)
        return out

    def leaf_intervals(self) -> list[tuple[int, float, float]]:
        """``(position, low, high)``: the queries nnabla-rl's ``SumTree`` descent sends to each
        stored experience (``query < left.value``: left, else right with ``left.value``
        taken off), read from the transcribed tree's stored node values."""
        tree = self.holder._sum_tree
        out: list[tuple[int, float, float]] = []
        todo = [(0, 0.0, float(tree.sum()), 0.0)]  # node, local [low, high), offset
        while todo:
            node, low, high, offset = todo.pop()
            if high <= low:
                continue
            left, right = tree._tree[node].left, tree._tree[node].right
            if left < 0:
                p = self.holder._absolute_to_relative_index(tree.tree_to_absolute_index(node))
                if p < len(self.data):
                    out.append((p, offset + low, offset + high))
                continue
            lv = float(tree._tree[left].value)
            todo.append((left, low, min(high, lv), offset))
            todo.append((right, max(low, lv) - lv, high - lv, offset + lv))
        return out

    def proportional_law(self, num_samples: int, num_steps: int) -> list[Array]:
        """For each draw ``i`` of a proportional ``sample``: P(position), the share of the slice
        ``[total * i / k, total * (i + 1) / k)`` whose queries reach it, among the positions
        below ``len - num_steps + 1`` (nnabla-rl draws again in the slice until one fits)."""
        interval = self.holder.sum_priority() / num_samples
        limit = len(self.data) - num_steps + 1
        leaves = self.leaf_intervals()
        out = []
        for i in range(num_samples):
            lo, hi = interval * i, interval * (i + 1)
            law = np.zeros(len(self.data))
            for p, a, b in leaves:
                if p < limit:
                    law[p] += max(0.0, min(hi, b) - max(lo, a))
            out.append(law / law.sum())
        return out

    def sampled(self, positions: list[int]) -> None:
        """A ``sample_indices`` of these positions went through: beta grows, updates pend."""
        self.beta = min(self.beta + self.beta_diff, 1.0)
        self.last = [step_of(self.data[p]) for p in positions]

    def update(self, errors: Array) -> None:
        """``update_priorities``: to the sampled experiences still stored, in order."""
        assert self.last is not None
        e = np.abs(np.clip(errors, -1, 1))
        if self.kind == "proportional":
            e = ((e + self.epsilon) ** self.alpha).flatten()
        for g, err in zip(self.last, e, strict=False):
            p = self.position(g)
            if p is not None:  # a row of the rank-based errors: its one number, as the heap holds
                self.holder.update_priority(
                    p, err if self.kind == "proportional" else float(err[0])
                )
        self.last = None


class TrajectoryModel:
    """nnabla-rl's ``TrajectoryReplayBuffer``: whole trajectories, the oldest dropped."""

    def __init__(self, num_trajectories: int | None) -> None:
        self.bound = num_trajectories
        self.trajectories: list[list[Experience]] = []

    def append(self, trajectory: list[Experience]) -> None:
        self.trajectories.append(trajectory)
        if self.bound is not None and len(self.trajectories) > self.bound:
            self.trajectories.pop(0)

    def __len__(self) -> int:
        return sum(len(t) for t in self.trajectories)

    def experience(self, i: int) -> Experience:
        """nnabla-rl's ``_get_experience``: position ``i`` counted over the trajectories."""
        for t in self.trajectories:
            if i < len(t):
                return t[i]
            i -= len(t)
        raise ValueError(i)

    def owner(self, i: int) -> tuple[int, int]:
        """(trajectory, offset) of experience position ``i``."""
        for k, t in enumerate(self.trajectories):
            if i < len(t):
                return k, i
            i -= len(t)
        raise ValueError(i)

    def portion(self, i: int, length: int) -> list[Experience]:
        """``sample_indices_portion``'s portion of position ``i`` (clamped to the end)."""
        k, offset = self.owner(i)
        t = self.trajectories[k]
        start = min(offset, len(t) - length)
        return t[start : start + length]
