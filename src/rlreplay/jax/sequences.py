"""Sequences of consecutive stored steps (R2D2, ALF ``get_batch``): starts, lengths, gathers.

The semantics are :meth:`rlreplay.ReplayBuffer.sample_sequences`' (see
:mod:`rlreplay.assemble.sequences`): a run of length ``L`` starts at a stored step ``t0`` and
has ``n_real`` real steps, up to the newest stored step of its env and, ``within_episode``, up
to the last step of ``t0``'s episode; ``mask`` marks them (a prefix). Per-step fields are the
raw stored ones, zero where masked, and ``next_<obs>`` is the next step's observation, the
final observation where a step ends its episode, and zero where neither is known
(``next_known``).

Starts, as the core draws them: uniform over the stored steps, or env-balanced (an env
uniform among those with a start, then a start uniform within it; rows ordered by env); a
prioritized buffer: by priority over the sampleable ones. With ``pad=False`` only starts whose
``L`` steps are all real. A start ``t`` is *whole* when ``t + L <= count`` and,
``within_episode``, the episode of step ``t + L - 1`` began at or before ``t`` (no end in
``t .. t + L - 2``): one read of ``ep_start`` per start.
"""

from __future__ import annotations

from typing import Any

from rlreplay.jax import _random, rank, tree
from rlreplay.jax import prioritized as per
from rlreplay.jax._lib import jnp, lax
from rlreplay.jax.config import BufferConfig, tree_levels
from rlreplay.jax.draws import balanced, below, search_right, uniform
from rlreplay.jax.ring import rows_of, step_in_row
from rlreplay.jax.state import BufferState

__all__ = ["gather", "starts", "whole"]

#: Redraws of starts that are not whole before the exact draw among all whole starts.
REJECTION_ROUNDS = 16


def whole(
    config: BufferConfig, state: BufferState, env: Any, t: Any, length: int, within_episode: bool
) -> Any:
    """Whether the runs of ``length`` from stored steps ``t`` of envs ``env`` are all real."""
    ok = (t >= state.head[env]) & (t + length <= state.count)
    if within_episode:
        ok = ok & (state.ep_start[rows_of(config, t + length - 1, env)] <= t)
    return ok


def _stored_rows(config: BufferConfig, state: BufferState) -> tuple[Any, Any]:
    """``(env, t)`` of every row's step in ``[head, head + C)`` (stored if ``t < count``)."""
    E, C = config.num_envs, config.env_capacity
    rows = jnp.arange(E * C, dtype=state.count.dtype)
    env = rows % E
    head = state.head[env]
    return env, head + jnp.mod(rows // E - head, C)


def _uniform_whole(
    config: BufferConfig, state: BufferState, key: Any, batch_size: int, length: int
) -> tuple[Any, Any]:
    """Starts uniform over the whole runs within episodes: by rejection (each redraw is
    uniform over the stored starts that fit before the cursor), then, for any draw still not
    whole, exactly among all whole starts (``O(E * C)``, under :func:`jax.lax.cond`)."""
    head = state.head
    end = jnp.maximum(state.count - length + 1, head)
    key, k0 = _random.split(key)
    env, t = uniform(head, end, k0, batch_size)

    def redraw(carry: Any) -> Any:
        i, key, env, t = carry
        key, k = _random.split(key)
        bad = ~whole(config, state, env, t, length, True)
        env2, t2 = uniform(head, end, k, batch_size)
        return i + 1, key, jnp.where(bad, env2, env), jnp.where(bad, t2, t)

    def again(carry: Any) -> Any:
        i, _, env, t = carry
        return (i < REJECTION_ROUNDS) & ~whole(config, state, env, t, length, True).all()

    _, key, env, t = lax.while_loop(again, redraw, (0, key, env, t))

    def exact(args: Any) -> Any:
        env, t = args
        all_env, all_t = _stored_rows(config, state)
        ok = whole(config, state, all_env, all_t, length, True)
        cum = jnp.cumsum(ok.astype(jnp.int32))
        bits = _random.bits(key, batch_size)
        pick = below(bits, cum[-1]).astype(jnp.int32)
        row = search_right(cum, pick)
        row = jnp.minimum(row, cum.shape[0] - 1)
        bad = ~whole(config, state, env, t, length, True)
        return jnp.where(bad, all_env[row], env), jnp.where(bad, all_t[row], t)

    bad = ~whole(config, state, env, t, length, True)
    return lax.cond(bad.any(), exact, lambda a: a, (env, t))  # type: ignore[no-any-return]


def _balanced_whole(
    config: BufferConfig, state: BufferState, key: Any, batch_size: int, length: int
) -> tuple[Any, Any]:
    """Env-balanced starts of whole runs within episodes, exactly: an env uniform among those
    with a whole run, then a start uniform among its whole runs (the law the core's
    rejection and fallback give); ``O(E * C)``."""
    E, C = config.num_envs, config.env_capacity
    idx = jnp.arange(E * C, dtype=state.count.dtype)  # env-major: env idx // C, its j-th step
    all_env = idx // C
    all_t = state.head[all_env] + idx % C
    ok = whole(config, state, all_env, all_t, length, True)
    counts = ok.reshape(E, C).sum(axis=1, dtype=state.count.dtype)
    env, pos = balanced(jnp.zeros_like(counts), counts, key, batch_size)
    cum = jnp.cumsum(ok.astype(state.count.dtype))
    target = (jnp.cumsum(counts) - counts)[env] + pos  # the pos-th whole start of env
    row = search_right(cum, target)
    row = jnp.minimum(row, E * C - 1)
    return all_env[row], all_t[row]


def _uniform_starts(
    config: BufferConfig,
    state: BufferState,
    key: Any,
    batch_size: int,
    length: int,
    within_episode: bool,
    pad: bool,
    balance_envs: bool,
) -> tuple[Any, Any]:
    head = state.head
    end = jnp.maximum(head, state.count - (0 if pad else length - 1))
    if balance_envs:
        if not pad and within_episode:
            env, t = _balanced_whole(config, state, key, batch_size, length)
        else:
            env, t = balanced(head, end, key, batch_size)
        order = jnp.argsort(env, stable=True)  # rows ordered by env, as the core's
        return env[order], t[order]
    if not pad and within_episode:
        return _uniform_whole(config, state, key, batch_size, length)
    return uniform(head, end, key, batch_size)


def starts(
    config: BufferConfig,
    state: BufferState,
    key: Any,
    batch_size: int,
    length: int,
    within_episode: bool,
    pad: bool,
    beta: Any,
    balance_envs: bool = False,
) -> tuple[Any, Any, Any, Any]:
    """``(env, t0, weights, probabilities)`` of ``batch_size`` sequence starts
    (``probabilities`` ``None`` for a uniform buffer)."""
    ones = jnp.ones(batch_size, jnp.float32)
    pri = state.priorities
    if pri is None:
        args = (config, state, key, batch_size, length, within_episode, pad, balance_envs)
        env, t = _uniform_starts(*args)
        return env, t, ones, None
    if pad:  # every sampleable transition is a start: the buffer's own draw
        return _reorder(per.draw(config, state, pri, key, batch_size, beta))
    # Starts whose runs are whole, by their masses renormalised among them: O(E * C).
    sizes = tree_levels(config.num_slots)
    mass = rank.masses(config, pri) if config.rank_based else pri.sums[0]
    rows = jnp.arange(sizes[0], dtype=state.count.dtype)
    env, t = step_in_row(config, state, rows)
    ok = whole(config, state, env, t, length, within_episode) & (rows < config.num_slots)
    sums, mins = tree.build(pri.prio, jnp.where(ok, mass, 0.0), sizes)[1:]
    leaf, probabilities, weights = per.pick(config, sums, mins[-1][0], key, batch_size, beta)
    env, t = step_in_row(config, state, leaf.astype(state.count.dtype))
    return env, t, weights.astype(jnp.float32), probabilities


def _reorder(drawn: tuple[Any, Any, Any, Any]) -> tuple[Any, Any, Any, Any]:
    env, t, probabilities, weights = drawn
    return env, t, weights.astype(jnp.float32), probabilities


def gather(
    config: BufferConfig,
    state: BufferState,
    env: Any,
    t0: Any,
    length: int,
    within_episode: bool,
) -> dict[str, Any]:
    """The runs of ``length`` from steps ``t0`` of envs ``env`` (stored, or the rows are
    arbitrary): the keys of :meth:`rlreplay.ReplayBuffer.get_sequences` but ``weights``."""
    E, F = config.num_envs, config.finals_per_env
    pos = t0[:, None] + jnp.arange(length, dtype=t0.dtype)
    envs = env[:, None]
    rows = rows_of(config, pos, envs)
    count = state.count
    fid = state.final_fid[rows]
    # Real steps: before the cursor and, within episodes, up to the first end from t0.
    stored = pos < count
    n_real = jnp.minimum(length, count - t0)
    if within_episode:
        ends = stored & (fid != -1)
        first = jnp.where(ends.any(axis=1), jnp.argmax(ends, axis=1), length)
        n_real = jnp.minimum(n_real, first + 1)
    mask = jnp.arange(length) < n_real[:, None]
    ends = mask & (fid >= 0)
    follows = mask & (fid == -1) & (pos + 1 < count)
    next_rows = rows_of(config, pos + 1, envs)
    final_pos = envs * F + lax.rem(jnp.maximum(fid, 0), F)
    out: dict[str, Any] = {}
    nexts: dict[str, Any] = {}
    for name in config.schema.fields:
        col = state.columns[name]
        shape = (1,) * (col.ndim - 1)
        zero = jnp.zeros((), col.dtype)
        out[name] = jnp.where(mask.reshape(mask.shape + shape), col[rows], zero)
        if name in state.finals:
            nxt = jnp.where(follows.reshape(follows.shape + shape), col[next_rows], zero)
            final = state.finals[name][final_pos]
            nexts["next_" + name] = jnp.where(ends.reshape(ends.shape + shape), final, nxt)
    out.update(nexts)
    out["mask"] = mask
    out["next_known"] = ends | follows
    out["ids"] = t0 * E + env
    out["env_ids"] = env
    return out
