"""The Numba kernels behind :class:`~rlreplay.sampling.priorities.Priorities`.

One kernel per buffer operation, each doing all of its work (both trees included): a write
(:func:`_write_kernel`), a priority update (:func:`_update_kernel`), a rank-based re-sort
(:func:`_rank_kernel`), a rebuild of both trees (:func:`_rebuild_kernel`) and a draw with its
probabilities and importance weights (:func:`_draw_kernel`). The masses, their variants and the
rank snapshot are explained in :mod:`rlreplay.sampling.priorities`; every mass is computed by
:func:`_mass`, so incremental updates and a rebuild from saved priorities give bit-identical
trees.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from rlreplay.codegen.prefetch import prefetch_row
from rlreplay.sampling.trees import (
    _LANE,
    _MIN,
    _SHIFT,
    _SUM,
    _build_kernel,
    _recompute_ancestors_pair,
    _sample_kernel,
)

Array = np.ndarray[Any, Any]

# Kernel status codes of _update_kernel.
_OK, _BAD_VALUE, _TOO_LARGE = 0, 1, 2


@numba.njit(cache=True, inline="always")
def _mass(p: float, rank: int, alpha: float, rank_based: bool) -> float:
    """The sampling mass of a live slot; a zero priority stays 0 even when ``alpha == 0``."""
    if p <= 0.0:
        return 0.0
    if rank_based:
        return float(float(rank) ** -alpha)
    return float(p**alpha)


@numba.njit(cache=True, inline="always")
def _snapshot_rank(snap: Array, p: float) -> int:
    """``1 + #{snapshot priorities > p}``: binary search in the ascending negated snapshot."""
    return int(np.searchsorted(snap, -p)) + 1


@numba.njit(cache=True, inline="always")
def _set_leaf(sums: Array, mins: Array, slot: int, m: float) -> None:  # pragma: no cover - compiled
    """Leaf ``slot`` of both trees: the mass in the sum tree, ``+inf`` for 0 in the min tree."""
    group, lane = slot >> _SHIFT, slot & _LANE
    sums[group, lane] = m
    mins[group, lane] = m if m > 0.0 else np.inf


@numba.njit(cache=True)
def _write_kernel(
    prio: Array,
    live: Array,
    rank: Array,
    snap: Array,
    removed: Array,
    written: Array,
    priority: float,
    added: Array,
    alpha: float,
    rank_based: bool,
    sums: Array,
    mins: Array,
    levels: Array,
) -> None:  # pragma: no cover - compiled
    """Apply one write: removals, then new priorities, then additions (see ``on_write``).

    Leaves of both trees are set in that order, so a reused slot (removed, then added) ends up
    added; then the ancestors of every touched leaf are recomputed in both trees in one pass.
    A slot that is not live has rank 1, as in a new sampler (its rank is never read; keeping
    it so makes equal contents equal states, which checkpoints rely on).
    """
    nodes = np.empty(removed.shape[0] + added.shape[0], np.int64)
    k = 0
    for i in range(removed.shape[0]):
        s = removed[i]
        live[s] = False
        if rank_based:
            rank[s] = 1
        _set_leaf(sums, mins, s, 0.0)
        nodes[k] = s
        k += 1
    for i in range(written.shape[0]):
        prio[written[i]] = priority
        if rank_based and not live[written[i]]:
            rank[written[i]] = 1
    for i in range(added.shape[0]):
        s = added[i]
        live[s] = True
        p = prio[s]
        r = 1
        if rank_based:
            r = _snapshot_rank(snap, p)
            rank[s] = r
        _set_leaf(sums, mins, s, _mass(p, r, alpha, rank_based))
        nodes[k] = s
        k += 1
    if k > 0:
        _recompute_ancestors_pair(sums, _SUM, mins, _MIN, levels, nodes)


@numba.njit(cache=True)
def _update_kernel(
    prio: Array,
    live: Array,
    rank: Array,
    snap: Array,
    slots: Array,
    stale: Array,
    values: Array,
    clip_lo: float,
    clip_hi: float,
    eps: float,
    alpha: float,
    rank_based: bool,
    limit: float,
    sums: Array,
    mins: Array,
    levels: Array,
) -> tuple[int, int, int, float]:  # pragma: no cover - compiled
    """Check, then apply, priority updates in call order (a later duplicate wins).

    Returns ``(status, position, leaves, max)``: on ``_BAD_VALUE`` (NaN, infinite or negative
    at ``position``) or ``_TOO_LARGE`` (a priority above ``limit``) nothing was changed;
    otherwise ``leaves`` tree leaves were set (one per non-stale id of a live slot, duplicates
    counted; their ancestors recomputed in both trees) and ``max`` is the largest priority now
    held by an updated slot (values overwritten by a later duplicate do not count).
    """
    n = values.shape[0]
    for i in range(n):
        # The batch's priority and live lines start loading while the values are checked.
        prefetch_row(prio, slots[i])
        prefetch_row(live, slots[i])
        v = values[i]
        if not (v >= 0.0 and v < np.inf):  # NaN fails both comparisons
            return _BAD_VALUE, i, 0, 0.0
    for i in range(n):
        if not stale[i]:
            v = min(max(values[i], clip_lo), clip_hi) + eps
            if v > limit:
                return _TOO_LARGE, i, 0, v
    nodes = np.empty(n, np.int64)
    k = 0
    for i in range(n):
        if stale[i]:
            continue
        s = slots[i]
        v = min(max(values[i], clip_lo), clip_hi) + eps
        prio[s] = v
        if live[s]:
            r = 1
            if rank_based:
                r = _snapshot_rank(snap, v)
                rank[s] = r
            _set_leaf(sums, mins, s, _mass(v, r, alpha, rank_based))
            nodes[k] = s
            k += 1
    if k > 0:
        _recompute_ancestors_pair(sums, _SUM, mins, _MIN, levels, nodes[:k])
    top = 0.0
    for i in range(n):
        if not stale[i] and prio[slots[i]] > top:
            top = prio[slots[i]]
    return _OK, 0, k, top


@numba.njit(cache=True)
def _rank_kernel(
    prio: Array, slots: Array, order: Array, rank: Array, snapshot: Array
) -> None:  # pragma: no cover - compiled
    """Competition ranks ("1224") of ``slots`` sorted by descending priority (``order``).

    Writes the sorted negated priorities to ``snapshot[:n]`` and each slot's rank: its sorted
    position + 1, except that equal priorities all take the rank of the first of them.
    """
    r = 0
    for j in range(order.shape[0]):
        s = slots[order[j]]
        neg = -prio[s]
        if j == 0 or neg != snapshot[j - 1]:
            r = j + 1
        snapshot[j] = neg
        rank[s] = r


@numba.njit(cache=True)
def _rebuild_kernel(
    prio: Array,
    rank: Array,
    live: Array,
    alpha: float,
    rank_based: bool,
    sums: Array,
    mins: Array,
    levels: Array,
) -> None:  # pragma: no cover - compiled
    """Every slot's leaf from scratch (0 where not live), then every node of both trees."""
    for s in range(prio.shape[0]):
        r = rank[s] if rank_based else 1
        m = _mass(prio[s], r, alpha, rank_based) if live[s] else 0.0
        _set_leaf(sums, mins, s, m)
    _build_kernel(sums, levels, _SUM)
    _build_kernel(mins, levels, _MIN)


@numba.njit(cache=True)
def _draw_kernel(
    sums: Array,
    levels: Array,
    min_mass: float,
    uniforms: Array,
    stratified: bool,
    beta: float,
    lo: Array,
    C: int,
) -> tuple[Array, Array, Array, Array]:  # pragma: no cover - compiled
    """Draw one slot per uniform from the sum tree, then per draw: env, absolute step,
    ``P = m / total`` and ``w = (min_mass / m) ** beta``; returns ``(env, t, P, w)``.

    The slots are those of :meth:`SumTree.sample` for the same uniforms (the same kernel).
    Slot ``s = e * C + r`` holds, of env ``e``'s sampleable range ``[lo_e, hi_e)`` (at most
    ``C`` long, so ``t -> t % C`` is one-to-one on it), the one step ``t`` with ``t % C == r``:
    ``t = lo_e + ((r - lo_e) mod C)``. The weight is computed as a ratio ``<= 1`` raised to
    ``beta``, so it cannot overflow (it may underflow to 0).
    """
    n = uniforms.shape[0]
    total = sums[levels[0, 0], 0]
    slots = _sample_kernel(sums, levels, uniforms, stratified)
    out_env = np.empty(n, np.int64)
    out_t = np.empty(n, np.int64)
    out_p = np.empty(n, np.float64)
    out_w = np.empty(n, np.float32)
    for i in range(n):
        s = slots[i]
        m = sums[s >> _SHIFT, s & _LANE]
        e = s // C
        base = lo[e]
        out_env[i] = e
        out_t[i] = base + (s - e * C - base) % C
        out_p[i] = m / total
        out_w[i] = (min_mass / m) ** beta
    return out_env, out_t, out_p, out_w
