"""The state of a JAX buffer: a pytree of arrays that every function takes and returns.

Layout (``E`` envs, ``C = capacity // E`` slots per env, ``F`` final records per env):

* Step ``t`` of env ``e`` has the id ``t * E + e`` (the NumPy core's ids) and lives in row
  ``(t % C) * E + e`` of every column: time-major, so the ``E`` rows one :meth:`add` writes are
  contiguous (one ``dynamic_update_slice`` per column), and a row is its id modulo ``E * C``.
* Envs advance in lockstep (every :meth:`add` writes one step of each), so one counter
  ``count`` serves them all; ``head`` (oldest stored step), ``last_end`` and the sampleable
  range ``[lo, hi)`` are per env, as in :class:`rlreplay.episodes.EpisodeIndex`.
* Final observations of ended episodes live in a ring of ``F`` records per env (row
  ``e * F + fid % F`` of each ``finals`` column), owned by the step that ended the episode
  (``final_owner``); ``final_fid`` names a step's record (``-1``: the step does not end its
  episode). Records ``[f_head, f_count)`` are live.
* Abandoned episodes (:mod:`rlreplay.jax.holes`) end at a step whose ``final_fid`` is ``-2``;
  ``hole`` marks, per row, the stored step that lies in such an episode's hole (never
  sampleable), and ``last_cut`` is each env's newest abandoned step.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from rlreplay.jax._lib import jnp
from rlreplay.jax.config import BufferConfig, tree_levels

__all__ = ["BufferState", "PriorityState", "empty_tree", "init_state"]


class PriorityState(NamedTuple):
    """Priorities of a prioritized buffer and the tree drawn from (:mod:`rlreplay.jax.tree`).

    Attributes:
        prio: ``(n0,)`` float32: the priority of each slot's occupant (slot = row of the
            columns; ``n0 >= E * C`` is padded).
        sums: The sum tree's levels, leaves first: ``sums[0]`` holds each slot's mass,
            ``prio ** alpha`` while it is sampleable (0 otherwise; rank-based buffers: 1 for
            a sampleable slot of priority ``> 0``, their rank masses are computed per draw);
            the last is the total.
        mins: The min tree's levels above the leaves: the smallest mass ``> 0`` below each
            node; the last is the smallest over the buffer (which normalises importance
            weights).
        max_priority: The largest priority :meth:`update_priorities` applied (0 before any).
        beta_step: Calls of :meth:`update_priorities` so far: the ``beta`` schedule's step.
    """

    prio: Any
    sums: tuple[Any, ...]
    mins: tuple[Any, ...]
    max_priority: Any
    beta_step: Any


class BufferState(NamedTuple):
    """Everything a JAX buffer holds (see the module docstring for the layout).

    Attributes:
        columns: Field name -> ``(E * C, *shape)`` array (``reward``, ``terminated`` and
            ``truncated`` included).
        finals: Observation field name -> ``(E * F, *shape)`` final observations.
        count: Steps each env has added (a scalar).
        head: ``(E,)`` oldest stored step.
        lo: ``(E,)`` first sampleable step.
        hi: ``(E,)`` one past the last sampleable step.
        last_end: ``(E,)`` newest step that ended an episode, -1 if none.
        f_count: ``(E,)`` final records ever written.
        f_head: ``(E,)`` oldest live final record.
        ep_start: ``(E * C,)`` per row: the first step of the row's episode.
        final_fid: ``(E * C,)`` per row: the step's final record, -1 if it does not end its
            episode.
        final_owner: ``(E * F,)`` per record: the step that owns it.
        hole: ``(E * C,)`` per row: the step it holds if that step lies in the hole of an
            abandoned episode, else -1 (see :mod:`rlreplay.jax.holes`).
        last_cut: ``(E,)`` the newest step that ended an abandoned episode while stored, -1
            if none.
        priorities: A :class:`PriorityState` (prioritized buffers), else ``None``.
    """

    columns: dict[str, Any]
    finals: dict[str, Any]
    count: Any
    head: Any
    lo: Any
    hi: Any
    last_end: Any
    f_count: Any
    f_head: Any
    ep_start: Any
    final_fid: Any
    final_owner: Any
    hole: Any
    last_cut: Any
    priorities: PriorityState | None


def empty_tree(config: BufferConfig) -> tuple[Any, tuple[Any, ...], tuple[Any, ...]]:
    """``(prio, sums, mins)`` with every priority and mass 0."""
    sizes = tree_levels(config.num_slots)
    sums = tuple(jnp.zeros(n, jnp.float32) for n in sizes)
    mins = tuple(jnp.full(n, jnp.inf, jnp.float32) for n in sizes[1:])
    return jnp.zeros(sizes[0], jnp.float32), sums, mins


def init_state(config: BufferConfig) -> BufferState:
    """An empty buffer's state."""
    E, N, F = config.num_envs, config.num_slots, config.finals_per_env
    idt = config.index_dtype
    columns = {
        name: jnp.zeros((N, *f.shape), config.stored[name])
        for name, f in config.schema.fields.items()
    }
    finals = {
        name: jnp.zeros((E * F, *config.schema.fields[name].shape), config.stored[name])
        for name in config.observation_names
    }
    priorities = None
    if config.prioritized:
        prio, sums, mins = empty_tree(config)
        priorities = PriorityState(
            prio=prio,
            sums=sums,
            mins=mins,
            max_priority=jnp.zeros((), jnp.float32),
            beta_step=jnp.zeros((), idt),
        )

    def zeros() -> Any:  # one array per leaf: a donated state must not hold one twice
        return jnp.zeros(E, idt)

    return BufferState(
        columns=columns,
        finals=finals,
        count=jnp.zeros((), idt),
        head=zeros(),
        lo=zeros(),
        hi=zeros(),
        last_end=jnp.full(E, -1, idt),
        f_count=zeros(),
        f_head=zeros(),
        ep_start=jnp.zeros(N, idt),
        final_fid=jnp.full(N, -1, idt),
        final_owner=jnp.full(E * F, -1, idt),
        hole=jnp.full(N, -1, idt),
        last_cut=jnp.full(E, -1, idt),
        priorities=priorities,
    )
