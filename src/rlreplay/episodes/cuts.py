"""Abandoned episodes: the steps they leave stored but never sampleable ("holes").

:meth:`EpisodeIndex.abandon_running <rlreplay.episodes.index.EpisodeIndex.abandon_running>` ends an
env's running episode at its newest step ``a`` with no final observation (``final_fid`` is
:data:`~rlreplay.episodes.kernels.ABANDONED`). Its steps ``t`` with ``t + n <= a`` keep their
complete ``n``-step windows; the steps ``t > a - n`` would need steps that never come, so they
are never sampleable. Those steps, ``[max(a - n + 1, episode start), a]``, are the abandoned
episode's *hole*. Holes lie inside the per-env range ``[lo, hi)`` (``hi > last_end >= a``), so
with holes an env's sampleable steps are ``[lo, hi)`` minus its holes.

Uniform draws stay exact by drawing over a *compressed* range ``[lo, lo + size)`` (``size``
excludes the holes) and mapping each drawn value past the holes before it
(:func:`unhole`): a bijection onto the sampleable steps, so recency windows and draws without
replacement keep their meaning. Holes are few (at most ``n`` steps per abandoned episode still
stored) and are found from a per-env list of abandon points, pruned as the ring moves on;
the index caches their table until ``head`` or ``lo`` of an env moves or an episode is
abandoned.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from rlreplay.episodes.kernels import ABANDONED, EP_END, EP_START, FINAL_FID

__all__ = ["Cuts", "Holes", "any_in_hole", "build_holes", "find_cuts", "hole_mask", "unhole"]

Array = np.ndarray[Any, Any]


class Cuts:
    """Per env, the stored steps that end abandoned episodes, and their cached holes.

    The lists are pruned of overwritten steps lazily; ``None`` after tables were loaded
    (found again by a scan on the next query). The :class:`Holes` table depends on the
    abandon points, ``head`` (which prunes them) and ``lo`` (which clips them) only: it is
    kept until one of those moves. O(E) per query when cached.
    """

    def __init__(self, num_envs: int) -> None:
        self._lists: list[list[int]] | None = [[] for _ in range(num_envs)]
        self._n = 0
        self._table: tuple[bytes, Holes] | None = None

    @property
    def maybe(self) -> bool:
        """Whether there may be holes (cheap; may lag overwrites until the next query)."""
        return self._lists is None or self._n > 0

    def add(self, e: int, t: int) -> None:
        """Step ``t`` of env ``e`` (stored, newer than every listed one) ends an abandoned
        episode. Needs the lists (:meth:`holes` builds them after :meth:`forget`)."""
        if self._lists is None:
            raise RuntimeError("Cuts.add: the abandon points were forgotten; query holes first")
        self._lists[e].append(t)
        self._n += 1
        self._table = None

    def forget(self) -> None:
        """Tables were (or may be) replaced: find the abandon points again when needed."""
        self._lists = None
        self._table = None

    def holes(
        self, head: Array, count: Array, lo: Array, slot_meta: Array, C: int, n: int
    ) -> Holes | None:
        """The holes inside every env's ``[lo, hi)``, or ``None`` if there are none."""
        key = head.tobytes() + lo.tobytes()
        if self._table is None or self._table[0] != key:
            if self._lists is None:
                self._lists = find_cuts(slot_meta, head, count, C)
            for e, cuts in enumerate(self._lists):
                drop = 0
                while drop < len(cuts) and cuts[drop] < head[e]:
                    drop += 1
                del cuts[:drop]
            self._n = sum(len(c) for c in self._lists)
            self._table = (key, build_holes(self._lists, slot_meta, lo, C, n))
        table = self._table[1]
        return table if table.per_env else None


def find_cuts(slot_meta: Array, head: Array, count: Array, C: int) -> list[list[int]]:
    """Per env, the stored steps that end an abandoned episode, in time order (a table scan)."""
    out: list[list[int]] = []
    for e in range(head.shape[0]):
        t = np.arange(int(head[e]), int(count[e]), dtype=np.int64)
        marked = slot_meta[e * C + t % C, FINAL_FID] == ABANDONED
        out.append(t[marked].tolist())
    return out


@dataclass(frozen=True)
class Holes:
    """The holes inside every env's ``[lo, hi)``, ready for :func:`unhole`.

    Attributes:
        per_env: Env -> ``(h0, cstart, cum)``: the holes' first steps, their first steps in
            compressed values (``h0`` less the hole steps before), and the running total of
            hole steps (a leading 0), each in time order.
        sizes: int64 ``(E,)``: hole steps inside ``[lo, hi)`` per env.
    """

    per_env: dict[int, tuple[Array, Array, Array]]
    sizes: Array


def build_holes(
    cuts: list[list[int]],
    slot_meta: Array,
    lo: Array,
    C: int,
    n: int,
    rows: Callable[[int, Array], Array] | None = None,
) -> Holes:
    """The holes of the abandon points ``cuts`` (per env, stored, in time order) that reach
    ``lo`` or beyond, clipped to start at ``lo``. O(abandon points).

    ``rows(e, t)``: the rows of ``slot_meta`` holding stored steps ``t`` of env ``e`` (by
    default their slots ``e * C + t % C``; a checkpoint file's table holds stored steps only).
    """
    per_env: dict[int, tuple[Array, Array, Array]] = {}
    sizes = np.zeros(lo.shape[0], np.int64)
    for e, c in enumerate(cuts):
        if not c:
            continue
        a = np.asarray(c, np.int64)
        a = a[a >= lo[e]]
        if not a.shape[0]:
            continue
        start = slot_meta[e * C + a % C if rows is None else rows(e, a), EP_START]
        h0 = np.maximum(np.maximum(a - n + 1, start), lo[e])
        size = a + 1 - h0
        cum = np.concatenate([np.zeros(1, np.int64), np.cumsum(size)])
        per_env[e] = (h0, h0 - cum[:-1], cum)
        sizes[e] = cum[-1]
    return Holes(per_env, sizes)


def hole_mask(slot_meta: Array, env_ids: Array, t: Array, C: int, n: int) -> Array:
    """Whether each stored step ``t`` of env ``env_ids`` lies in a hole: its episode was
    abandoned at ``a`` (its ``ep_end``) and ``t + n > a``. O(1) per step."""
    end = slot_meta[env_ids * C + t % C, EP_END]
    near = (end >= 0) & (t + n > end)
    out: Array = near.copy()
    if near.any():
        idx = np.flatnonzero(near)
        e, a = env_ids[idx], end[idx]
        out[idx] = slot_meta[e * C + a % C, FINAL_FID] == ABANDONED
    return out


@numba.njit(cache=True)
def any_in_hole(
    slot_meta: Array, ids: Array, E: int, C: int, n: int
) -> bool:  # pragma: no cover - compiled
    """Whether any stored step of ``ids`` lies in a hole (:func:`hole_mask`, one pass)."""
    for i in range(ids.shape[0]):
        e = ids[i] % E
        t = ids[i] // E
        end = slot_meta[e * C + t % C, EP_END]
        if end >= 0 and t + n > end and slot_meta[e * C + end % C, FINAL_FID] == ABANDONED:
            return True
    return False


def unhole(holes: Holes, env_ids: Array, t: Array) -> Array:
    """Map compressed steps to real ones: value ``v`` of env ``e`` goes past every hole of
    ``e`` that starts at or before where ``v`` lands (holes sorted, disjoint, from ``lo``).

    A hole ``[h0, h1)`` after ``j`` earlier hole steps starts at the compressed value
    ``h0 - j``; ``v`` lands past it exactly when ``v >= h0 - j``, and then moves ``h1 - h0``.
    """
    out = t.copy()
    for e, (_, cstart, cum) in holes.per_env.items():
        rows = np.flatnonzero(env_ids == e)
        if rows.shape[0]:
            out[rows] = t[rows] + cum[np.searchsorted(cstart, t[rows], side="right")]
    return out
