"""Abandoned episodes: the steps they leave stored but never sampleable ("holes"), as the NumPy
core's (:mod:`rlreplay.episodes.cuts`).

:func:`abandon` ends the running episode of the chosen envs at their newest step ``a`` with no
final observation: the step's ``final_fid`` becomes :data:`ABANDONED` (the core's mark, so
sequences stop there with ``next_known`` False, the next step starts a new episode and
conversions carry it), ``last_end`` becomes ``a``, and ``hi`` moves to ``a + 1``. The
episode's steps ``t`` with ``t + n_step <= a`` keep their complete windows; its steps
``[max(a - n_step + 1, episode start, head), a]`` (the hole) would need steps that never come
and are never sampleable, so an env's sampleable steps are ``[lo, hi)`` less its holes.

How the state says so, without touching :meth:`~rlreplay.jax.JaxBuffer.add`:

* ``hole`` ``(E * C,)``: per row, the hole step the row holds (``-1``: none). A row whose step
  was overwritten no longer matches it, so marks never need clearing. Membership tests
  (``sampleable``, ``update_priorities``) read it: one gather per id.
* ``last_cut`` ``(E,)``: each env's newest abandoned step still stored when it was abandoned
  (``-1``: none). Abandon points only grow, so a hole lies in ``[lo, hi)`` only while
  ``last_cut >= lo`` for some env (:func:`live`): clearing, overwriting or dropping the holes
  makes that False again.
* Priorities (prioritized buffers): a hole step's priority is stored negated. Masses are
  ``0`` for priorities ``<= 0``, so the leaves that every write recomputes (and rebuilds of
  the tree) give holes no mass with no extra read; conversions give the core the absolute
  value, the priority it stores for those never-sampleable steps.

Uniform draws stay exact as the core's: while a hole is live (:func:`live`, a
:func:`jax.lax.cond`), a draw is a position in each env's *compressed* range ``[lo, lo +
size)`` (``size`` without the holes), mapped to the position-th sampleable step
(:func:`compressed`, ``O(E * C)``), a bijection onto the sampleable steps in time order, so
the recency mix (the ``recent_steps`` newest sampleable steps) and draws without replacement
keep their meaning. Without a live hole the draw is the plain one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlreplay.jax._lib import jnp, lax
from rlreplay.jax.config import BufferConfig
from rlreplay.jax.ring import first_sampleable, rows_of
from rlreplay.jax.state import BufferState

__all__ = [
    "ABANDONED", "abandon", "compressed", "draw_around", "env_mask", "in_hole", "live",
    "num_sampleable", "sizes",
]  # fmt: skip

#: ``final_fid`` of a step that ends an abandoned episode (the core's mark).
ABANDONED = -2


def env_mask(config: BufferConfig, env_id: Any) -> Any:
    """``(E,)`` bool: the envs that ``env_id`` names (an int scalar: that env, none if out of
    range; a bool ``(E,)`` mask: as it is). Shapes and dtypes are checked by the caller."""
    value = jnp.asarray(env_id)
    if value.dtype == jnp.bool_:
        return value
    return jnp.arange(config.num_envs, dtype=value.dtype) == value


def abandon(config: BufferConfig, state: BufferState, envs: Any) -> BufferState:
    """Abandon the running episode of every env of the ``(E,)`` mask ``envs`` (a no-op for an
    env where none runs: no step yet, or its newest step ends its episode)."""
    E, n, N = config.num_envs, config.n_step, config.num_slots
    idt = state.count.dtype
    a = state.count - 1  # every env's newest step
    ids = jnp.arange(E, dtype=idt)
    runs = envs & (a >= 0) & (state.last_end != a)
    stored = runs & (a >= state.head)  # an episode cleared away is abandoned all the same
    row_a = rows_of(config, a, ids)
    start = jnp.maximum(state.ep_start[row_a], state.head)
    # The hole: a - n + 1 .. a, from the episode's first stored step on (n steps at most).
    steps = a - jnp.arange(n, dtype=idt)[:, None]  # (n, 1)
    in_it = stored[None, :] & (steps >= start[None, :])  # (n, E)
    rows = jnp.where(in_it, rows_of(config, steps, ids[None, :]), N)
    last_end = jnp.where(runs, a, state.last_end)
    new = state._replace(
        last_end=last_end,
        hi=jnp.maximum(last_end + 1, state.count - n),
        final_fid=state.final_fid.at[jnp.where(stored, row_a, N)].set(ABANDONED, mode="drop"),
        hole=state.hole.at[rows.ravel()].set(jnp.broadcast_to(steps, (n, E)).ravel(), mode="drop"),
        last_cut=jnp.where(stored, a, state.last_cut),
    )
    new = new._replace(lo=first_sampleable(config, new))
    if new.priorities is not None:
        pri = new.priorities
        flat = jnp.where(in_it, rows, pri.prio.shape[0]).ravel()  # (the tree's rows are padded)
        # Negated: no mass from any later write or rebuild (the hole had none before).
        prio = pri.prio.at[flat].set(-jnp.abs(pri.prio.at[flat].get(mode="clip")), mode="drop")
        new = new._replace(priorities=pri._replace(prio=prio))
    return new


def in_hole(config: BufferConfig, state: BufferState, env: Any, t: Any) -> Any:
    """Whether steps ``t`` of envs ``env`` lie in holes (stored steps; others: arbitrary)."""
    return state.hole[rows_of(config, t, env)] == t


def live(state: BufferState) -> Any:
    """A traced bool: whether some hole lies in some env's ``[lo, hi)``."""
    return jnp.any(state.last_cut >= state.lo)


def _sampleable_grid(config: BufferConfig, state: BufferState) -> tuple[Any, Any]:
    """``(ok, j)``: ``ok[e, j]`` whether step ``lo_e + j`` is sampleable, ``(E, C)``."""
    E, C = config.num_envs, config.env_capacity
    idt = state.count.dtype
    j = jnp.arange(C, dtype=idt)
    t = state.lo[:, None] + j[None, :]
    envs = jnp.arange(E, dtype=idt)[:, None]
    return (t < state.hi[:, None]) & (state.hole[rows_of(config, t, envs)] != t), j


def sizes(config: BufferConfig, state: BufferState) -> Any:
    """``(E,)``: each env's sampleable steps, holes left out. ``O(E * C)``."""
    ok, _ = _sampleable_grid(config, state)
    return jnp.sum(ok, axis=1, dtype=state.count.dtype)


def compressed(config: BufferConfig, state: BufferState) -> tuple[Any, Any]:
    """``(size, table)``: per env the sampleable steps' count ``(E,)`` and their offsets from
    ``lo`` in time order, ``(E, C)`` (``table[e, i]``: the ``i``-th; padded). ``O(E * C)``."""
    E, C = config.num_envs, config.env_capacity
    ok, j = _sampleable_grid(config, state)
    cum = jnp.cumsum(ok.astype(j.dtype), axis=1)
    envs = jnp.broadcast_to(jnp.arange(E, dtype=j.dtype)[:, None], (E, C))
    table = (
        jnp.zeros((E, C), j.dtype)
        .at[envs, jnp.where(ok, cum - 1, C)]
        .set(jnp.broadcast_to(j, (E, C)), mode="drop")
    )
    return cum[:, -1], table


def num_sampleable(config: BufferConfig, state: BufferState) -> Any:
    """A traced int: the sampleable steps of all envs (``O(E * C)`` only while a hole is
    live)."""
    return lax.cond(
        live(state),
        lambda: jnp.sum(sizes(config, state)),
        lambda: jnp.sum(jnp.maximum(state.hi - state.lo, 0)),
    )


def draw_around(
    config: BufferConfig, state: BufferState, draw: Callable[[Any, Any], tuple[Any, Any]]
) -> tuple[Any, Any]:
    """``draw(lo, hi) -> (env, t)`` (a uniform draw over the ranges ``[lo, hi)``) over the
    sampleable steps: over ``[lo, hi)`` while no hole is live, else over the compressed
    ranges, each position mapped to its sampleable step (``O(E * C)``)."""

    def around() -> tuple[Any, Any]:
        size, table = compressed(config, state)
        env, t = draw(state.lo, state.lo + size)
        lo = state.lo[env]
        return env, lo + table[env, jnp.clip(t - lo, 0, table.shape[1] - 1)]

    out: tuple[Any, Any] = lax.cond(live(state), around, lambda: draw(state.lo, state.hi))
    return out
