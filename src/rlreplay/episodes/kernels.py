"""Compiled kernels and constants of the episode index (:mod:`rlreplay.episodes.index`).

The per-env and per-slot table layouts, the Numba kernels that account for new steps, dequeue,
locate ids and check loaded tables, and the pure helpers over ``[lo, hi)`` ranges. The
:class:`~rlreplay.episodes.index.EpisodeIndex` class drives them; see
:mod:`rlreplay.episodes.index` for the terminology (absolute steps, ids, ``head``, ``last_end``, the
sampleable range).
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

__all__ = [
    "ABANDONED", "COUNT", "EP_END", "EP_START", "FINAL_FID", "F_COUNT", "F_HEAD", "HEAD", "HI",
    "LAST_END", "LO",
    "P_C", "P_F", "P_G", "P_K", "P_N", "expand_ranges", "ring_runs", "sampleable_delta",
]  # fmt: skip

Array = np.ndarray[Any, Any]

# Columns of the per-env state table.
COUNT, HEAD, LAST_END, LO, HI, F_COUNT, F_HEAD = range(7)
_NCOLS = 7
# Columns of the per-slot table: the episode's first step, the step's final record (-1 when
# the step does not end its episode, so "ends its episode" is `final_fid >= 0`) and the
# episode's last step (-1 while the episode runs; filled for its stored steps when it ends).
EP_START, FINAL_FID, EP_END = 0, 1, 2
# FINAL_FID of a step that ends an *abandoned* episode (EpisodeIndex.abandon_running): it ends
# its episode (the next step starts a new one) but has no final record and no terminated /
# truncated flag. "Ends its episode" is therefore `final_fid != -1`; "has a final record" is
# `final_fid >= 0`.
ABANDONED = -2
# Entries of the parameter vector handed to the kernel (few arguments keep Numba's dispatch
# cheap: it grows quickly with the argument count, and the per-step path pays it every call).
# P_G counts reallocations of the final records (compiled writers that address them by pointer
# compare it with the generation they point at).
P_C, P_F, P_N, P_K, P_G = range(5)


@numba.njit(cache=True)
def _recompute_bounds(env: Array, slot_meta: Array, e: int, C: int, n: int, k: int) -> None:
    """Set ``lo``/``hi`` of env ``e`` from its counters (see the module docstring)."""
    count = env[e, COUNT]
    head = env[e, HEAD]
    env[e, HI] = max(env[e, LAST_END] + 1, count - n)
    lo = head
    # The oldest stored episode started before `head` (it was cut): its steps whose stack reaches
    # below `head` are not sampleable. They are the steps head .. head+k-2 up to its end.
    if k > 1 and count > head and slot_meta[e * C + head % C, EP_START] < head:
        j = head
        while j < head + k - 1 and j < count:
            lo = j + 1
            if slot_meta[e * C + j % C, FINAL_FID] != -1:  # an end, abandoned or not
                break
            j += 1
    env[e, LO] = lo


@numba.njit(cache=True)
def _free_dead_finals(env: Array, final_owner: Array, e: int, F: int) -> None:
    """Drop env ``e``'s oldest final records whose owner step is no longer stored."""
    while env[e, F_HEAD] < env[e, F_COUNT] and (
        final_owner[e * F + env[e, F_HEAD] % F] < env[e, HEAD]
    ):
        env[e, F_HEAD] += 1


@numba.njit(cache=True)
def _advance(
    env: Array,
    slot_meta: Array,
    final_owner: Array,
    rows_env: Array,
    rows_done: Array,
    params: Array,
    out: Array,
) -> bool:  # pragma: no cover - compiled
    """Account for one new step per row (rows of one env must be in time order).

    Writes each row's absolute step, slot and (for rows that end an episode) the position of its
    final-observation record into ``out[0]``, ``out[1]``, ``out[2]``, and updates every counter.
    Room for the final records must have been reserved (:meth:`EpisodeIndex.reserve_finals`).
    Returns whether every row got the same absolute step.
    """
    C, F, n, k = params[P_C], params[P_F], params[P_N], params[P_K]
    same = True
    for i in range(rows_env.shape[0]):
        e = rows_env[i]
        t = env[e, COUNT]
        if t != out[0, 0] and i > 0:
            same = False
        slot = e * C + t % C
        out[0, i] = t
        out[1, i] = slot
        slot_meta[slot, EP_START] = env[e, LAST_END] + 1
        slot_meta[slot, EP_END] = -1
        if rows_done[i]:
            fid = env[e, F_COUNT]
            pos = e * F + fid % F
            final_owner[pos] = t
            slot_meta[slot, FINAL_FID] = fid
            out[2, i] = pos
            env[e, F_COUNT] = fid + 1
            env[e, LAST_END] = t
        else:
            slot_meta[slot, FINAL_FID] = -1
            out[2, i] = -1
        env[e, COUNT] = t + 1
        # Writing step t overwrote step t - C: the oldest stored step is now t + 1 - C.
        env[e, HEAD] = max(env[e, HEAD], t + 1 - C)
        if rows_done[i]:
            # The episode's stored steps learn where it ended (amortised O(1) per step).
            for j in range(max(slot_meta[slot, EP_START], env[e, HEAD]), t + 1):
                slot_meta[e * C + j % C, EP_END] = t
        _free_dead_finals(env, final_owner, e, F)  # their owner step was overwritten
        _recompute_bounds(env, slot_meta, e, C, n, k)
    return same


@numba.njit(cache=True)
def _advance_plain(
    env: Array, slot_meta: Array, final_owner: Array, params: Array, n: int
) -> None:  # pragma: no cover - compiled
    """Account for ``n`` steps of every env, none of which ends its episode.

    The same end state as ``n`` calls of :func:`_advance` with every env's row not done: only
    the last ``C`` steps of an env leave slot records, ``head`` and the dead final records
    follow ``count``, and the bounds depend on the end state alone.
    """
    C, F, n_step, k = params[P_C], params[P_F], params[P_N], params[P_K]
    for e in range(env.shape[0]):
        t0 = env[e, COUNT]
        start = env[e, LAST_END] + 1
        for t in range(max(t0, t0 + n - C), t0 + n):
            slot = e * C + t % C
            slot_meta[slot, EP_START] = start
            slot_meta[slot, FINAL_FID] = -1
            slot_meta[slot, EP_END] = -1
        env[e, COUNT] = t0 + n
        env[e, HEAD] = max(env[e, HEAD], t0 + n - C)
        _free_dead_finals(env, final_owner, e, F)
        _recompute_bounds(env, slot_meta, e, C, n_step, k)


@numba.njit(cache=True)
def _finals_needed(env: Array, rows_env: Array, rows_done: Array) -> int:  # pragma: no cover
    """The most final records one env holds once the ending rows are added."""
    ends = np.zeros(env.shape[0], np.int64)
    for i in range(rows_env.shape[0]):
        if rows_done[i]:
            ends[rows_env[i]] += 1
    need = 0
    for e in range(env.shape[0]):
        need = max(need, env[e, F_COUNT] - env[e, F_HEAD] + ends[e])
    return need


@numba.njit(cache=True)
def _locate_kernel(
    env: Array, ids: Array, C: int, out: Array, stale: Array
) -> tuple[int, int]:  # pragma: no cover - compiled
    """Per id: env, step, slot into ``out[0..2]`` and whether it is stale.

    Returns ``(position of the first id never issued or -1, number of stale ids)``.
    """
    E = env.shape[0]
    n_stale = 0
    for i in range(ids.shape[0]):
        a = ids[i]
        if a < 0:
            return i, 0
        e = a % E
        t = a // E
        if t >= env[e, COUNT]:
            return i, 0
        out[0, i] = e
        out[1, i] = t
        out[2, i] = e * C + t % C
        s = t < env[e, HEAD]
        stale[i] = s
        n_stale += s
    return -1, n_stale


@numba.njit(cache=True)
def _dequeue(
    env: Array, slot_meta: Array, final_owner: Array, env_ids: Array, n: int, params: Array
) -> None:  # pragma: no cover - compiled
    """Drop the oldest ``n`` stored steps of each env in ``env_ids`` (they must be stored)."""
    C, F, n_step, k = params[P_C], params[P_F], params[P_N], params[P_K]
    for i in range(env_ids.shape[0]):
        e = env_ids[i]
        env[e, HEAD] += n
        _free_dead_finals(env, final_owner, e, F)
        _recompute_bounds(env, slot_meta, e, C, n_step, k)


# What _check_kernel finds wrong, by code (the messages name the env and the step or record).
_CHECKS = (
    "",
    "step counter {v} is negative or beyond the ids an int64 holds",
    "oldest stored step {v} is not within [count - capacity, count] (count {c})",
    "last episode end {v} is not within [-1, count) (count {c})",
    "final-record cursors (head, count) {v} are decreasing, negative or hold more than the ring",
    "final record {v} has an owner step that is not stored, not after the previous record's, "
    "or whose slot names another record",
    "last episode end {v} is not the newest stored step that ends an episode",
    "stored step {v} names a final record that is not live or not its own (or a code < -2)",
    "stored step {v} has an episode start after it, or other than its predecessor implies",
    "stored step {v} has an episode end that is not the first end at or after it",
    "sampleable range [lo, hi) ends at {v}, not what the stored episodes give",
)


@numba.njit(cache=True)
def _check_kernel(
    env: Array, slot_meta: Array, final_owner: Array, params: Array, t_max: int
) -> tuple[int, int, int]:  # pragma: no cover - compiled
    """The first inconsistency of loaded tables: ``(code, env, value)``, code 0 if none.

    Code ``i`` is ``_CHECKS[i]``. Reads only in-bounds entries: each check bounds the counters
    the next ones index with. O(stored steps + live final records).
    """
    C, F, n, k = params[P_C], params[P_F], params[P_N], params[P_K]
    scratch = env.copy()
    for e in range(env.shape[0]):
        count, head, last_end = env[e, COUNT], env[e, HEAD], env[e, LAST_END]
        f_count, f_head = env[e, F_COUNT], env[e, F_HEAD]
        if count < 0 or count > t_max:
            return 1, e, count
        if head < 0 or head > count or head < count - C:
            return 2, e, head
        if last_end < -1 or last_end >= count:
            return 3, e, last_end
        if f_head < 0 or f_head > f_count or f_count - f_head > F or f_count > t_max:
            return 4, e, f_count
        prev = head - 1
        for fid in range(f_head, f_count):
            o = final_owner[e * F + fid % F]
            if o <= prev or o >= count or slot_meta[e * C + o % C, FINAL_FID] != fid:
                return 5, e, fid
            prev = o
        # The newest stored end (with a final record or abandoned) is last_end; with none
        # stored, the last end is older than every stored step.
        newest = -1
        for t in range(count - 1, head - 1, -1):
            if slot_meta[e * C + t % C, FINAL_FID] != -1:
                newest = t
                break
        if (newest >= 0 and last_end != newest) or (newest < 0 and last_end >= head):
            return 6, e, last_end
        expected = -1
        for t in range(head, count):
            s = e * C + t % C
            start, fid = slot_meta[s, EP_START], slot_meta[s, FINAL_FID]
            if fid < ABANDONED or (
                fid >= 0 and (fid < f_head or fid >= f_count or final_owner[e * F + fid % F] != t)
            ):
                return 7, e, t
            if start < 0 or start > t or (t > head and start != expected):
                return 8, e, t
            if t > last_end and start != last_end + 1:
                return 8, e, t
            expected = t + 1 if fid != -1 else start
        nxt = -1
        for t in range(count - 1, head - 1, -1):
            s = e * C + t % C
            if slot_meta[s, FINAL_FID] != -1:
                nxt = t
            if slot_meta[s, EP_END] != nxt:
                return 9, e, t
        _recompute_bounds(scratch, slot_meta, e, C, n, k)
        lo, hi = env[e, LO], env[e, HI]
        if head < count:  # every write that leaves steps stored recomputes the bounds
            if lo != scratch[e, LO] or hi != scratch[e, HI]:
                return 10, e, hi
        elif lo != head or hi < scratch[e, HI] or hi > count:  # emptied (clear, jump)
            return 10, e, hi
    return 0, 0, 0


def expand_ranges(lo: Array, sizes: Array) -> tuple[Array, Array]:
    """All ``(env, t)`` with ``lo[e] <= t < lo[e] + sizes[e]``, env by env in time order."""
    sizes = np.maximum(sizes, 0)
    env_ids = np.repeat(np.arange(lo.shape[0], dtype=np.int64), sizes)
    starts = np.cumsum(sizes) - sizes
    t = np.arange(int(sizes.sum()), dtype=np.int64) - np.repeat(starts - lo, sizes)
    return env_ids, t


def ring_runs(first: Array, end: Array, capacity: int) -> Array:
    """Row ranges of per-env rings holding items ``first[e] .. end[e] - 1`` of each env.

    Env ``e``'s ring is rows ``e * capacity .. e * capacity + capacity - 1`` and its item ``i``
    sits at row ``e * capacity + i % capacity`` (steps in slots, final records likewise).
    Returns int64 ``(n, 2)`` ``[start, stop)`` row ranges, env by env, oldest item first: at
    most two per env (the items wrap around the end of the ring), none for an env without
    items. Requires ``0 <= first <= end <= first + capacity``.

    Example: ``capacity=4``, env 0 holding items 3..5 (rows 3, 0, 1) and env 1 holding items
    0..1 (rows 4, 5) give ``[[3, 4], [0, 2], [4, 6]]``.
    """
    E = first.shape[0]
    base = np.arange(E, dtype=np.int64) * capacity
    size = end - first
    start = first % capacity
    # Items up to the end of the ring, then the rest from its first row.
    head = np.minimum(size, capacity - start)
    runs = np.empty((E, 2, 2), np.int64)
    runs[:, 0, 0] = base + start
    runs[:, 0, 1] = base + start + head
    runs[:, 1, 0] = base
    runs[:, 1, 1] = base + size - head
    runs = runs.reshape(-1, 2)
    out: Array = runs[runs[:, 1] > runs[:, 0]]
    return out


@numba.njit(cache=True)
def _delta(before: Array, after: Array) -> tuple[Array, Array, Array, Array]:
    E = before.shape[0]
    n_rem = 0
    n_add = 0
    for e in range(E):
        lo0, hi0, lo1, hi1 = before[e, 0], before[e, 1], after[e, 0], after[e, 1]
        n_rem += max(0, min(hi0, lo1) - lo0)
        n_add += max(0, hi1 - max(hi0, lo1))
    rem_env = np.empty(n_rem, np.int64)
    rem_t = np.empty(n_rem, np.int64)
    add_env = np.empty(n_add, np.int64)
    add_t = np.empty(n_add, np.int64)
    i = 0
    j = 0
    for e in range(E):
        lo0, hi0, lo1, hi1 = before[e, 0], before[e, 1], after[e, 0], after[e, 1]
        for t in range(lo0, min(hi0, lo1)):
            rem_env[i] = e
            rem_t[i] = t
            i += 1
        for t in range(max(hi0, lo1), hi1):
            add_env[j] = e
            add_t[j] = t
            j += 1
    return rem_env, rem_t, add_env, add_t


def sampleable_delta(before: Array, after: Array) -> tuple[Array, Array, Array, Array]:
    """What changed between two snapshots of the per-env ``[lo, hi)`` columns.

    Both bounds only move forward, so steps ``[lo0, min(hi0, lo1))`` left the sampleable set and
    ``[max(hi0, lo1), hi1)`` joined it (an empty earlier range has ``hi0 <= lo0 <= lo1``).

    Args:
        before: ``(E, 2)`` int64 ``[lo, hi]`` before a write.
        after: The same after it.

    Returns:
        ``(removed_env, removed_t, added_env, added_t)``, env by env in time order.
    """
    out: tuple[Array, Array, Array, Array] = _delta(before, after)
    return out
