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
keep their meaning. Without a live hole the draw is the plain one; under ``vmap`` one branch
serves the whole batch (:func:`cond_any`), so buffers without holes keep the plain draw.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from rlreplay.jax._lib import jax, jnp, lax
from rlreplay.jax.config import BufferConfig
from rlreplay.jax.ring import first_sampleable, rows_of
from rlreplay.jax.state import BufferState

__all__ = [
    "ABANDONED", "abandon", "compressed", "cond_any", "draw_around", "env_mask", "in_hole", "live",
    "Ranges", "num_sampleable", "ranges", "sizes",
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


class Ranges(NamedTuple):
    """What uniform draws read of a state: each env's ``[lo, hi)`` and the holes' marks (the
    branches of :func:`cond_any` take these alone, not the whole state and its columns)."""

    lo: Any
    hi: Any
    hole: Any


def ranges(state: BufferState) -> Ranges:
    """The state's :class:`Ranges`."""
    return Ranges(state.lo, state.hi, state.hole)


def _sampleable_grid(config: BufferConfig, r: Ranges) -> tuple[Any, Any]:
    """``(ok, j)``: ``ok[e, j]`` whether step ``lo_e + j`` is sampleable, ``(E, C)``."""
    E, C = config.num_envs, config.env_capacity
    j = jnp.arange(C, dtype=r.lo.dtype)
    t = r.lo[:, None] + j[None, :]
    envs = jnp.arange(E, dtype=r.lo.dtype)[:, None]
    return (t < r.hi[:, None]) & (r.hole[rows_of(config, t, envs)] != t), j


def sizes(config: BufferConfig, r: Ranges) -> Any:
    """``(E,)``: each env's sampleable steps, holes left out. ``O(E * C)``."""
    ok, j = _sampleable_grid(config, r)
    return jnp.sum(ok, axis=1, dtype=j.dtype)


def compressed(config: BufferConfig, r: Ranges) -> tuple[Any, Any]:
    """``(size, table)``: per env the sampleable steps' count ``(E,)`` and their offsets from
    ``lo`` in time order, ``(E, C)`` (``table[e, i]``: the ``i``-th; padded). ``O(E * C)``."""
    E, C = config.num_envs, config.env_capacity
    ok, j = _sampleable_grid(config, r)
    cum = jnp.cumsum(ok.astype(j.dtype), axis=1)
    envs = jnp.broadcast_to(jnp.arange(E, dtype=j.dtype)[:, None], (E, C))
    table = (
        jnp.zeros((E, C), j.dtype)
        .at[envs, jnp.where(ok, cum - 1, C)]
        .set(jnp.broadcast_to(j, (E, C)), mode="drop")
    )
    return cum[:, -1], table


def cond_any(pred: Any, exact: Callable[..., Any], plain: Callable[..., Any], *args: Any) -> Any:
    """``lax.cond(pred, exact, plain, *args)``, where ``exact`` is right whatever ``pred``
    (``plain`` is its shortcut when ``pred`` is False), and under ``vmap`` one branch for the
    whole batch: ``exact`` if any element's ``pred`` holds, else ``plain``. (``vmap`` would
    turn a plain ``cond`` on a batched ``pred`` into both branches and a select: every draw
    of a ``vmap``-ed buffer would pay ``exact``'s ``O(E * C)``.) Every value the branches
    read is in ``args``."""

    @jax.custom_batching.custom_vmap
    def branch(pred: Any, *args: Any) -> Any:
        return lax.cond(pred, exact, plain, *args)

    @branch.def_vmap
    def batched(axis_size: int, in_batched: Any, pred: Any, *args: Any) -> Any:
        pred_batched, *args_batched = in_batched
        axes = [jax.tree.map(lambda b: 0 if b else None, ab) for ab in args_batched]
        on_all = [jax.vmap(f, in_axes=axes, axis_size=axis_size) for f in (exact, plain)]
        anyone = jnp.any(pred) if pred_batched else pred
        out = cond_any(anyone, on_all[0], on_all[1], *args)  # (a vmap around this one too)
        return out, jax.tree.map(lambda _: True, out)

    return branch(pred, *args)


def num_sampleable(config: BufferConfig, state: BufferState) -> Any:
    """A traced int: the sampleable steps of all envs (``O(E * C)`` only while a hole is
    live)."""
    return cond_any(
        live(state),
        lambda r: jnp.sum(sizes(config, r)),
        lambda r: jnp.sum(jnp.maximum(r.hi - r.lo, 0)),
        ranges(state),
    )


def draw_around(
    config: BufferConfig,
    state: BufferState,
    draw: Callable[[Any, Any, Any, Any], tuple[Any, Any]],
    key: Any,
    steps: Any,
) -> tuple[Any, Any]:
    """``draw(lo, hi, key, steps) -> (env, t)`` (a uniform draw over the ranges ``[lo, hi)``
    with ``recent_steps``) over the sampleable steps: over ``[lo, hi)`` while no hole is
    live, else over the compressed ranges, each position mapped to its sampleable step
    (``O(E * C)``)."""

    def around(r: Ranges, key: Any, steps: Any) -> tuple[Any, Any]:
        size, table = compressed(config, r)
        env, t = draw(r.lo, r.lo + size, key, steps)
        lo = r.lo[env]
        return env, lo + table[env, jnp.clip(t - lo, 0, table.shape[1] - 1)]

    def plain(r: Ranges, key: Any, steps: Any) -> tuple[Any, Any]:
        return draw(r.lo, r.hi, key, steps)

    out: tuple[Any, Any] = cond_any(live(state), around, plain, ranges(state), key, steps)
    return out
