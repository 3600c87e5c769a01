"""Uniform draws over per-env ranges of steps, and the recency mix: pure functions.

As in the NumPy core (:mod:`rlreplay.sampling.uniform`), env ``e``'s candidates are the steps
``[lo_e, hi_e)``; enumerating the ranges env after env gives each candidate a *global
position* in ``[0, total)``, and a draw is a position mapped back to ``(env, t)`` through the
cumulative sizes. The recency mix draws ``k = ceil(recent_ratio * B)`` positions among the
``recent_steps`` newest candidates of each env (the ends of the ranges) and the other ``B - k``
among all of them, recent draws first, as the core's ``draw_mixed`` does with replacement.
"""

from __future__ import annotations

import math
from typing import Any

from rlreplay.jax import _random
from rlreplay.jax._lib import jax, jnp

__all__ = ["balanced", "below", "mixed", "recent_count", "search_right", "uniform"]

#: Longest sorted array that :func:`search_right` searches by comparing with every element.
COMPARE_ALL_MAX = 32


def below(bits: Any, n: Any) -> Any:
    """``floor(bits * n / 2**32)``: uint32 random bits to integers in ``[0, n)`` (0 if ``n`` is 0).

    One 32-bit word per draw (half of what :func:`jax.random.randint` draws, and the bulk of a
    sample's cost on a CPU): each integer has probability ``1/n`` up to a relative error of
    ``n / 2**32`` (``2.3e-5`` at 100,000 transitions). The 64-bit product is formed from
    16-bit halves, so it needs no 64-bit integers.
    """
    n = jnp.asarray(n).astype(jnp.uint32)
    mask = jnp.uint32(0xFFFF)
    rh, rl = bits >> 16, bits & mask
    nh, nl = n >> 16, n & mask
    mid1, mid2 = rh * nl, rl * nh
    carry = ((rl * nl) >> 16) + (mid1 & mask) + (mid2 & mask)
    return rh * nh + (mid1 >> 16) + (mid2 >> 16) + (carry >> 16)


def search_right(sorted_: Any, x: Any) -> Any:
    """``jnp.searchsorted(sorted_, x, side="right")``, by the method that suits the static
    sizes: up to :data:`COMPARE_ALL_MAX` elements, every ``x`` compared with every element
    (one fused compare and sum: the fastest for a few envs); beyond, a vectorised binary
    search (``log2(len(sorted_))`` steps over all of ``x``), whose cost grows with the batch
    alone where comparing with everything grows with the batch times the length (4,096 draws
    over 4,096 envs: 74 µs against 20 ms on a CPU)."""
    method = "compare_all" if sorted_.shape[0] <= COMPARE_ALL_MAX else "scan"
    return jnp.searchsorted(sorted_, x, side="right", method=method)


def _to_steps(lo: Any, sizes: Any, pos: Any) -> tuple[Any, Any]:
    """Global positions -> ``(env, t)`` over the ranges ``[lo_e, lo_e + sizes_e)``."""
    ends = jnp.cumsum(sizes)
    pos = pos.astype(lo.dtype)
    env = search_right(ends, pos)
    env = jnp.minimum(env, sizes.shape[0] - 1).astype(lo.dtype)
    return env, lo[env] + pos - (ends[env] - sizes[env])


def uniform(lo: Any, hi: Any, key: Any, batch_size: int) -> tuple[Any, Any]:
    """``batch_size`` steps drawn uniformly, with replacement, from the union of ``[lo, hi)``.

    With no candidate at all the draws are arbitrary steps (``lo`` of the last env).
    """
    sizes = jnp.maximum(hi - lo, 0)
    bits = _random.bits(key, batch_size)
    return _to_steps(lo, sizes, below(bits, jnp.sum(sizes)))


def balanced(lo: Any, hi: Any, key: Any, batch_size: int) -> tuple[Any, Any]:
    """Per draw, an env uniform among those with a candidate, then a step uniform among its
    candidates ``[lo_e, hi_e)`` (the core's ``draw_balanced``, ALF ``get_batch``)."""
    sizes = jnp.maximum(hi - lo, 0)
    has = (sizes > 0).astype(sizes.dtype)
    k_env, k_t = _random.split(key)
    pick = below(_random.bits(k_env, batch_size), jnp.sum(has))
    env, _ = _to_steps(jnp.zeros_like(lo), has, pick)  # the pick-th env with a candidate
    t = lo[env] + below(_random.bits(k_t, batch_size), sizes[env])
    return env, t.astype(lo.dtype)


def recent_count(recent_ratio: float, batch_size: int) -> int:
    """``ceil(recent_ratio * B)``, rounded as the core rounds it (``0.55 * 100`` is 55)."""
    return math.ceil(round(recent_ratio * batch_size, 9)) if recent_ratio > 0 else 0


def mixed(
    lo: Any, hi: Any, key: Any, batch_size: int, recent: int, recent_steps: Any
) -> tuple[Any, Any]:
    """``recent`` draws uniform over the ``recent_steps`` newest candidates of each env, then
    ``batch_size - recent`` uniform over all candidates; each with replacement."""
    sizes = jnp.maximum(hi - lo, 0)
    newest = jnp.minimum(sizes, jnp.asarray(recent_steps).astype(sizes.dtype))
    bits = _random.bits(key, batch_size)
    # A recent draw is a position among the newest steps: the ranges [hi - newest, hi).
    env_r, t_r = _to_steps(hi - newest, newest, below(bits[:recent], jnp.sum(newest)))
    env_a, t_a = _to_steps(lo, sizes, below(bits[recent:], jnp.sum(sizes)))
    return jnp.concatenate([env_r, env_a]), jnp.concatenate([t_r, t_a])


def ordered_subset(key: Any, n: Any, size: int) -> Any:
    """``size`` distinct integers whose first ``min(n, size)`` are a uniformly random ordered
    subset of ``[0, n)`` (``n`` may be traced; the rest, when ``n < size``, are not in it).

    Floyd's algorithm picks a uniformly random ``size``-subset of ``[0, max(n, size))`` in
    ``size`` steps of ``O(size)`` (no pass over the population), a random permutation orders
    it, and values ``>= n`` move last, keeping the order of the others.
    """
    k_pick, k_order = _random.split(key)
    m = jnp.maximum(jnp.asarray(n, jnp.int32), size)
    bits = _random.bits(k_pick, size)

    def step(i: Any, chosen: Any) -> Any:
        j = m - size + i  # the population grows by one value per step: [0, j]
        t = below(bits[i], j + 1).astype(jnp.int32)
        return chosen.at[i].set(jnp.where(jnp.any(chosen == t), j, t))

    chosen = jax.lax.fori_loop(0, size, step, jnp.full(size, -1, jnp.int32))
    chosen = chosen[jax.random.permutation(k_order, size)]
    return chosen[jnp.argsort(chosen >= n, stable=True)]


def distinct(
    lo: Any, hi: Any, key: Any, batch_size: int, recent: int, recent_steps: Any
) -> tuple[Any, Any]:
    """Draws without replacement, as the core's ``draw_mixed`` with ``replacement=False``
    and ``batch_size <= #candidates``: the first ``k = min(recent, #recent candidates)`` are
    distinct recent candidates, the others distinct among the candidates not drawn yet, each
    part a uniformly random ordered subset. ``O(batch_size ** 2)`` compares, in
    ``batch_size`` sequential steps (:func:`ordered_subset`); nothing is ``O(capacity)``."""
    sizes = jnp.maximum(hi - lo, 0)
    total = jnp.sum(sizes)
    k_recent, k_rest = _random.split(key)
    k = jnp.zeros((), jnp.int32)
    taken = jnp.zeros(0, lo.dtype)
    env_r = t_r = jnp.zeros(0, lo.dtype)
    if recent:
        newest = jnp.minimum(sizes, jnp.asarray(recent_steps).astype(sizes.dtype))
        n_recent = jnp.sum(newest)
        k = jnp.minimum(recent, n_recent).astype(jnp.int32)
        env_r, t_r = _to_steps(hi - newest, newest, ordered_subset(k_recent, n_recent, recent))
        # Their global positions, sorted; the picks past k are no picks (past every position).
        pos = (jnp.cumsum(sizes) - sizes)[env_r] + t_r - lo[env_r]
        valid = jnp.arange(recent) < k
        taken = jnp.sort(jnp.where(valid, pos, jnp.iinfo(lo.dtype).max // 2))
    v = ordered_subset(k_rest, total - k, batch_size).astype(lo.dtype)
    if recent:
        # The v-th position not taken (the core's mapping): v plus the taken ones at or below.
        shifted = taken - jnp.arange(recent, dtype=lo.dtype)
        v = v + search_right(shifted, v).astype(lo.dtype)
    env_a, t_a = _to_steps(lo, sizes, v)
    i = jnp.arange(batch_size, dtype=jnp.int32)
    env = env_a[jnp.maximum(i - k, 0)]
    t = t_a[jnp.maximum(i - k, 0)]
    if recent:
        first = jnp.minimum(i, recent - 1)
        env = jnp.where(i < k, env_r[first], env)
        t = jnp.where(i < k, t_r[first], t)
    return env, t
