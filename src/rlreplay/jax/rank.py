"""Rank-based prioritized replay: exact ranks of the priorities, computed at each draw.

The law is :class:`rlreplay.PrioritizedReplayBuffer`'s ``variant="rank_based"`` with exact
ranks (its ``sort_interval=1``): over the drawable transitions (sampleable, priority ``> 0``),
``rank = 1 + #{drawable priorities > p}`` (competition ranking: equal priorities share a rank)
and the mass is ``rank ** -alpha``; ``P(i)`` is the mass over the total, and importance
weights are normalised by the smallest mass.

Why at each draw: one new priority can move the rank of every other transition, so a tree of
rank masses kept up to date costs a sort per write and per update anyway. The core amortises
that sort over ``sort_interval`` changes and ranks the changes in between against the last
sort's snapshot, a path-dependent approximation that a pure ``sample`` (which returns no
state) cannot reproduce; a sort per draw is exact, ``O(N log N)`` for ``N`` slots. The
buffer's tree holds a mass of 1 per drawable slot (so writes and updates cost what they cost
a proportional buffer, and the tree's leaves say which slots are drawable).
"""

from __future__ import annotations

from typing import Any

from rlreplay.jax._lib import jnp, lax
from rlreplay.jax.config import BufferConfig
from rlreplay.jax.state import PriorityState

__all__ = ["masses"]


def masses(config: BufferConfig, pri: PriorityState) -> Any:
    """``(n0,)`` float32: each slot's rank mass, 0 where the slot is not drawable."""
    n0 = pri.prio.shape[0]
    drawable = pri.sums[0] > 0
    # Priorities of drawable slots are finite and > 0, so their float32 bits order them as
    # int32 values do; XLA sorts integers faster. The undrawable (-1) sort last.
    bits = jnp.where(drawable, lax.bitcast_convert_type(pri.prio, jnp.int32), -1)
    slots = jnp.arange(n0, dtype=jnp.int32)
    neg, order = lax.sort((-bits, slots), num_keys=1, is_stable=False)  # descending
    # Competition ranks: the sorted position of the first of each run of equal priorities.
    first = jnp.concatenate([jnp.ones(1, bool), neg[1:] != neg[:-1]])
    rank = lax.cummax(jnp.where(first, slots, 0)) + 1
    mass = jnp.where(neg < 0, jnp.power(rank.astype(jnp.float32), jnp.float32(-config.alpha)), 0.0)
    return jnp.zeros(n0, jnp.float32).at[order].set(mass, unique_indices=True)
