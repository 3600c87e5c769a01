"""Uniform sequence starts (R2D2, ALF ``get_batch``): uniform over stored steps or balanced
over envs, and, with ``pad=False``, only starts whose steps are all real.

The prioritized sampler draws its starts by priority instead
(:meth:`rlreplay.sampling.PrioritizedSampler.draw_starts`); both use the assembler's
definition of a valid start (:func:`rlreplay.assemble.sequences.valid_sequence_starts`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rlreplay.assemble.sequences import valid_sequence_starts
from rlreplay.episodes.index import HEAD, EpisodeIndex, expand_ranges
from rlreplay.errors import EmptyBufferError
from rlreplay.sampling.uniform import draw_balanced, draw_uniform, uniform_below

__all__ = ["draw_sequence_starts"]

_REJECTION_ROUNDS = 32  # sequence-start redraws before the exact fallback

Array = np.ndarray[Any, Any]


def draw_sequence_starts(
    index: EpisodeIndex,
    rng: np.random.Generator,
    batch_size: int,
    length: int,
    *,
    within_episode: bool,
    pad: bool,
    balance_envs: bool,
) -> tuple[Array, Array]:
    """Starts of sequences: uniform over stored steps, or env-balanced (ALF ``get_batch``).

    With ``pad=False`` only starts whose ``length`` steps are all real qualify: drawn from the
    steps that fit before each env's cursor, then (``within_episode``) by rejection of runs that
    cross an episode end, with an exact fallback when such starts are rare.

    Returns:
        ``(env_ids, t0)``; ordered by env when ``balance_envs``.

    Raises:
        EmptyBufferError: No start qualifies.
    """
    heads = index.env[:, HEAD]
    stored = index.stored_per_env()
    if not pad:
        stored = np.maximum(stored - length + 1, 0)  # runs must fit before the cursor
    if not stored.any():
        raise EmptyBufferError(
            f"sample_sequences: no start for {length} steps ({index.stored} stored steps)"
        )

    def draw(n: int) -> tuple[Array, Array]:
        if balance_envs:
            return draw_balanced(heads, stored, n, rng)
        return draw_uniform(heads, stored, n, rng)

    env_ids, t0 = draw(batch_size)
    if not pad and within_episode:
        env_ids, t0 = _reject_crossing(index, rng, env_ids, t0, stored, length, draw, balance_envs)
    if balance_envs:
        order = np.argsort(env_ids, kind="stable")
        env_ids, t0 = env_ids[order], t0[order]
    return env_ids, t0


def _reject_crossing(
    index: EpisodeIndex,
    rng: np.random.Generator,
    env_ids: Array,
    t0: Array,
    sizes: Array,
    length: int,
    draw: Callable[[int], tuple[Array, Array]],
    balance_envs: bool,
) -> tuple[Array, Array]:
    """Redraw starts whose run crosses an episode end, until none does.

    With ``balance_envs`` a redraw keeps the row's env (the env was chosen uniformly; only its
    start is redrawn), so every env with a valid start keeps the same mass.
    """
    heads = index.env[:, HEAD]
    for _ in range(_REJECTION_ROUNDS):
        bad = ~valid_sequence_starts(index, env_ids, t0, length, True)
        if not bad.any():
            return env_ids, t0
        if balance_envs:
            e = env_ids[bad]
            t0[bad] = heads[e] + uniform_below(sizes[e], rng)
        else:
            env_ids[bad], t0[bad] = draw(int(bad.sum()))
    # Such starts are rare: enumerate them once and draw among them exactly.
    all_env, all_t = expand_ranges(heads, sizes)
    ok = valid_sequence_starts(index, all_env, all_t, length, True)
    if not ok.any():
        raise EmptyBufferError(
            f"sample_sequences: no episode has {length} consecutive stored steps (pad=False)"
        )
    cand_env, cand_t = all_env[ok], all_t[ok]  # grouped by env
    bad = ~valid_sequence_starts(index, env_ids, t0, length, True)
    if balance_envs:
        per_env = np.bincount(cand_env, minlength=index.num_envs)
        e = env_ids[bad]
        lost = per_env[e] == 0  # envs without any valid start: choose among the others
        valid_envs = np.flatnonzero(per_env)
        e[lost] = valid_envs[rng.integers(0, valid_envs.shape[0], int(lost.sum()))]
        pick = (np.cumsum(per_env) - per_env)[e] + uniform_below(per_env[e], rng)
    else:
        pick = rng.integers(0, cand_env.shape[0], size=int(bad.sum()))
    env_ids[bad], t0[bad] = cand_env[pick], cand_t[pick]
    return env_ids, t0
