"""Whole episodes on a device buffer: which ended episodes are wholly stored, and uniform
draws among them.

As in the NumPy core (:meth:`rlreplay.episodes.EpisodeIndex.complete_episode_records`), an
episode counts once it ended with a final observation (terminated or truncated) and while
every one of its steps is still stored. Its final record is live exactly while its last step
is stored, so env ``e``'s candidates are its live records ``[f_head, f_count)``; only the
oldest of them can belong to an episode whose first steps were overwritten (or dropped to free
a final record), and it is then skipped. A draw is uniform over the candidates of all envs
(:func:`rlreplay.torch.draws.to_steps` over those record ranges), as the core's
``sample_episodes`` draws. :mod:`rlreplay.jax.episodes` is the same in JAX.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlreplay.torch import draws

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from rlreplay.torch.ring import Ring

__all__ = ["complete_records", "draw_episodes"]


def complete_records(ring: Ring) -> tuple[Tensor, Tensor]:
    """Per env, ``(first, size)``: the final records ``[first, first + size)`` whose episodes
    are wholly stored."""
    import torch

    F = ring.config.finals_per_env
    first, size = ring.f_head, ring.f_count - ring.f_head
    owner = ring.final_end.index_select(0, ring.final_base + torch.remainder(first, F)) - 1
    start = ring.ep_start.index_select(0, ring.rows_of(owner, ring.envs))
    cut = ((size > 0) & (start < ring.head)).long()
    return first + cut, size - cut


def draw_episodes(
    ring: Ring, batch_size: int, gen: torch.Generator
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``batch_size`` complete episodes, uniform with replacement: ``(env, start, length)``
    of each (arbitrary where none is stored) and the number of complete episodes (0-d)."""
    import torch

    F = ring.config.finals_per_env
    first, size = complete_records(ring)
    total = size.sum()
    env, fid = draws.to_steps(first, size, draws.below(total, batch_size, gen))
    owner = ring.final_end.index_select(0, torch.add(torch.remainder(fid, F), env, alpha=F)) - 1
    start = ring.ep_start.index_select(0, ring.rows_of(owner, env))
    return env, start, owner - start + 1, total
