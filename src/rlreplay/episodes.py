"""The episode index: per-env step counters, ids, episode boundaries and what is sampleable.

Terminology. Every env ``e`` has an absolute step counter: its ``t``-th step ever added is step
``t`` of env ``e``. With ``E`` envs and a per-env ring of ``C`` slots, that step lives in slot
``e * C + t % C`` and has the id ``t * E + e`` (ids are never reused, so ``id -> (e, t)`` is
always recoverable and a stale id is recognisable: ``t < head[e]``).

Per env the index keeps ``count`` (steps ever added), ``head`` (oldest stored step), ``last_end``
(the most recent step that ended an episode) and the sampleable range ``[lo, hi)``:

* ``hi = max(last_end + 1, count - n_step)``: steps of finished episodes know their whole
  window; a step ``t`` of the running episode needs its ``n_step`` successors, ``t + n <= count-1``.
* ``lo = head`` unless the oldest stored episode was cut by overwriting and ``frame_stack = k >
  1``: then its first ``k - 1`` stored steps would need overwritten frames and are skipped (never
  padded).

Both bounds only move forward, so the sampleable set of an env is always one contiguous range
of absolute steps; a uniform draw over the buffer is a draw over the union of ``E`` ranges.

Per slot the index keeps ``ep_start`` (absolute step of the episode's first step), ``ep_end``
(its last step, ``-1`` while it runs) and ``final_fid`` (the final-observation record of an
episode's last step, ``-1`` elsewhere, so a step ends its episode exactly when ``final_fid >=
0``). Final observations of ended episodes live in a per-env ring of ``F`` records (``F`` grows
by doubling when needed) that the storage mirrors; a record dies with its owner step.

Deferred steps. The per-step fast path does not call a kernel per step: a *plain* step of every
env (none ends its episode, the envs' counters are equal) is only counted
(:meth:`EpisodeIndex.defer_plain`), and one kernel call accounts for all counted steps at once
(:meth:`EpisodeIndex.settle`) the next time anything reads the tables (``env``, ``slot_meta``,
``final_owner`` are properties that settle first) or after 4096 of them. The end state is the
one per-step accounting gives: only the last ``C`` steps of a ring leave slot records, and
``head``, the dead final records and the bounds depend on the end counters alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba
import numpy as np

from rlreplay.errors import CheckpointError, InvalidIdError

__all__ = ["EpisodeIndex", "expand_ranges", "sampleable_delta"]

Array = np.ndarray[Any, Any]

# Columns of the per-env state table.
COUNT, HEAD, LAST_END, LO, HI, F_COUNT, F_HEAD = range(7)
_NCOLS = 7
# Columns of the per-slot table: the episode's first step, the step's final record (-1 when
# the step does not end its episode, so "ends its episode" is `final_fid >= 0`) and the
# episode's last step (-1 while the episode runs; filled for its stored steps when it ends).
EP_START, FINAL_FID, EP_END = 0, 1, 2
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
            if slot_meta[e * C + j % C, FINAL_FID] >= 0:
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
    "last episode end {v} is not the owner of the newest live final record",
    "stored step {v} names a final record that is not live or not its own",
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
        if (f_count > f_head and last_end != prev) or (f_count == f_head and last_end >= head):
            return 6, e, last_end
        expected = -1
        for t in range(head, count):
            s = e * C + t % C
            start, fid = slot_meta[s, EP_START], slot_meta[s, FINAL_FID]
            if fid != -1 and (fid < f_head or fid >= f_count or final_owner[e * F + fid % F] != t):
                return 7, e, t
            if start < 0 or start > t or (t > head and start != expected):
                return 8, e, t
            if t > last_end and start != last_end + 1:
                return 8, e, t
            expected = t + 1 if fid >= 0 else start
        nxt = -1
        for t in range(count - 1, head - 1, -1):
            s = e * C + t % C
            if slot_meta[s, FINAL_FID] >= 0:
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


class EpisodeIndex:
    """Counters, ids, episode boundaries and sampleable ranges of a buffer's envs.

    Args:
        num_envs: ``E``.
        env_capacity: ``C``, slots per env.
        n_step: Window length ``n``.
        frame_stack: Stack depth ``k``.
        finals_capacity: Initial ``F`` (final records per env); grows by doubling.

    Cost: O(1) per added step (O(k) when the oldest episode is cut); the sampleable ranges are
    maintained incrementally, so sampling never scans the buffer.
    """

    def __init__(
        self,
        num_envs: int,
        env_capacity: int,
        n_step: int,
        frame_stack: int,
        finals_capacity: int,
        alloc: Callable[[str, tuple[int, ...], np.dtype[Any]], Array] | None = None,
    ) -> None:
        self.num_envs = E = num_envs
        self.env_capacity = C = env_capacity
        self.n_step = n_step
        self.frame_stack = frame_stack
        self.finals_capacity = finals_capacity
        # Where the tables live (a storage backend's allocate: shared memory for
        # storage="shared"); zero-filled arrays in process memory by default.
        self._alloc = alloc or (lambda name, shape, dtype: np.zeros(shape, dtype))
        i64 = np.dtype(np.int64)
        self._env = self._alloc("index-env", (E, _NCOLS), i64)
        self._env[:, LAST_END] = -1
        self._slot_meta = self._alloc("index-slot_meta", (E * C, 3), i64)
        self._slot_meta[:, FINAL_FID] = -1
        self._slot_meta[:, EP_END] = -1
        self._final_owner = self._alloc("index-final_owner", (E * finals_capacity,), i64)
        self._final_owner[:] = -1
        self._params = np.array([C, finals_capacity, n_step, frame_stack, 0], np.int64)
        # Deferred plain steps (see defer_plain): how many, and the step the next one gets.
        self._pending = 0
        self._next_t = -1
        # The counter every env has when they are known to be equal, else -1 (then
        # defer_plain compares them): kept by the writes that leave envs in lockstep.
        self._lockstep = 0
        self._max_pending = 4096  # bounds the work of one settle()
        # Called after deferred steps are accounted for, with the [lo, hi] table before them,
        # their first step and their number (the buffer's write hook, when it has one).
        self.on_settle: Callable[[Array, int, int], None] | None = None

    # ------------------------------------------------------------------ the tables
    # Every read goes through these properties, which first account for deferred steps: the
    # tables are never seen out of date.
    @property
    def env(self) -> Array:
        """Per-env counters ``(E, 7)`` int64, columns ``COUNT .. F_HEAD`` (a live view)."""
        if self._pending:
            self.settle()
        return self._env

    @property
    def slot_meta(self) -> Array:
        """Per-slot ``(E * C, 3)`` int64, columns ``EP_START, FINAL_FID, EP_END`` (live)."""
        if self._pending:
            self.settle()
        return self._slot_meta

    @property
    def final_owner(self) -> Array:
        """Per final record: the absolute step that owns it, -1 if none (live)."""
        if self._pending:
            self.settle()
        return self._final_owner

    def defer_plain(self) -> int:
        """Take one step of every env, none ending its episode, and account for it later.

        The per-step fast path: no kernel call per step. The deferred steps are accounted for
        (one kernel call for all of them) before anything reads the tables, or once
        4096 of them are waiting (any number is correct: a ring of ``C`` keeps the last ``C``).

        Returns:
            The absolute step every env's new step gets (the envs are in lockstep: their
            counters are equal), or ``-1``, having deferred nothing, if they are not.
        """
        t = self._next_t
        if t < 0:
            t = self._lockstep
        if t < 0:
            counts = self._env[:, COUNT]
            t = int(counts[0])
            if self.num_envs > 1 and not (counts == t).all():
                return -1
        self._next_t = t + 1
        self._pending += 1
        if self._pending >= self._max_pending:
            self.settle()
        return t

    def settle(self) -> None:
        """Account for the deferred plain steps now (one kernel call)."""
        n = self._pending
        if n:
            hook = self.on_settle
            before = self._env[:, LO : HI + 1].copy() if hook is not None else None
            t0 = self._next_t - n
            self._pending = 0
            self._next_t = -1
            self._lockstep = t0 + n  # deferred steps keep the envs in lockstep
            _advance_plain(self._env, self._slot_meta, self._final_owner, self._params, n)
            if hook is not None and before is not None:
                hook(before, t0, n)

    def raw_tables(self) -> tuple[Array, Array, Array, Array]:
        """``(env, slot_meta, final_owner, params)`` as they are, deferred steps not accounted.

        For a compiled writer that accounts for deferred steps itself (the lockstep kernel's
        episode ends): it must then reset the deferral counters as :meth:`settle` does. The
        first two never move; ``final_owner`` is replaced when the final records are
        reallocated, which bumps ``params[P_G]``.
        """
        return self._env, self._slot_meta, self._final_owner, self._params

    @property
    def ep_start(self) -> Array:
        """Per slot: absolute step of the first step of the slot's episode (a strided view)."""
        out: Array = self.slot_meta[:, EP_START]
        return out

    @property
    def ep_end(self) -> Array:
        """Per slot: absolute last step of the slot's episode, -1 while it runs (a view)."""
        out: Array = self.slot_meta[:, EP_END]
        return out

    @property
    def final_fid(self) -> Array:
        """Per slot: the step's final record, or -1 if it does not end its episode (a view)."""
        out: Array = self.slot_meta[:, FINAL_FID]
        return out

    # ------------------------------------------------------------------ writing
    def reserve_finals(self, rows_env: Array, rows_done: Array) -> tuple[Array, Array] | None:
        """Make room for the final records of the episodes that end in the coming rows.

        Returns:
            ``None`` when the ring was big enough, else ``(old_positions, new_positions)`` of
            the live records after doubling ``F``; the storage must move its finals likewise.
        """
        need = _finals_needed(self.env, rows_env, rows_done)
        if need <= self.finals_capacity:
            return None
        live = self.env[:, F_COUNT] - self.env[:, F_HEAD]
        old_F = self.finals_capacity
        new_F = old_F
        while new_F < need:
            new_F *= 2
        # Move every live record r of env e from e*F + r%F to e*F' + r%F'.
        counts = live
        env_of = np.repeat(np.arange(self.num_envs), counts)
        fid = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        fid += np.repeat(self.env[:, F_HEAD], counts)
        old_pos = env_of * old_F + fid % old_F
        new_pos = env_of * new_F + fid % new_F
        owner = self._alloc("index-final_owner", (self.num_envs * new_F,), np.dtype(np.int64))
        owner[:] = -1
        owner[new_pos] = self.final_owner[old_pos]
        self._final_owner = owner
        self.finals_capacity = new_F
        self._params[P_F] = new_F
        self._params[P_G] += 1
        return old_pos, new_pos

    def advance(
        self, rows_env: Array, rows_done: Array, out: Array | None = None
    ) -> tuple[Array, Array, Array, bool]:
        """Account for new steps (after :meth:`reserve_finals`).

        Args:
            rows_env: int64 env of each new step; one env's rows in time order.
            rows_done: bool, whether each step ends its episode.
            out: Optional preallocated ``(3, rows)`` int64 result array (the one-env path
                reuses one).

        Returns:
            ``(t, slots, final_positions, same_t)``: per row, its absolute step, slot and
            final-record position (-1 where the step does not end its episode); and whether
            every row got the same step (a lockstep step of envs: slots ``C`` apart).
        """
        if out is None:
            out = np.empty((3, rows_env.shape[0]), np.int64)
        same = _advance(
            self.env, self.slot_meta, self.final_owner, rows_env, rows_done, self._params, out
        )
        # One step of every env, the same for all (each env once): they stay in lockstep.
        lockstep = same and rows_env.shape[0] == self.num_envs
        self._lockstep = int(out[0, 0]) + 1 if lockstep else -1
        out_t, out_slot, out_fpos = out
        return out_t, out_slot, out_fpos, same

    def end_running(self, e: int) -> tuple[int, int, int]:
        """Make env ``e``'s newest stored step the last step of its episode.

        Room for one final record must have been reserved (:meth:`reserve_finals`).

        Returns:
            ``(t, slot, final_position)`` of that step.

        Raises:
            InvalidIdError: The env stores no step, or its newest step already ends an episode.
        """
        C, F = self.env_capacity, self.finals_capacity
        t = int(self.env[e, COUNT]) - 1
        head = int(self.env[e, HEAD])
        slot = e * C + t % C
        if t < head:
            raise InvalidIdError(f"env_id: env {e} stores no step; there is no episode to end")
        if self.slot_meta[slot, FINAL_FID] >= 0:
            raise InvalidIdError(
                f"env_id: the newest step of env {e} already ends its episode; nothing runs"
            )
        fid = int(self.env[e, F_COUNT])
        pos = e * F + fid % F
        self.final_owner[pos] = t
        self.slot_meta[slot, FINAL_FID] = fid
        self.env[e, F_COUNT] = fid + 1
        self.env[e, LAST_END] = t
        start = max(int(self.slot_meta[slot, EP_START]), head)
        self.slot_meta[e * C + np.arange(start, t + 1) % C, EP_END] = t
        _recompute_bounds(self.env, self.slot_meta, e, C, self.n_step, self.frame_stack)
        return t, slot, pos

    def jump(self, e: int, t: int, last_end: int, f_count: int) -> None:
        """Forget env ``e``'s stored steps and continue at absolute step ``t >= count``.

        For steps written by another process (shared storage) that were overwritten before this
        index accounted for them: the next step accounted for is ``t``; ``last_end`` and
        ``f_count`` are the env's last episode end and final-record count before it.
        """
        env = self.env
        env[e, COUNT] = env[e, HEAD] = env[e, LO] = env[e, HI] = t
        env[e, LAST_END] = last_end
        env[e, F_COUNT] = env[e, F_HEAD] = f_count
        self._lockstep = -1

    def dequeue(self, env_ids: Array, n: int) -> None:
        """Drop the oldest ``n`` stored steps of each env in ``env_ids`` (all must have them)."""
        _dequeue(self.env, self.slot_meta, self.final_owner, env_ids, n, self._params)

    def complete_episode_records(self) -> tuple[Array, Array]:
        """Per env, the range ``[first, first + size)`` of final-record ids whose episodes are
        wholly stored. Only the oldest live record's episode can have lost its start."""
        F = self.finals_capacity
        first = self.env[:, F_HEAD].copy()
        size = self.env[:, F_COUNT] - first
        has = size > 0
        envs = np.flatnonzero(has)
        owner = self.final_owner[envs * F + first[envs] % F]
        start = self.ep_start[self.slots(envs, owner)]
        cut = start < self.env[envs, HEAD]
        first[envs[cut]] += 1
        size[envs[cut]] -= 1
        return first, size

    def stored_per_env(self) -> Array:
        """Stored steps per env (``count - head``)."""
        out: Array = self.env[:, COUNT] - self.env[:, HEAD]
        return out

    def clear(self) -> None:
        """Forget every stored step; counters (and so ids) keep counting."""
        self.env[:, HEAD] = self.env[:, COUNT]
        self.env[:, F_HEAD] = self.env[:, F_COUNT]
        self.env[:, LO] = self.env[:, HEAD]
        self.env[:, HI] = self.env[:, HEAD]

    # ------------------------------------------------------------------ queries
    @property
    def stored(self) -> int:
        """Number of stored steps over all envs."""
        return int((self.env[:, COUNT] - self.env[:, HEAD]).sum())

    def bounds(self) -> Array:
        """A copy of the per-env ``[lo, hi]`` columns (``(E, 2)`` int64)."""
        return self.env[:, LO : HI + 1].copy()

    def sizes(self) -> Array:
        """Number of sampleable steps per env (int64, shape ``(E,)``)."""
        out: Array = np.maximum(self.env[:, HI] - self.env[:, LO], 0)
        return out

    def slots(self, env_ids: Array, t: Array) -> Array:
        """Slots of absolute steps ``t`` of envs ``env_ids``."""
        C = self.env_capacity
        out: Array = env_ids * C + t % C
        return out

    def ids(self, env_ids: Array, t: Array) -> Array:
        """Stable ids of steps."""
        out: Array = t * self.num_envs + env_ids
        return out

    def split_ids(self, ids: Any, *, name: str = "ids") -> tuple[Array, Array, Array]:
        """Map ids to ``(env_ids, t, stale)`` where ``stale`` marks overwritten steps.

        Raises:
            InvalidIdError: An id that was never issued.
        """
        env_ids, t, _, stale, _ = self.locate(ids, name=name)
        return env_ids, t, stale

    def locate(self, ids: Any, *, name: str = "ids") -> tuple[Array, Array, Array, Array, int]:
        """:meth:`split_ids` plus each id's slot and the number of stale ids (one kernel call).

        Returns:
            ``(env_ids, t, slots, stale, n_stale)``, arrays shaped like ``ids`` (a stale id's
            slot holds a newer step).

        Raises:
            InvalidIdError: Non-integer ids, or an id that was never issued.
        """
        arr = np.asarray(ids)
        if arr.dtype.kind not in "iu":
            raise InvalidIdError(f"{name}: expected integer ids, got dtype {arr.dtype}")
        flat = np.ascontiguousarray(arr, np.int64).reshape(-1)
        out = np.empty((3, flat.shape[0]), np.int64)
        stale: Array = np.empty(flat.shape[0], np.bool_)
        bad, n_stale = _locate_kernel(self.env, flat, self.env_capacity, out, stale)
        if bad >= 0:
            never = (flat < 0) | (flat // self.num_envs >= self.env[flat % self.num_envs, COUNT])
            raise InvalidIdError(
                f"{name}: {flat[never][:5].tolist()} were never issued by this buffer "
                f"(ids are >= 0 and below the next id of their env)"
            )
        if arr.ndim != 1:
            out = out.reshape((3, *arr.shape))
            stale = stale.reshape(arr.shape)
        env_ids, t, slots = out
        return env_ids, t, slots, stale, n_stale

    # ------------------------------------------------------------------ state
    def state_arrays(self) -> dict[str, Array]:
        """The arrays that make up the index (live views, for checkpoints and loading)."""
        arrays = {"env": self.env, "slot_meta": self.slot_meta, "final_owner": self.final_owner}
        self._lockstep = -1  # the caller may load other counters into them
        return arrays

    def check_loaded(self, terminated: Array | None = None, truncated: Array | None = None) -> None:
        """Refuse loaded tables that no sequence of writes produces (a checkpoint's meaning).

        Checked, per env: the counters (``0 <= count - capacity <= head <= count``, ids that
        fit an int64, ``-1 <= last_end < count``, the final-record cursors within the ring);
        every live final record owned by a stored step, in increasing order, whose slot names
        it back, the newest owned by ``last_end``; every stored step's episode start and end
        as its neighbours imply; the sampleable range as the counters give it. Kernels index
        with these values unchecked, so nothing is used before this passes. With the stored
        per-slot ``terminated``/``truncated`` flags (bool), also that they are 0 or 1 and that
        a stored step ends its episode (holds a final record) exactly when one is set, as the
        n-step windows read them. Cost: O(stored steps).

        Raises:
            CheckpointError: Naming the env and what is wrong.
        """
        self.settle()
        t_max = 2**62 // max(self.num_envs, 1)
        code, e, value = _check_kernel(
            self._env, self._slot_meta, self._final_owner, self._params, t_max
        )
        if code:
            count = int(self._env[e, COUNT])
            shown: object = value
            if code == 4:
                shown = (int(self._env[e, F_HEAD]), int(self._env[e, F_COUNT]))
            what = _CHECKS[code].format(v=shown, c=count)
            raise CheckpointError(f"checkpoint: episode index of env {e}: {what}")
        if terminated is None or truncated is None:
            return
        env = self._env
        env_ids, t = expand_ranges(env[:, HEAD], env[:, COUNT] - env[:, HEAD])
        slots = self.slots(env_ids, t)
        te, tr = terminated.view(np.uint8)[slots], truncated.view(np.uint8)[slots]
        ends = self._slot_meta[slots, FINAL_FID] >= 0
        bad = np.flatnonzero((te > 1) | (tr > 1) | (((te | tr) > 0) != ends))
        if bad.shape[0]:
            i = int(bad[0])
            raise CheckpointError(
                f"checkpoint: step {int(t[i])} of env {int(env_ids[i])}: terminated/truncated "
                f"({int(te[i])}, {int(tr[i])}) disagree with the episode index, by which it "
                f"{'ends' if ends[i] else 'does not end'} "
                "its episode"
            )

    def set_finals_capacity(self, finals_capacity: int) -> None:
        """Resize (empty) final-record bookkeeping before loading a checkpoint into it."""
        self.settle()
        self._lockstep = -1
        self.finals_capacity = finals_capacity
        self._params[P_F] = finals_capacity
        self._params[P_G] += 1
        owner = self._alloc(
            "index-final_owner", (self.num_envs * finals_capacity,), np.dtype(np.int64)
        )
        owner[:] = -1
        self._final_owner = owner
