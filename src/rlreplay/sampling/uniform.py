"""Uniform draws over the union of per-env sampleable ranges."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["draw_uniform"]

Array = np.ndarray[Any, Any]


def draw_uniform(
    lo: Array, sizes: Array, batch_size: int, rng: np.random.Generator
) -> tuple[Array, Array]:
    """Draw ``batch_size`` steps uniformly, with replacement, from ranges ``[lo_e, lo_e+size_e)``.

    One integer ``u`` in ``[0, sum(sizes))`` per draw; the env is the range ``u`` falls in
    (binary search over the cumulative sizes) and the step is ``lo_e`` plus the offset of ``u``
    inside that range. Every sampleable step thus has probability ``1 / sum(sizes)``.

    Args:
        lo: First sampleable absolute step per env.
        sizes: Number of sampleable steps per env (``sum > 0``).
        batch_size: Number of draws.
        rng: The buffer's generator (the only source of randomness).

    Returns:
        ``(env_ids, t)``, int64 arrays of length ``batch_size``.
    """
    if sizes.shape[0] == 1:
        u = rng.integers(0, sizes[0], size=batch_size, dtype=np.int64)
        return np.zeros(batch_size, np.int64), u + lo[0]
    cum = np.cumsum(sizes)
    u = rng.integers(0, cum[-1], size=batch_size, dtype=np.int64)
    env_ids = np.searchsorted(cum, u, side="right")
    t = u - (cum[env_ids] - sizes[env_ids]) + lo[env_ids]
    return env_ids.astype(np.int64, copy=False), t
