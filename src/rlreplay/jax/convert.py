"""Between a JAX buffer's state and a NumPy :class:`rlreplay.ReplayBuffer`.

Both directions go through the NumPy buffer's public ``state_dict`` / ``load_state_dict``, so
a converted state passes every check a checkpoint passes (:func:`rlreplay.load`): counters,
episode starts and ends, final records, sampleable ranges and priorities. The layouts differ
only in the order of rows: NumPy keeps env ``e``'s ring in rows ``e * C .. e * C + C - 1``, the
JAX state is time-major (row ``(t % C) * E + e``).

What is code, not data, is not carried: transforms, a rate limiter, the default output format.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlreplay.buffer import ReplayBuffer
from rlreplay.buffer.portable import Contents, Index, Priorities, read_contents, write_contents
from rlreplay.errors import ConfigError, ShapeError
from rlreplay.jax._lib import jax, jnp
from rlreplay.jax.buffer import JaxBuffer
from rlreplay.jax.config import BufferConfig, default_finals
from rlreplay.jax.factory import make_buffer
from rlreplay.jax.holes import ABANDONED
from rlreplay.jax.state import BufferState, PriorityState, empty_tree

__all__ = ["from_replay_buffer", "to_replay_buffer"]

Array = np.ndarray[Any, Any]


def _env_major(a: Any, E: int, C: int) -> Array:
    """Time-major rows ``(t % C) * E + e`` -> env-major rows ``e * C + t % C``."""
    h: Array = np.asarray(a)
    return h.reshape(C, E, *h.shape[1:]).swapaxes(0, 1).reshape(E * C, *h.shape[1:])


def _time_major(a: Array, E: int, C: int) -> Array:
    """The inverse of :func:`_env_major`."""
    return a.reshape(E, C, *a.shape[1:]).swapaxes(0, 1).reshape(C * E, *a.shape[1:])


def _core_kwargs(config: BufferConfig) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "num_envs": config.num_envs,
        "n_step": config.n_step,
        "gamma": config.gamma,
        "frame_stack": config.frame_stack,
        "stack_pad": config.stack_pad,
        "next_fields": config.next_fields,
    }
    if config.prioritized:
        return {**kwargs, **config.prioritized_kwargs()}
    return {
        **kwargs, "recent_ratio": config.recent_ratio, "recent_steps": config.recent_steps,
        "replacement": config.replacement,
    }  # fmt: skip


def to_replay_buffer(
    buf: JaxBuffer, state: BufferState, *, seed: int | None = None
) -> ReplayBuffer:
    """A NumPy buffer holding what ``state`` holds: the same ids, transitions and priorities.

    A :class:`rlreplay.PrioritizedReplayBuffer` for a prioritized buffer, else a
    :class:`rlreplay.ReplayBuffer`, with the same configuration; fields keep their declared
    dtypes. Use it to save a checkpoint (``save``), inspect or export the contents.

    Args:
        buf: The JAX buffer.
        state: One buffer's state (not a ``vmap``-ed stack of them; index it first).
        seed: The NumPy buffer's seed.

    Raises:
        rlreplay.ShapeError: ``state`` is a stack of states.

    Example:
        >>> import numpy as np, rlreplay as rr, rlreplay.jax as rrj
        >>> buf = rrj.make_buffer(capacity=8, fields={"obs": rr.Field((), np.float32)})
        >>> len(rrj.to_replay_buffer(buf, buf.init()))
        0
    """
    c = buf.config
    host = jax.device_get(state)
    if np.ndim(host.count) != 0:
        raise ShapeError(
            f"state: expected one buffer's state, got a stack of {np.shape(host.count)} "
            "(pick one: jax.tree.map(lambda x: x[i], state))"
        )
    E, C = c.num_envs, c.env_capacity

    def ints(a: Any) -> Array:
        return np.asarray(a, np.int64)

    index = Index(
        count=np.full(E, int(host.count), np.int64), head=ints(host.head),
        last_end=ints(host.last_end), lo=ints(host.lo), hi=ints(host.hi),
        f_count=ints(host.f_count), f_head=ints(host.f_head),
        ep_start=ints(_env_major(host.ep_start, E, C)),
        final_fid=ints(_env_major(host.final_fid, E, C)), final_owner=ints(host.final_owner),
    )  # fmt: skip
    priorities = None
    if host.priorities is not None:
        pri = host.priorities
        priorities = Priorities(  # (holes' priorities are kept negated: see jax.holes)
            prio=_env_major(np.abs(np.asarray(pri.prio[: E * C], np.float64)), E, C),
            max_priority=float(pri.max_priority),
            beta_step=int(pri.beta_step),
        )
    contents = Contents(
        kwargs=_core_kwargs(c), capacity=c.capacity, fields=dict(c.schema.fields),
        finals_per_env=c.finals_per_env, index=index,
        steps={name: _env_major(host.columns[name], E, C) for name in c.schema.fields},
        finals={name: np.asarray(host.finals[name]) for name in c.observation_names},
        priorities=priorities,
    )  # fmt: skip
    return write_contents(contents, seed=seed)


def from_replay_buffer(
    np_buf: ReplayBuffer, *, finals_per_env: int | None = None
) -> tuple[JaxBuffer, BufferState]:
    """A JAX buffer and state holding what a NumPy buffer holds (its ids, transitions and
    priorities), with the same configuration.

    Args:
        np_buf: An :class:`rlreplay.ReplayBuffer` (uniform) or an
            :class:`rlreplay.PrioritizedReplayBuffer` whose envs have all added the same
            number of steps. A rank-based buffer's ranks become exact at every draw
            (the core's ``sort_interval=1``), whatever its ``sort_interval``.
        finals_per_env: Final observations the JAX buffer keeps per env (default
            ``env_capacity // 4``, or more if the NumPy buffer holds more).

    Returns:
        ``(buf, state)``.

    Raises:
        rlreplay.ConfigError: A buffer the JAX buffer cannot represent (naming why): other
            samplers, recorded episodic returns, envs at different steps,
            ``finals_per_env`` below the final observations held, or values that
            do not fit JAX's 32-bit types (enable ``jax_enable_x64``).
    """
    got = read_contents(
        np_buf, kind="JAX", finals_per_env=finals_per_env,
        default_finals=lambda C, _prioritized: default_finals(C), abandoned=True,
    )  # fmt: skip
    buf = make_buffer(
        got.capacity, got.fields, finals_per_env=got.finals_per_env,
        prioritized=got.prioritized, **got.kwargs,
    )  # fmt: skip
    c = buf.config
    E, C = c.num_envs, c.env_capacity
    idt = c.index_dtype
    ix = got.index
    count = int(ix.count[0])
    if count * E >= np.iinfo(idt).max:
        raise ConfigError(
            f"from_replay_buffer: ids up to {count * E} do not fit {idt}; enable jax_enable_x64"
        )
    final_fid = _time_major(ix.final_fid, E, C)
    ep_start = _time_major(ix.ep_start, E, C)
    hole, last_cut = _holes(c, count, ix.head, final_fid, ep_start)
    host = BufferState(
        columns={name: _fit(name, _time_major(got.steps[name], E, C), c) for name in got.fields},
        finals={name: _fit(name, got.finals[name], c) for name in c.observation_names},
        count=np.asarray(count, idt),
        head=ix.head.astype(idt),
        lo=ix.lo.astype(idt),
        hi=ix.hi.astype(idt),
        last_end=ix.last_end.astype(idt),
        f_count=ix.f_count.astype(idt),
        f_head=ix.f_head.astype(idt),
        ep_start=ep_start.astype(idt),
        final_fid=final_fid.astype(idt),
        final_owner=ix.final_owner.astype(idt),
        hole=hole.astype(idt),
        last_cut=last_cut.astype(idt),
        priorities=None,
    )
    state: BufferState = jax.device_put(host)
    if got.priorities is not None:
        prio, sums, mins = empty_tree(c)
        loaded = _time_major(got.priorities.prio, E, C).astype(np.float32)
        loaded = np.where(hole >= 0, -np.abs(loaded), loaded)  # see rlreplay.jax.holes
        pri = PriorityState(
            prio=prio.at[: E * C].set(loaded),
            sums=sums,
            mins=mins,
            max_priority=jnp.asarray(got.priorities.max_priority, jnp.float32),
            beta_step=jnp.asarray(got.priorities.beta_step, idt),
        )
        state = buf._rebuild(state._replace(priorities=pri))
    return buf, state


def _holes(
    config: BufferConfig, count: int, head: Array, final_fid: Array, ep_start: Array
) -> tuple[Array, Array]:
    """``(hole, last_cut)`` of the state (:mod:`rlreplay.jax.holes`) from the abandoned ends
    (``final_fid == ABANDONED``) among the stored steps; time-major rows."""
    E, C, n = config.num_envs, config.env_capacity, config.n_step
    hole = np.full(E * C, -1, np.int64)
    last_cut = np.full(E, -1, np.int64)
    for e in range(E):
        t = np.arange(int(head[e]), count, dtype=np.int64)
        for a in t[final_fid[(t % C) * E + e] == ABANDONED].tolist():
            start = max(a - n + 1, int(ep_start[(a % C) * E + e]), int(head[e]))
            steps = np.arange(start, a + 1, dtype=np.int64)
            hole[(steps % C) * E + e] = steps
            last_cut[e] = a
    return hole, last_cut


def _fit(name: str, values: Array, config: BufferConfig) -> Array:
    """``values`` in the dtype the JAX buffer stores ``name`` with; integers must fit it
    (floats are rounded, as JAX rounds any float64 value without ``jax_enable_x64``)."""
    dtype = config.stored[name]
    out = values.astype(dtype)
    if dtype != values.dtype and values.dtype.kind in "iu" and not np.array_equal(out, values):
        raise ConfigError(
            f"from_replay_buffer: field {name!r} holds {values.dtype} values that {dtype} does "
            "not represent exactly; enable jax_enable_x64"
        )
    return out
