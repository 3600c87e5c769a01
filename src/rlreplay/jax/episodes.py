"""Whole episodes: which ended episodes are wholly stored, and uniform draws among them.

As in the NumPy core (:meth:`rlreplay.episodes.EpisodeIndex.complete_episode_records`), an
episode counts once it ended with a final observation (terminated or truncated) and while
every one of its steps is still stored. Its final record is live exactly while its last step
is stored, so env ``e``'s candidates are its live records ``[f_head, f_count)``; only the
oldest of them can belong to an episode whose first steps were overwritten (or dequeued by
the rule that frees a final record), and it is then skipped. A draw is uniform over the
candidates of all envs (:func:`rlreplay.jax.draws.uniform` over those record ranges), as the
core's ``sample_episodes`` draws.
"""

from __future__ import annotations

from typing import Any

from rlreplay.jax._lib import jnp
from rlreplay.jax.config import BufferConfig
from rlreplay.jax.draws import uniform
from rlreplay.jax.ring import rows_of
from rlreplay.jax.state import BufferState

__all__ = ["complete_records", "draw_episodes"]


def complete_records(config: BufferConfig, state: BufferState) -> tuple[Any, Any]:
    """Per env, ``(first, size)``: the final records ``[first, first + size)`` whose episodes
    are wholly stored."""
    F = config.finals_per_env
    envs = jnp.arange(config.num_envs, dtype=state.f_head.dtype)
    first, size = state.f_head, state.f_count - state.f_head
    owner = state.final_owner[envs * F + jnp.mod(first, F)]
    start = state.ep_start[rows_of(config, owner, envs)]
    cut = (size > 0) & (start < state.head)
    step = cut.astype(first.dtype)
    return first + step, size - step


def draw_episodes(
    config: BufferConfig, state: BufferState, key: Any, batch_size: int
) -> tuple[Any, Any, Any]:
    """``batch_size`` complete episodes, uniform with replacement: ``(env, start, length)``
    of each (arbitrary where none is stored)."""
    F = config.finals_per_env
    first, size = complete_records(config, state)
    env, fid = uniform(first, first + size, key, batch_size)
    owner = state.final_owner[env * F + jnp.mod(fid, F)]
    start = state.ep_start[rows_of(config, owner, env)]
    return env, start, owner - start + 1
