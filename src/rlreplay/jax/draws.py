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

from rlreplay.jax._lib import jax, jnp

__all__ = ["balanced", "below", "mixed", "recent_count", "uniform"]


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


def _to_steps(lo: Any, sizes: Any, pos: Any) -> tuple[Any, Any]:
    """Global positions -> ``(env, t)`` over the ranges ``[lo_e, lo_e + sizes_e)``."""
    ends = jnp.cumsum(sizes)
    pos = pos.astype(lo.dtype)
    env = jnp.searchsorted(ends, pos, side="right", method="compare_all")
    env = jnp.minimum(env, sizes.shape[0] - 1).astype(lo.dtype)
    return env, lo[env] + pos - (ends[env] - sizes[env])


def uniform(lo: Any, hi: Any, key: Any, batch_size: int) -> tuple[Any, Any]:
    """``batch_size`` steps drawn uniformly, with replacement, from the union of ``[lo, hi)``.

    With no candidate at all the draws are arbitrary steps (``lo`` of the last env).
    """
    sizes = jnp.maximum(hi - lo, 0)
    bits = jax.random.bits(key, (batch_size,), jnp.uint32)
    return _to_steps(lo, sizes, below(bits, jnp.sum(sizes)))


def balanced(lo: Any, hi: Any, key: Any, batch_size: int) -> tuple[Any, Any]:
    """Per draw, an env uniform among those with a candidate, then a step uniform among its
    candidates ``[lo_e, hi_e)`` (the core's ``draw_balanced``, ALF ``get_batch``)."""
    sizes = jnp.maximum(hi - lo, 0)
    has = (sizes > 0).astype(sizes.dtype)
    k_env, k_t = jax.random.split(key)
    pick = below(jax.random.bits(k_env, (batch_size,), jnp.uint32), jnp.sum(has))
    env, _ = _to_steps(jnp.zeros_like(lo), has, pick)  # the pick-th env with a candidate
    t = lo[env] + below(jax.random.bits(k_t, (batch_size,), jnp.uint32), sizes[env])
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
    bits = jax.random.bits(key, (batch_size,), jnp.uint32)
    # A recent draw is a position among the newest steps: the ranges [hi - newest, hi).
    env_r, t_r = _to_steps(hi - newest, newest, below(bits[:recent], jnp.sum(newest)))
    env_a, t_a = _to_steps(lo, sizes, below(bits[recent:], jnp.sum(sizes)))
    return jnp.concatenate([env_r, env_a]), jnp.concatenate([t_r, t_a])


def distinct(
    env: Any, t: Any, candidate: Any, recent: Any, key: Any, batch_size: int, k: int
) -> tuple[Any, Any]:
    """Draws without replacement over the candidate rows, as the core's ``draw_mixed``
    with ``replacement=False`` and enough candidates (``batch_size <= #candidates``).

    ``env``, ``t``: the step of each row; ``candidate``: the rows drawable; ``recent``: the
    recent ones among them. The first ``min(k, #recent)`` draws are distinct recent rows, the
    others distinct rows among the candidates not drawn yet, each part in random order. For
    each part every row gets a random 31-bit key and the part takes the rows of its largest
    keys (:func:`jax.lax.top_k`, ``O(rows)``): a uniformly random ordered subset, up to ties
    of two keys among the largest (probability about ``batch_size * rows / 2**31``).
    """
    k_recent, k_rest = jax.random.split(key)

    def scores(key: Any, allowed: Any) -> Any:
        bits = jax.random.bits(key, allowed.shape, jnp.uint32)
        return jnp.where(allowed, (bits >> 1).astype(jnp.int32), -1)  # not allowed: -1

    rows = jnp.arange(candidate.shape[0], dtype=jnp.int32)
    taken = jnp.zeros(0, jnp.int32)
    n_recent = jnp.zeros((), jnp.int32)
    if k:
        _, taken = jax.lax.top_k(scores(k_recent, recent), k)
        n_recent = jnp.minimum(k, jnp.sum(recent, dtype=jnp.int32))
        # Recent picks past the recent rows' count are not drawn, and stay candidates.
        drawn = rows[:k] < n_recent
        candidate = candidate.at[jnp.where(drawn, taken, candidate.shape[0])].set(
            False, mode="drop"
        )
    # Fresh keys: the recent rows left over lost to the picked ones, and keys they kept would
    # carry that into this draw.
    _, rest = jax.lax.top_k(scores(k_rest, candidate), batch_size)
    # Draw i is recent pick i while i < n_recent, then rest pick i - n_recent.
    i = jnp.arange(batch_size, dtype=jnp.int32)
    pick = rest[jnp.maximum(i - n_recent, 0)]
    if k:
        pick = jnp.where(i < n_recent, taken[jnp.minimum(i, k - 1)], pick)
    return env[pick], t[pick]
