"""The episode bookkeeping of one :meth:`add`, and which steps are sampleable: pure functions.

The rules are the NumPy core's (:mod:`rlreplay.episodes.index`), for envs in lockstep:

* ``hi = max(last_end + 1, count - n_step)``: a step of a finished episode knows its whole
  window; a step ``t`` of a running episode needs its ``n_step`` successors.
* ``lo = head``, unless the oldest stored episode lost its start to overwriting and
  ``frame_stack = k > 1``: then its first ``k - 1`` stored steps (up to its end) would need
  overwritten frames and are skipped.
* A step that overwrites step ``t - C`` frees that step's final record, if it had one.

One rule is the JAX buffer's own: an env keeps at most ``F`` final records. When an episode
ends while ``F`` are live, the oldest stored episode (the one that owns the oldest record) is
dropped whole: ``head`` moves to the step after its end, as the NumPy core's ``dequeue`` would
move it. With ``F >= C`` this never happens (see :attr:`BufferConfig.can_evict`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from rlreplay.jax._lib import jnp, lax
from rlreplay.jax.config import BufferConfig
from rlreplay.jax.state import BufferState

__all__ = [
    "Written",
    "cleared",
    "first_sampleable",
    "rows_of",
    "sampleable",
    "step_in_row",
    "write_index",
]


class Written(NamedTuple):
    """What :func:`write_index` did besides the new index arrays."""

    row0: Any  # first of the E rows written (the step's rows are row0 .. row0 + E - 1)
    final_pos: Any  # (E,) row of each env's new final record; E * F (dropped) where none
    evicted: Any  # bool: some env dropped its oldest episode to free a final record


def rows_of(config: BufferConfig, t: Any, env: Any) -> Any:
    """Rows of steps ``t`` (any sign: a negative step maps to a row no step uses yet)."""
    return jnp.mod(t, config.env_capacity) * config.num_envs + env


def first_sampleable(config: BufferConfig, state: BufferState) -> Any:
    """``lo`` of every env (see the module docstring), from the state's new ``head`` and
    ``count``."""
    k = config.frame_stack
    head, count = state.head, state.count
    if k == 1:
        return head
    envs = jnp.arange(config.num_envs, dtype=head.dtype)
    cut = (count > head) & (state.ep_start[rows_of(config, head, envs)] < head)
    lo_cut = head + jnp.minimum(k - 1, count - head)
    # The cut episode's steps head .. head+k-2 are skipped up to and including its end (with a
    # final record or abandoned: final_fid != -1): the first end among them decides (the loop
    # runs backwards so that the first one wins).
    for i in range(k - 2, -1, -1):
        j = head + i
        row = rows_of(config, j, envs)
        lo_cut = jnp.where((j < count) & (state.final_fid[row] != -1), j + 1, lo_cut)
    return jnp.where(cut, lo_cut, head)


def write_index(config: BufferConfig, state: BufferState, done: Any) -> tuple[BufferState, Written]:
    """Account for one new step of every env (``done``: which of them end their episode).

    Returns the state with its index arrays advanced (columns untouched; ``lo`` is set by
    :func:`first_sampleable` once the columns are written) and what the write needs to store
    the step.

    The per-row arrays are written, never read, here: XLA updates an array in place only when
    it can order every read of it before the write, and a read it cannot order costs a copy of
    the whole array per step. The final records are read (two gathers) and written (a
    scatter of values that depend on those reads, which orders them).
    """
    E, C, F, n = config.num_envs, config.env_capacity, config.finals_per_env, config.n_step
    t = state.count
    idt = t.dtype
    envs = jnp.arange(E, dtype=idt)
    row0 = jnp.mod(t, C) * E
    # The step this one overwrites (t - C) gives up its final record if it owns the oldest
    # live one (live records belong to stored steps, and t - C is the oldest stored step).
    oldest = state.final_owner[envs * F + jnp.mod(state.f_head, F)]
    f_head = state.f_head + ((state.f_head < state.f_count) & (oldest == t - C)).astype(idt)
    head = jnp.maximum(state.head, t + 1 - C)
    fid = state.f_count
    pos = envs * F + jnp.mod(fid, F)
    # A new record with F live: the oldest (fid - F, at the same position) goes, and with it
    # the episode that owns it.
    full = done & (fid - f_head >= F)
    evicted_owner = state.final_owner[pos]
    head = jnp.where(full, jnp.maximum(head, evicted_owner + 1), head)
    f_head = jnp.where(full, f_head + 1, f_head)
    final_pos = jnp.where(done, pos, E * F)
    last_end = jnp.where(done, t, state.last_end)
    count = t + 1
    # max(t, owners read above) is t (they own earlier steps): a scatter that depends on the
    # reads of its array, so that XLA orders them first (see above).
    owner = jnp.maximum(jnp.maximum(t, evicted_owner), oldest)
    new = state._replace(
        count=count,
        head=head,
        hi=jnp.maximum(last_end + 1, count - n),
        last_end=last_end,
        f_count=fid + done.astype(idt),
        f_head=f_head,
        ep_start=lax.dynamic_update_slice_in_dim(state.ep_start, state.last_end + 1, row0, 0),
        final_fid=lax.dynamic_update_slice_in_dim(
            state.final_fid, jnp.where(done, fid, -1).astype(idt), row0, 0
        ),
        final_owner=state.final_owner.at[final_pos].set(owner, mode="drop"),
    )
    return new, Written(row0, final_pos, full.any())


def sampleable(state: BufferState, env: Any, t: Any) -> Any:
    """Whether steps ``t`` of envs ``env`` are sampleable now."""
    return (t >= state.lo[env]) & (t < state.hi[env])


def step_in_row(config: BufferConfig, state: BufferState, rows: Any) -> tuple[Any, Any]:
    """``(env, t)`` of the step in each row that could be sampleable: the one step of the
    row's residue in ``[lo, lo + C)`` (``hi - lo <= C``, so that is one-to-one)."""
    E, C = config.num_envs, config.env_capacity
    env = rows % E
    lo = state.lo[env]
    return env, lo + jnp.mod(rows // E - lo, C)


def cleared(state: BufferState) -> BufferState:
    """Nothing stored: ``head = lo = hi = count`` and no live final record, as the core's
    ``EpisodeIndex.clear``; ``last_end`` and the per-row arrays stay (a running episode goes
    on, its start now before ``head``)."""
    count = state.count
    return state._replace(  # (each from its own input: a donated state holds no array twice)
        head=jnp.maximum(state.head, count),
        lo=jnp.maximum(state.lo, count),
        hi=jnp.maximum(state.hi, count),
        f_head=jnp.maximum(state.f_head, state.f_count),
    )
