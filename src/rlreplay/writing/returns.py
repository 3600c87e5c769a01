"""Discounted returns recorded per step when episodes complete (ALF ``record_episodic_return``).

When an episode ends, every stored step ``t`` of it gets ``G_t = sum_{j>=t} gamma^(j-t) r_j``
to the episode's end (rewards clipped to ``reward_clip`` first, when given); steps of running
episodes hold ``default_return``. The recursion runs backwards over the episode's stored steps,
so completing an episode of length ``L`` costs O(L): amortised O(1) per step.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from rlreplay.episodes.index import EP_START, HEAD, EpisodeIndex

__all__ = ["record_returns"]

Array = np.ndarray[Any, Any]


@numba.njit(cache=True)
def _record(
    returns: Array,
    rewards: Array,
    slot_meta: Array,
    env: Array,
    rows_env: Array,
    rows_t: Array,
    rows_done: Array,
    C: int,
    gamma: float,
    clip: Array,
    default: float,
) -> None:  # pragma: no cover - compiled
    for i in range(rows_env.shape[0]):
        e = rows_env[i]
        t = rows_t[i]
        slot = e * C + t % C
        returns[slot] = default
        if not rows_done[i]:
            continue
        # Only steps still stored after this write (>= head) belong to the episode.
        start = max(slot_meta[slot, EP_START], env[e, HEAD])
        g = 0.0
        for j in range(t, start - 1, -1):
            s = e * C + j % C
            r = min(max(float(rewards[s]), clip[0]), clip[1])
            g = r + gamma * g
            returns[s] = g


def record_returns(
    returns: Array,
    rewards: Array,
    index: EpisodeIndex,
    rows_env: Array,
    rows_t: Array,
    rows_done: Array,
    gamma: float,
    reward_clip: tuple[float, float] | None,
    default: float,
) -> None:
    """Update ``returns`` after a write of rows ``(rows_env, rows_t)``."""
    clip = np.array(reward_clip if reward_clip is not None else (-np.inf, np.inf), np.float64)
    _record(
        returns, rewards, index.slot_meta, index.env, rows_env, rows_t, rows_done,
        index.env_capacity, gamma, clip, default,
    )  # fmt: skip
