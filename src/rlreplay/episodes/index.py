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

Both bounds only move forward, so the sampleable set of an env is one contiguous range of
absolute steps, less the holes of abandoned episodes (below); a uniform draw over the buffer is
a draw over the union of ``E`` ranges.

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

Abandoned episodes (:meth:`EpisodeIndex.abandon_running`) end without a final record; the
steps whose windows they leave incomplete stay stored but are never sampleable, so an env's
sampleable steps are ``[lo, hi)`` minus those *holes* (see :mod:`rlreplay.episodes.cuts`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rlreplay.episodes.cuts import Cuts, Holes, any_in_hole, hole_mask, unhole
from rlreplay.episodes.kernels import _CHECKS as _CHECKS
from rlreplay.episodes.kernels import _NCOLS as _NCOLS
from rlreplay.episodes.kernels import ABANDONED as ABANDONED
from rlreplay.episodes.kernels import COUNT as COUNT
from rlreplay.episodes.kernels import EP_END as EP_END
from rlreplay.episodes.kernels import EP_START as EP_START
from rlreplay.episodes.kernels import F_COUNT as F_COUNT
from rlreplay.episodes.kernels import F_HEAD as F_HEAD
from rlreplay.episodes.kernels import FINAL_FID as FINAL_FID
from rlreplay.episodes.kernels import HEAD as HEAD
from rlreplay.episodes.kernels import HI as HI
from rlreplay.episodes.kernels import LAST_END as LAST_END
from rlreplay.episodes.kernels import LO as LO
from rlreplay.episodes.kernels import P_C as P_C
from rlreplay.episodes.kernels import P_F as P_F
from rlreplay.episodes.kernels import P_G as P_G
from rlreplay.episodes.kernels import P_K as P_K
from rlreplay.episodes.kernels import P_N as P_N
from rlreplay.episodes.kernels import _advance as _advance
from rlreplay.episodes.kernels import _advance_plain as _advance_plain
from rlreplay.episodes.kernels import _check_kernel as _check_kernel
from rlreplay.episodes.kernels import _dequeue as _dequeue
from rlreplay.episodes.kernels import _finals_needed as _finals_needed
from rlreplay.episodes.kernels import _locate_kernel as _locate_kernel
from rlreplay.episodes.kernels import _recompute_bounds as _recompute_bounds
from rlreplay.episodes.kernels import expand_ranges as expand_ranges
from rlreplay.episodes.kernels import ring_runs as ring_runs
from rlreplay.episodes.kernels import sampleable_delta as sampleable_delta
from rlreplay.errors import CheckpointError, InvalidIdError

__all__ = ["EpisodeIndex", "expand_ranges", "ring_runs", "sampleable_delta"]

Array = np.ndarray[Any, Any]


def _zeros(name: str, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Array:
    """The default allocator: zero-filled arrays in process memory (module level: picklable)."""
    return np.zeros(shape, dtype)


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
        self._alloc = alloc or _zeros
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
        # Per env, the stored steps that end abandoned episodes (in time order; pruned lazily
        # once overwritten), or None when loaded tables must be scanned for them first.
        self._cuts = Cuts(E)
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
        if self.slot_meta[slot, FINAL_FID] != -1:  # a final record, or abandoned
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

    def abandon_running(self, e: int) -> int:
        """End env ``e``'s running episode at its newest step, with no final observation.

        The step gets no final record and no flag; its episode's steps whose ``n``-step
        windows are complete stay sampleable, the others (its *hole*) never become so, and
        the next step starts a new episode. O(length of the episode's stored part).

        Returns:
            The absolute step that now ends the abandoned episode (it may be overwritten
            already), or ``-1`` when no episode runs (no step yet, or the newest step ends
            its episode): then nothing changes.
        """
        env, meta, C = self.env, self.slot_meta, self.env_capacity
        t = int(env[e, COUNT]) - 1
        if t < 0 or int(env[e, LAST_END]) == t:
            return -1
        env[e, LAST_END] = t
        head = int(env[e, HEAD])
        if t >= head:  # still stored: mark it and tell the episode's stored steps its end
            self.holes()  # (the abandon points of loaded tables are found before the mark)
            slot = e * C + t % C
            meta[slot, FINAL_FID] = ABANDONED
            start = max(int(meta[slot, EP_START]), head)
            meta[e * C + np.arange(start, t + 1) % C, EP_END] = t
            self._cuts.add(e, t)
        _recompute_bounds(env, meta, e, C, self.n_step, self.frame_stack)
        return t

    @property
    def has_cuts(self) -> bool:
        """Whether abandoned episodes may leave holes (cheap; may lag overwrites)."""
        return self._cuts.maybe

    def holes(self) -> Holes | None:
        """The holes inside every env's ``[lo, hi)`` (``None`` if there are none; cached)."""
        if not self._cuts.maybe:
            return None
        env = self.env
        return self._cuts.holes(env[:, HEAD], env[:, COUNT], env[:, LO], self.slot_meta,
                                self.env_capacity, self.n_step)  # fmt: skip

    def fast_draws_ok(self, batch_size: int) -> bool:
        """Whether a batch drawn over the whole ``[lo, hi)`` ranges rarely hits a hole (at
        most 1 in 4 batches), so that redrawing the batches that do is cheaper than mapping."""
        holes = self.holes()
        if holes is None:
            return True
        env = self.env
        total = int(np.maximum(env[:, HI] - env[:, LO], 0).sum())
        return int(holes.sizes.sum()) * batch_size * 4 <= total

    def ids_in_hole(self, ids: Array) -> bool:
        """Whether any of the (stored) steps ``ids`` lies in a hole."""
        if not self.has_cuts:
            return False
        return bool(any_in_hole(self.slot_meta, ids, self.num_envs, self.env_capacity, self.n_step))

    def in_hole(self, env_ids: Array, t: Array) -> Array:
        """Whether stored steps ``t`` lie in a hole (never sampleable); all False without cuts."""
        if not self.has_cuts:
            return np.zeros(t.shape, np.bool_)
        return hole_mask(self.slot_meta, env_ids, t, self.env_capacity, self.n_step)

    def sampleable(self, env_ids: Array, t: Array) -> Array:
        """Whether steps ``t`` (of envs ``env_ids``, any issued steps) are sampleable now."""
        env = self.env
        ok: Array = (t >= env[env_ids, LO]) & (t < env[env_ids, HI])
        if self.has_cuts and ok.any():
            idx = np.flatnonzero(ok)
            ok[idx] = ~self.in_hole(env_ids[idx], t[idx])
        return ok

    def unhole(self, env_ids: Array, t: Array) -> Array:
        """Map steps drawn from the compressed ranges ``[lo, lo + sizes())`` to real steps
        (the identity without holes; see :func:`rlreplay.episodes.cuts.unhole`)."""
        holes = self.holes()
        return t if holes is None else unhole(holes, env_ids, t)

    def sampleable_steps(self) -> tuple[Array, Array]:
        """Every sampleable ``(env, t)``, env by env in time order."""
        env_ids, t = expand_ranges(self.env[:, LO], self.sizes())
        return env_ids, self.unhole(env_ids, t)

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

    def sampleable_changes(self, before: Array) -> tuple[Array, Array, Array, Array]:
        """``(removed_env, removed_t, added_env, added_t)``: the transitions that left and
        joined the sampleable set since ``before`` (a :meth:`bounds` snapshot), env by env in
        time order. Steps in the holes of abandoned episodes never join it."""
        removed_env, removed_t, added_env, added_t = sampleable_delta(before, self.bounds())
        if self.has_cuts and added_t.shape[0]:
            # [lo, hi) grew over the holes of abandoned episodes: those never become sampleable.
            keep = ~self.in_hole(added_env, added_t)
            added_env, added_t = added_env[keep], added_t[keep]
        return removed_env, removed_t, added_env, added_t

    def sizes(self) -> Array:
        """Number of sampleable steps per env (int64, shape ``(E,)``): ``hi - lo`` less holes."""
        out: Array = np.maximum(self.env[:, HI] - self.env[:, LO], 0)
        holes = self.holes()
        if holes is not None:
            out -= holes.sizes
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
        try:
            arr = np.asarray(ids)
        except (ValueError, TypeError, OverflowError):  # ragged nests, unconvertible objects
            arr = np.empty(0, object)
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
    @property
    def nbytes(self) -> int:
        """Bytes of the index's tables (read without touching its caches)."""
        return int(self.env.nbytes + self.slot_meta.nbytes + self.final_owner.nbytes)

    def state_arrays(self) -> dict[str, Array]:
        """The arrays that make up the index (live views, for checkpoints and loading)."""
        arrays = {"env": self.env, "slot_meta": self.slot_meta, "final_owner": self.final_owner}
        self._lockstep = -1  # the caller may load other counters into them
        self._cuts.forget()  # ... and other abandon marks: found again on the next query
        return arrays

    def state_rows(self) -> dict[str, tuple[str, Any]]:
        """Which of :meth:`state_arrays` are per slot (``"slots"``) or per final record
        (``"finals"``), each with the row a fresh index has: a checkpoint holds only their
        rows of stored steps and live records, the others read nothing before a write."""
        fresh_slot = np.zeros(3, np.int64)
        fresh_slot[[FINAL_FID, EP_END]] = -1
        return {"slot_meta": ("slots", fresh_slot), "final_owner": ("finals", -1)}

    def stored_runs(self) -> Array:
        """Slot ranges of the stored steps, env by env, oldest first (see
        :func:`~rlreplay.episodes.kernels.ring_runs`)."""
        env = self.env
        return ring_runs(env[:, HEAD], env[:, COUNT], self.env_capacity)

    def live_final_runs(self) -> Array:
        """Final-record positions of the live records, env by env, oldest first."""
        env = self.env
        return ring_runs(env[:, F_HEAD], env[:, F_COUNT], self.finals_capacity)

    def loaded_runs(self) -> dict[str, Array]:
        """``{"slots": stored_runs(), "finals": live_final_runs()}`` of counters just read from
        a checkpoint, once they are checked to describe the rings (:meth:`check_loaded`
        checks the rest once every array is in place).

        Raises:
            CheckpointError: An env whose stored steps or live final records are not a
                range of at most its ring's size, naming it.
        """
        env, C, F = self._env, self.env_capacity, self.finals_capacity
        count, head = env[:, COUNT], env[:, HEAD]
        f_count, f_head = env[:, F_COUNT], env[:, F_HEAD]
        # (Differences are taken only where both ends are >= 0: no int64 overflow.)
        bad_steps = (head < 0) | (count < head) | ((count >= 0) & (count - np.maximum(head, 0) > C))
        bad_finals = (f_head < 0) | (f_count < f_head)
        bad_finals |= (f_count >= 0) & (f_count - np.maximum(f_head, 0) > F)
        for bad, code in ((bad_steps, 2), (bad_finals, 4)):  # as check_loaded says it
            if bad.any():
                e = int(np.flatnonzero(bad)[0])
                shown = int(head[e]) if code == 2 else (int(f_head[e]), int(f_count[e]))
                what = _CHECKS[code].format(v=shown, c=int(count[e]))
                raise CheckpointError(f"checkpoint: episode index of env {e}: {what}")
        return {"slots": self.stored_runs(), "finals": self.live_final_runs()}

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
