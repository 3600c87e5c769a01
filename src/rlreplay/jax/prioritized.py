"""Prioritized replay over a sum and min tree: writes, updates, draws.

The law is :class:`rlreplay.PrioritizedReplayBuffer`'s. Proportional: over the
sampleable transitions, ``P(i) = p_i ** alpha / sum_k p_k ** alpha``; a transition of priority
0 is never drawn; importance weights are ``(P_min / P(i)) ** beta`` with ``P_min`` the smallest
probability over the whole buffer (the tree root's min); a new transition gets
``max(initial_priority, largest priority applied so far)``; updates are clipped to
``priority_clip``, ``eps`` is added, and ids whose transition was overwritten are ignored.
Rank-based: the same, with ranks for priorities (:mod:`rlreplay.jax.rank`).

A leaf holds a slot's mass only while the slot's step is sampleable (:mod:`rlreplay.jax.tree`
has the layout). One :meth:`add` changes the sampleable set of each env in two bounded
places (see :mod:`rlreplay.jax.ring`): the newest ``n_step + 1`` steps (``hi`` moves) and the
``frame_stack - 1`` steps at the head (``lo`` moves past a cut episode's start); their leaves
are recomputed, ``E * (n_step + frame_stack)`` in all. Only an eviction (an env dropping its
oldest episode for a final record, see
:attr:`~rlreplay.jax.config.BufferConfig.can_evict`) moves ``lo`` further: that write rebuilds
the tree, ``O(E * C)``, under :func:`jax.lax.cond` (which ``vmap`` turns into both branches:
with ``finals_per_env >= env_capacity`` the rebuild is not even compiled). :func:`clear`
empties the tree, ``O(E * C)``.
"""

from __future__ import annotations

from typing import Any

from rlreplay.jax import _random, rank, tree
from rlreplay.jax._lib import jnp, lax
from rlreplay.jax.config import BufferConfig, tree_levels
from rlreplay.jax.holes import in_hole
from rlreplay.jax.ring import Written, rows_of, sampleable, step_in_row
from rlreplay.jax.state import BufferState, PriorityState

__all__ = ["after_write", "beta_at", "clear", "draw", "pick", "rebuild", "update"]


def mass_of(config: BufferConfig, prio: Any) -> Any:
    """The tree's mass of priorities (0 stays 0, even with ``alpha = 0``).

    Rank-based buffers keep a mass of 1 per drawable transition in the tree (what is drawn
    from, and :meth:`~rlreplay.jax.JaxBuffer.can_sample`); the rank masses themselves are
    computed at each draw (:mod:`rlreplay.jax.rank`).
    """
    if config.rank_based:
        return jnp.where(prio > 0, jnp.float32(1.0), jnp.float32(0.0))
    return jnp.where(prio > 0, jnp.power(prio, jnp.float32(config.alpha)), 0.0)


def rebuild(config: BufferConfig, state: BufferState, pri: PriorityState) -> PriorityState:
    """The masses and the tree from the priorities and the sampleable ranges: ``O(E * C)``."""
    n = config.num_slots
    rows = jnp.arange(pri.prio.shape[0], dtype=state.count.dtype)
    env, t = step_in_row(config, state, rows)
    live = sampleable(state, env, t) & (rows < n)
    mass = jnp.where(live, mass_of(config, pri.prio), 0.0)
    return _with_tree(pri, tree.build(pri.prio, mass, tree_levels(n)))


def _with_tree(pri: PriorityState, t: tree.Tree) -> PriorityState:
    return pri._replace(prio=t[0], sums=t[1], mins=t[2])


def after_write(
    config: BufferConfig, state: BufferState, pri: PriorityState, written: Written
) -> PriorityState:
    """The priorities after one write: the new steps get the new-transition priority, and the
    leaves of every step whose sampleability the write may have changed are recomputed."""
    E, n, k = config.num_envs, config.n_step, config.frame_stack
    t = state.count - 1  # the step just written
    new = jnp.maximum(jnp.float32(config.initial_priority), pri.max_priority)
    envs = jnp.arange(E, dtype=t.dtype)
    # t .. t - n: the new step and where hi moved; head .. head + k - 2: where lo moved.
    back = t - jnp.arange(n + 1, dtype=t.dtype)
    steps = jnp.concatenate(
        [jnp.broadcast_to(back[:, None], (n + 1, E)), state.head + jnp.arange(k - 1)[:, None]]
    )
    env = jnp.broadcast_to(envs, steps.shape)
    rows = rows_of(config, steps, env)
    # A step before the first or past the newest is no step: its row is left alone.
    real = (steps >= 0) & (steps <= t)
    # (The new leaves depend on this read of the old priorities: XLA orders it first and
    # updates in place; see rlreplay.jax.ring.write_index.)
    prio = jnp.where(steps == t, new, pri.prio.at[rows].get(mode="clip"))
    mass = jnp.where(sampleable(state, env, steps), mass_of(config, prio), 0.0)
    updated = tree.set_leaves(
        (pri.prio, pri.sums, pri.mins), rows.ravel(), prio.ravel(), mass.ravel(), real.ravel()
    )
    pri = _with_tree(pri, updated)
    if config.can_evict:
        pri = lax.cond(written.evicted, lambda p: rebuild(config, state, p), lambda p: p, pri)
    return pri


def update(
    config: BufferConfig, state: BufferState, pri: PriorityState, ids: Any, priorities: Any
) -> PriorityState:
    """Apply ``priorities`` to ``ids``.

    An id given several times gets the largest of its priorities (the NumPy core applies them
    in call order, so there the last wins): a scatter's order is undefined in XLA, and
    resolving duplicates by their order costs a sort or a ``B x B`` comparison per call. Ids
    never issued or overwritten, and values that are NaN, infinite or negative, are ignored
    (under ``jit`` nothing can be raised).
    """
    E = config.num_envs
    ids = jnp.asarray(ids).astype(state.count.dtype).reshape(-1)
    p = jnp.asarray(priorities).astype(jnp.float32).reshape(-1)
    env = jnp.mod(ids, E)
    t = jnp.floor_divide(ids, E)
    ok = (ids >= 0) & (t >= state.head[env]) & (t < state.count) & (p >= 0) & (p < jnp.inf)
    ok = ok & ~in_hole(config, state, env, t)  # abandoned episodes' holes keep no priority
    if config.priority_clip is not None:
        p = jnp.clip(p, config.priority_clip[0], config.priority_clip[1])
    p = p + jnp.float32(config.eps)
    rows = jnp.mod(ids, config.num_slots)  # (t % C) * E + e, with one remainder
    mass = jnp.where(sampleable(state, env, t), mass_of(config, p), 0.0)
    updated = tree.set_leaves((pri.prio, pri.sums, pri.mins), rows, p, mass, ok, largest=True)
    top = jnp.max(jnp.where(ok, p, 0.0), initial=0.0)
    return _with_tree(pri, updated)._replace(
        max_priority=jnp.maximum(pri.max_priority, top),
        beta_step=pri.beta_step + 1,
    )


def beta_at(config: BufferConfig, step: Any) -> Any:
    """``beta`` after ``step`` schedule steps (linear to ``beta_final`` over ``beta_steps``)."""
    if config.beta_steps == 0:
        return jnp.float32(config.beta)
    frac = jnp.minimum(1.0, step.astype(jnp.float32) / config.beta_steps)
    return jnp.float32(config.beta) + jnp.float32(config.beta_final - config.beta) * frac


def draw(
    config: BufferConfig, state: BufferState, pri: PriorityState, key: Any, batch_size: int,
    beta: Any,
) -> tuple[Any, Any, Any, Any]:  # fmt: skip
    """``batch_size`` draws by mass: ``(env, t, probabilities, weights)``.

    Stratified (the default): draw ``i`` falls in the ``i``-th of ``batch_size`` equal slices
    of the total mass; otherwise the draws are independent. Either way each draw has law
    ``P``. With nothing drawable the draws are arbitrary rows with probability and weight 0.
    Rank-based buffers draw from a tree of rank masses built for the draw (``O(N log N)``).
    """
    if config.rank_based:
        sums, mins = tree.build(pri.prio, rank.masses(config, pri), tree_levels(config.num_slots))[
            1:
        ]
    else:
        sums, mins = pri.sums, pri.mins
    leaf, probabilities, weights = pick(config, sums, mins[-1][0], key, batch_size, beta)
    env, t = step_in_row(config, state, leaf.astype(state.count.dtype))
    return env, t, probabilities, weights


def pick(
    config: BufferConfig, sums: tuple[Any, ...], smallest: Any, key: Any, batch_size: int,
    beta: Any,
) -> tuple[Any, Any, Any]:  # fmt: skip
    """``(leaf, probabilities, weights)`` of ``batch_size`` draws from the sum tree ``sums``
    (stratified or not, as configured), weights normalised by the mass ``smallest``."""
    total = sums[-1][0]
    u = _random.uniform(key, batch_size)
    if config.stratified:
        target = (jnp.arange(batch_size, dtype=jnp.float32) + u) * (total / batch_size)
    else:
        target = u * total
    leaf, m = tree.descend(sums, target)
    positive = m > 0
    safe = jnp.where(positive, m, 1.0)
    probabilities = jnp.where(positive, m / total, 0.0)
    weights = jnp.where(positive, jnp.power(smallest / safe, beta), 0.0)
    return leaf, probabilities, weights


def clear(pri: PriorityState) -> PriorityState:
    """No slot drawable: every mass 0 (priorities, the largest one and ``beta``'s step stay)."""
    return pri._replace(
        sums=tuple(jnp.zeros_like(x) for x in pri.sums),
        mins=tuple(jnp.full_like(x, jnp.inf) for x in pri.mins),
    )
