"""Uniform draws over the union of per-env sampleable ranges, with recency and no-replacement.

The sampleable steps of env ``e`` are the range ``[lo_e, lo_e + size_e)``. Enumerating the
ranges env after env gives every sampleable step a *global position* in ``[0, total)``; a draw
is a position, mapped back to ``(env, t)`` by a binary search over the cumulative sizes. Draws
without replacement are distinct positions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlreplay.errors import ConfigError
from rlreplay.spec.arguments import shown
from rlreplay.spec.schema import positive_int

__all__ = [
    "DrawOptions",
    "draw_balanced",
    "draw_mixed",
    "draw_options",
    "draw_uniform",
    "positions_to_steps",
    "uniform_below",
]

Array = np.ndarray[Any, Any]


def positions_to_steps(lo: Array, sizes: Array, pos: Array) -> tuple[Array, Array]:
    """Map global positions to ``(env_ids, t)``."""
    if sizes.shape[0] == 1:
        return np.zeros(pos.shape[0], np.int64), pos + lo[0]
    cum = np.cumsum(sizes)
    env_ids = np.searchsorted(cum, pos, side="right").astype(np.int64, copy=False)
    t = pos - (cum[env_ids] - sizes[env_ids]) + lo[env_ids]
    return env_ids, t


def draw_uniform(
    lo: Array, sizes: Array, batch_size: int, rng: np.random.Generator, total: int | None = None
) -> tuple[Array, Array]:
    """Draw ``batch_size`` steps uniformly, with replacement, from ranges ``[lo_e, lo_e+size_e)``.

    Every step has probability ``1 / sum(sizes)`` (up to the 2**-53 resolution of a float64
    uniform); one ``rng.random`` draw each (the only source of randomness: about 1 µs for a
    batch, where ``rng.integers`` spends 4 µs in fixed overhead). ``total`` is ``sum(sizes)``
    if the caller has it already.

    Returns:
        ``(env_ids, t)``, int64 arrays of length ``batch_size``.
    """
    n = int(sizes.sum()) if total is None else total
    return positions_to_steps(lo, sizes, uniform_below(n, rng, batch_size))


def _distinct(n: int, k: int, rng: np.random.Generator) -> Array:
    """``k`` distinct integers from ``[0, n)`` in random order (``k <= n``)."""
    out: Array = rng.choice(n, size=k, replace=False).astype(np.int64, copy=False)
    return out


def draw_mixed(
    lo: Array,
    hi: Array,
    batch_size: int,
    rng: np.random.Generator,
    *,
    recent_ratio: float,
    recent_steps: int,
    replacement: bool,
) -> tuple[Array, Array]:
    """Draw a batch mixing recent data, with or without replacement (ALF ``get_batch``).

    ``ceil(recent_ratio * B)`` draws are uniform over the ``recent_steps`` newest sampleable
    steps of each env; the rest are uniform over all sampleable steps. Without replacement the
    recent draws are distinct, and the rest are distinct among the steps not already drawn, so
    the batch has no duplicates whenever ``B <= total``; a larger batch falls back to drawing
    with replacement (there are not enough distinct steps).

    Args:
        lo: First sampleable step per env.
        hi: End (exclusive) of the sampleable steps per env.
        batch_size: ``B``.
        rng: The buffer's generator.
        recent_ratio: Fraction of the batch drawn from recent steps, in ``[0, 1]``.
        recent_steps: How many newest steps per env count as recent (``>= 1``).
        replacement: Whether a step may be drawn more than once.

    Returns:
        ``(env_ids, t)``.
    """
    sizes = np.maximum(hi - lo, 0)
    total = int(sizes.sum())
    # round() first: 0.55 * 100 is 55.000000000000007 in binary floating point.
    k = math.ceil(round(recent_ratio * batch_size, 9)) if recent_ratio > 0 else 0
    distinct = not replacement and batch_size <= total
    if k == 0:
        pos = _distinct(total, batch_size, rng) if distinct else None
        if pos is None:
            return draw_uniform(lo, sizes, batch_size, rng)
        return positions_to_steps(lo, sizes, pos)
    recent = np.minimum(sizes, recent_steps)
    n_recent = int(recent.sum())
    if distinct:
        k = min(k, n_recent)
        recent_pick = _distinct(n_recent, k, rng)
    else:
        recent_pick = rng.integers(0, n_recent, size=k, dtype=np.int64)
    # The recent range of env e sits at the end of its range: global offset of its start.
    recent_start = np.cumsum(sizes) - recent
    env_r = (
        np.searchsorted(np.cumsum(recent), recent_pick, side="right")
        if recent.shape[0] > 1
        else np.zeros(k, np.int64)
    )
    recent_pos = recent_start[env_r] + recent_pick - (np.cumsum(recent) - recent)[env_r]
    rest = batch_size - k
    if distinct:
        # Distinct positions among the total - k steps not drawn yet, shifted past the drawn
        # ones: v maps to the v-th position not in `taken` (a sorted set).
        taken = np.sort(recent_pos)
        v = _distinct(total - k, rest, rng)
        rest_pos = v + np.searchsorted(taken - np.arange(k), v, side="right")
    else:
        rest_pos = rng.integers(0, total, size=rest, dtype=np.int64)
    return positions_to_steps(lo, sizes, np.concatenate([recent_pos, rest_pos]))


def draw_balanced(
    lo: Array, sizes: Array, batch_size: int, rng: np.random.Generator
) -> tuple[Array, Array]:
    """Env uniform among envs with ``size > 0``, then a step uniform within that env."""
    envs = np.flatnonzero(sizes > 0)
    env_ids = envs[rng.integers(0, envs.shape[0], size=batch_size)]
    return env_ids.astype(np.int64, copy=False), lo[env_ids] + uniform_below(sizes[env_ids], rng)


def uniform_below(n: Array | int, rng: np.random.Generator, size: int | None = None) -> Array:
    """One integer uniform in ``[0, n_i)`` per entry of ``n`` (all ``n_i >= 1``), or ``size``
    of them in ``[0, n)`` for an int ``n``: one ``rng.random`` draw each, floored (``u * n``
    may round up to ``n``, hence the clip)."""
    count = size if size is not None else np.shape(n)[0]
    out: Array = (rng.random(count) * n).astype(np.int64)
    np.minimum(out, np.subtract(n, 1), out=out)
    return out


@dataclass(frozen=True)
class DrawOptions:
    """How :meth:`ReplayBuffer.sample` mixes recent data and whether it may repeat items."""

    recent_ratio: float
    recent_steps: int
    replacement: bool


def draw_options(recent_ratio: Any, recent_steps: Any, replacement: Any) -> DrawOptions:
    if isinstance(recent_ratio, bool | np.timedelta64) or not isinstance(
        recent_ratio, int | float | np.integer | np.floating
    ):
        raise ConfigError(f"recent_ratio: expected a number in [0, 1], got {shown(recent_ratio)}")
    # (an int is compared as it is: float() of a huge one would overflow)
    if not 0 <= recent_ratio <= 1 or not 0.0 <= float(recent_ratio) <= 1.0:
        raise ConfigError(f"recent_ratio: expected a number in [0, 1], got {shown(recent_ratio)}")
    if not isinstance(replacement, bool | np.bool_):
        raise ConfigError(f"replacement: expected a bool, got {shown(replacement)}")
    return DrawOptions(
        float(recent_ratio), positive_int("recent_steps", recent_steps), bool(replacement)
    )
