"""Priorities the core's sum tree cannot draw by (negative, NaN, infinite), kept as ALF keeps them.

ALF's ``update_priority`` writes any float into its sum and max segment trees (ALF's
documentation states no check, and ALF's trees store any value), and ``get_batch`` then draws
with its sum tree's descent: ``thresholds = rand * summary()`` (after asserting ``summary() >
0``), ``find_sum_bound(thresholds)``, ``importance_weights = priority * nnz / summary()``.

The core's prioritized buffer refuses such values, so the front-end gives the core 0 for them
and keeps them here, by ALF's slot (``env * max_length + pos % max_length``). While one of them
is a possible start, :func:`odd_starts` draws the batch with ALF's algorithm: a
:class:`~rlreplay.compat.alf.segment_tree.SumSegmentTree` of ALF's leaves (float32, the
possible starts' priorities, 0 elsewhere), which computes in ALF's mode once it holds such a
value.

Cost: O(B) per write; :func:`odd_starts` is O(E * max_length) per batch (it runs only while an
odd priority is a possible start).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from rlreplay import PrioritizedReplayBuffer, ReplayError
from rlreplay.compat.alf.segment_tree import SumSegmentTree

__all__ = ["OddPriorities", "ReplayAssertionError", "is_odd", "odd_priorities", "odd_starts"]

Array = np.ndarray[Any, Any]

#: Rounds of redraws for descents that end outside the possible starts (see odd_starts).
_ROUNDS = 64


class ReplayAssertionError(ReplayError, AssertionError):
    """Raised where ALF raises ``AssertionError`` (not enough data, unequal env sizes, ...)."""


def is_odd(values: Array) -> Array:
    """Priorities the core's sum tree refuses: negative, NaN or infinite."""
    out: Array = ~(np.isfinite(values) & (values >= 0))
    return out


class OddPriorities:
    """The stored steps whose priority is negative, NaN or infinite, and those priorities.

    Invariants: ``mask[slot]`` is True only while the step written at ``slot`` holds such a
    priority (cleared when a new step is written there, or a regular priority is set);
    ``nan[slot]`` is True only while that priority is NaN, and ``nan_count`` counts them (ALF's
    max tree propagates a NaN: see :attr:`has_nan`).
    """

    def __init__(self, num_envs: int, max_length: int) -> None:
        self.max_length = max_length
        self.mask = np.zeros(num_envs * max_length, np.bool_)
        self.value = np.zeros(num_envs * max_length, np.float32)
        self.nan = np.zeros(num_envs * max_length, np.bool_)
        self.nan_count = 0

    @property
    def has_nan(self) -> bool:
        """Whether a stored step holds a NaN priority (ALF's max tree summary is then NaN)."""
        return self.nan_count > 0

    def written(self, slots: Array) -> None:
        """New steps were written to ``slots`` (with a regular priority), or were removed."""
        self.mask[slots] = False
        self._recount(slots)

    def set(self, slots: Array, values: Array) -> None:
        """Priorities ``values`` were given to the steps at ``slots`` (last one wins)."""
        odd = is_odd(values)
        self.mask[slots] = odd
        self.value[slots] = np.where(odd, values, 0).astype(np.float32)
        self._recount(slots)

    def clear(self) -> None:
        """Every step was removed."""
        self.mask[...] = False
        self.nan[...] = False
        self.nan_count = 0

    def _recount(self, slots: Array) -> None:
        """Bring ``nan`` and ``nan_count`` up to date at ``slots``, O(len(slots))."""
        u = np.unique(slots)
        now = self.mask[u] & np.isnan(self.value[u])
        self.nan_count += int(np.count_nonzero(now)) - int(np.count_nonzero(self.nan[u]))
        self.nan[u] = now

    def state_dict(self) -> dict[str, Array]:
        """Copies of the arrays, as ``odd_mask`` and ``odd_priority``."""
        return {"odd_mask": self.mask.copy(), "odd_priority": self.value.copy()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (absent in older states: none)."""
        self.mask[...] = state.get("odd_mask", False)
        self.value[...] = state.get("odd_priority", 0)
        self.nan[...] = self.mask & np.isnan(self.value)
        self.nan_count = int(np.count_nonzero(self.nan))


def odd_starts(
    core: PrioritizedReplayBuffer,
    rng: np.random.Generator,
    odd: OddPriorities,
    env: Array,
    pos: Array,
    n: int,
) -> tuple[Array, Array, np.float32] | None:
    """ALF's prioritized draw of ``n`` starts among ``(env, pos)`` (every possible start).

    Returns ``None`` when no possible start holds an odd priority (the core then draws).
    Otherwise ``(env, pos, nnz / summary())`` of ``n`` draws by ALF's algorithm (a row's
    importance weight is its priority times the last). A descent
    that ends on a leaf that is not a possible start (only a NaN threshold, ``0 * inf``, does:
    the descent ends on a non-zero leaf otherwise) is drawn again: ALF would read a sequence
    past the env's newest step.

    Raises:
        AssertionError: ``summary() > 0`` fails (NaN, or a sum that is not positive): ALF's
            assertion, as an rlreplay error too.
    """
    C = odd.max_length
    slots = env * C + pos % C
    if not odd.mask[slots].any():
        return None
    p = odd_priorities(core, odd, env, pos)
    tree = SumSegmentTree(odd.mask.shape[0])
    tree[torch.from_numpy(slots)] = torch.from_numpy(p)
    total = float(tree.summary())
    if not total > 0:
        raise ReplayAssertionError(
            "There is no data in the buffer or the data has not been assigned valid priority "
            f"(the priorities of the possible starts sum to {total})"
        )
    where = np.full(odd.mask.shape[0], -1, np.int64)
    where[slots] = np.arange(slots.shape[0])
    picked = np.full(n, -1, np.int64)
    for _ in range(_ROUNDS):
        todo = np.flatnonzero(picked < 0)
        if todo.size == 0:
            break
        u = rng.random(todo.size).astype(np.float32)
        with np.errstate(invalid="ignore"):  # 0 * inf
            thresholds = u * np.float32(total)
        leaf = tree.find_sum_bound(torch.from_numpy(thresholds)).numpy()
        picked[todo] = where[leaf]
    if (picked < 0).any():
        raise ReplayAssertionError(
            f"get_batch: ALF's sum-tree descent found no possible start in {_ROUNDS} rounds "
            "(negative priorities)"
        )
    return env[picked], pos[picked], np.float32(int(tree.nnz) / total)


def odd_priorities(
    core: PrioritizedReplayBuffer, odd: OddPriorities, env: Array, pos: Array
) -> Array:
    """ALF's float32 priorities of the stored steps ``(env, pos)``, odd ones included."""
    slots = env * odd.max_length + pos % odd.max_length
    p = core.get_priorities(pos * core.num_envs + env).astype(np.float32)
    out: Array = np.where(odd.mask[slots], odd.value[slots], p)
    return out
