"""Abandoned episodes: the steps they leave stored but never sampleable ("holes").

:meth:`EpisodeIndex.abandon_running <rlreplay.episodes.EpisodeIndex.abandon_running>` ends an
env's running episode at its newest step ``a`` with no final observation (``final_fid`` is
:data:`~rlreplay.episode_kernels.ABANDONED`). Its steps ``t`` with ``t + n <= a`` keep their
complete ``n``-step windows; the steps ``t > a - n`` would need steps that never come, so they
are never sampleable. Those steps, ``[max(a - n + 1, episode start), a]``, are the abandoned
episode's *hole*. Holes lie inside the per-env range ``[lo, hi)`` (``hi > last_end >= a``), so
with holes an env's sampleable steps are ``[lo, hi)`` minus its holes.

Uniform draws stay exact by drawing over a *compressed* range ``[lo, lo + size)`` (``size``
excludes the holes) and mapping each drawn value past the holes before it
(:func:`unhole`): a bijection onto the sampleable steps, so recency windows and draws without
replacement keep their meaning. Holes are few (at most ``n`` steps per abandoned episode still
stored) and are found from a per-env list of abandon points, pruned as the ring moves on.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlreplay.episode_kernels import ABANDONED, EP_END, EP_START, FINAL_FID

__all__ = ["find_cuts", "hole_mask", "holes_of", "unhole"]

Array = np.ndarray[Any, Any]


def find_cuts(slot_meta: Array, head: Array, count: Array, C: int) -> list[list[int]]:
    """Per env, the stored steps that end an abandoned episode, in time order (a table scan)."""
    out: list[list[int]] = []
    for e in range(head.shape[0]):
        t = np.arange(int(head[e]), int(count[e]), dtype=np.int64)
        marked = slot_meta[e * C + t % C, FINAL_FID] == ABANDONED
        out.append(t[marked].tolist())
    return out


def holes_of(
    cuts: list[int], slot_meta: Array, e: int, C: int, n: int, lo: int
) -> list[tuple[int, int]]:
    """The holes ``[h0, h1)`` of env ``e``'s abandon points ``cuts`` (stored, in time order)
    that reach ``lo`` or beyond, clipped to start at ``lo``."""
    out: list[tuple[int, int]] = []
    for a in cuts:
        if a < lo:
            continue
        start = int(slot_meta[e * C + a % C, EP_START])
        out.append((max(a - n + 1, start, lo), a + 1))
    return out


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


def unhole(holes: dict[int, list[tuple[int, int]]], env_ids: Array, t: Array) -> Array:
    """Map compressed steps to real ones: value ``v`` of env ``e`` goes past every hole of
    ``e`` that starts at or before where ``v`` lands (holes sorted, disjoint, from ``lo``).

    A hole ``[h0, h1)`` that starts after ``j`` earlier hole steps starts at the compressed
    value ``h0 - j``; ``v`` lands past it exactly when ``v >= h0 - j``, then moves ``h1 - h0``.
    """
    out = t.copy()
    for e, hs in holes.items():
        if not hs:
            continue
        rows = np.flatnonzero(env_ids == e)
        if not rows.shape[0]:
            continue
        h0 = np.array([h[0] for h in hs], np.int64)
        size = np.array([h[1] - h[0] for h in hs], np.int64)
        before = np.cumsum(size) - size  # hole steps before each hole
        passed = np.searchsorted(h0 - before, t[rows], side="right")
        out[rows] = t[rows] + np.concatenate([[0], np.cumsum(size)])[passed]
    return out
