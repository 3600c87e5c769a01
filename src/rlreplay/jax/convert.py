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

from rlreplay.buffer import PrioritizedReplayBuffer, ReplayBuffer
from rlreplay.errors import ConfigError, ShapeError
from rlreplay.jax._lib import jax, jnp
from rlreplay.jax.buffer import JaxBuffer, make_buffer
from rlreplay.jax.config import BufferConfig, default_finals
from rlreplay.jax.state import BufferState, PriorityState, empty_tree
from rlreplay.spec import Field

__all__ = ["from_replay_buffer", "to_replay_buffer"]

Array = np.ndarray[Any, Any]

# Columns of the NumPy index's tables (rlreplay.episodes.kernels; part of the checkpoint format).
COUNT, HEAD, LAST_END, LO, HI, F_COUNT, F_HEAD = range(7)
EP_START, FINAL_FID, EP_END = range(3)
ABANDONED = -2


def _env_major(a: Array, E: int, C: int) -> Array:
    """Time-major rows ``(t % C) * E + e`` -> env-major rows ``e * C + t % C``."""
    return a.reshape(C, E, *a.shape[1:]).swapaxes(0, 1).reshape(E * C, *a.shape[1:])


def _time_major(a: Array, E: int, C: int) -> Array:
    """The inverse of :func:`_env_major`."""
    return a.reshape(E, C, *a.shape[1:]).swapaxes(0, 1).reshape(C * E, *a.shape[1:])


def _episode_ends(final_fid: Array, head: Array, count: int, C: int) -> Array:
    """Per env-major slot of a stored step: its episode's last step, -1 while it runs."""
    E = head.shape[0]
    ep_end = np.full(E * C, -1, np.int64)
    for e in range(E):
        t = np.arange(int(head[e]), count, dtype=np.int64)
        rows = e * C + t % C
        never = np.iinfo(np.int64).max
        ends = np.where(final_fid[rows] != -1, t, never)
        following = np.minimum.accumulate(ends[::-1])[::-1]  # the first end at or after t
        ep_end[rows] = np.where(following == never, -1, following)
    return ep_end


def _numpy_buffer(config: BufferConfig, seed: int | None) -> ReplayBuffer:
    kwargs: dict[str, Any] = {
        "num_envs": config.num_envs,
        "n_step": config.n_step,
        "gamma": config.gamma,
        "frame_stack": config.frame_stack,
        "stack_pad": config.stack_pad,
        "next_fields": config.next_fields,
        "seed": seed,
    }
    fields = dict(config.schema.fields)
    if config.prioritized:
        return PrioritizedReplayBuffer(
            config.capacity, fields, **config.prioritized_kwargs(), **kwargs
        )
    return ReplayBuffer(
        config.capacity, fields, recent_ratio=config.recent_ratio,
        recent_steps=config.recent_steps, replacement=config.replacement, **kwargs,
    )  # fmt: skip


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
    E, C, F = c.num_envs, c.env_capacity, c.finals_per_env
    np_buf = _numpy_buffer(c, seed)
    sd = np_buf.state_dict()
    count = int(host.count)
    env = np.zeros((E, 7), np.int64)
    env[:, COUNT] = count
    env[:, HEAD] = host.head
    env[:, LAST_END] = host.last_end
    env[:, LO] = host.lo
    env[:, HI] = host.hi
    env[:, F_COUNT] = host.f_count
    env[:, F_HEAD] = host.f_head
    slot_meta = np.zeros((E * C, 3), np.int64)
    slot_meta[:, EP_START] = _env_major(np.asarray(host.ep_start), E, C)
    slot_meta[:, FINAL_FID] = _env_major(np.asarray(host.final_fid), E, C)
    slot_meta[:, EP_END] = _episode_ends(slot_meta[:, FINAL_FID], env[:, HEAD], count, C)
    arrays: dict[str, Array] = {
        "index/env": env,
        "index/slot_meta": slot_meta,
        "index/final_owner": np.asarray(host.final_owner, np.int64),
    }
    for name, f in c.schema.fields.items():
        col = _env_major(np.asarray(host.columns[name]), E, C)
        arrays[f"columns/steps/{name}"] = col.astype(f.dtype)
    for name in c.observation_names:
        dtype = c.schema.fields[name].dtype
        arrays[f"columns/finals/{name}"] = np.asarray(host.finals[name]).astype(dtype)
    meta = dict(sd["meta"])
    meta["finals_capacity"] = F
    if host.priorities is not None:
        pri = host.priorities
        prio = np.asarray(pri.prio[: E * C], np.float64)
        arrays["priorities/prio"] = _env_major(prio, E, C)
        meta["priorities"] = {
            "beta_step": int(pri.beta_step),
            "max_priority": float(pri.max_priority),
            "snapshot_size": 0,
            # Rank-based: one change pending, so the core (sort_interval=1) ranks exactly
            # before its first draw, as the JAX buffer ranks at every draw.
            "changes": 1 if c.rank_based else 0,
        }
        if c.rank_based:
            arrays["priorities/rank"] = np.ones(E * C, np.int64)
            arrays["priorities/snapshot"] = np.zeros(E * C, np.float64)
    np_buf.load_state_dict({**sd, "meta": meta, "arrays": arrays})
    return np_buf


def _refuse_unsupported(cls: str, config: dict[str, Any], env: Array) -> None:
    if cls not in ("ReplayBuffer", "PrioritizedReplayBuffer") or "sampler" in config:
        raise ConfigError(
            f"from_replay_buffer: a {cls} with its own sampler has no JAX counterpart; "
            "expected an rr.ReplayBuffer or an rr.PrioritizedReplayBuffer"
        )
    if config["record_episodic_return"]:
        raise ConfigError("from_replay_buffer: record_episodic_return has no JAX counterpart")
    counts = env[:, COUNT]
    if (counts != counts[0]).any():
        raise ConfigError(
            f"from_replay_buffer: the JAX buffer's envs step together; this buffer's envs "
            f"have added {counts.tolist()} steps"
        )


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
            samplers, recorded episodic returns, envs at different steps, abandoned
            episodes, ``finals_per_env`` below the final observations held, or values that
            do not fit JAX's 32-bit types (enable ``jax_enable_x64``).
    """
    sd = np_buf.state_dict()
    config, arrays, meta = sd["config"], sd["arrays"], sd["meta"]
    env: Array = arrays["index/env"]
    _refuse_unsupported(sd["class"], config, env)
    E = int(config["num_envs"])
    C = int(config["capacity"]) // E
    count = int(env[0, COUNT])
    slot_meta: Array = arrays["index/slot_meta"]
    for e in range(E):
        rows = e * C + np.arange(int(env[e, HEAD]), count) % C
        if (slot_meta[rows, FINAL_FID] == ABANDONED).any():
            raise ConfigError(
                f"from_replay_buffer: env {e} holds an abandoned episode (abandon_episode); "
                "the JAX buffer has no such episodes"
            )
    live = int((env[:, F_COUNT] - env[:, F_HEAD]).max())
    if finals_per_env is None:
        finals_per_env = max(default_finals(C), live)
    elif finals_per_env < live:
        raise ConfigError(
            f"finals_per_env: an env of this buffer holds {live} final observations; expected "
            f"at least that, got {finals_per_env}"
        )
    fields = {name: Field.from_json(d) for name, d in config["fields"].items()}
    per_kwargs = {}
    if sd["class"] == "PrioritizedReplayBuffer":
        keys = ("alpha", "beta", "beta_final", "beta_steps", "eps", "initial_priority",
                "priority_clip", "stratified", "variant")  # fmt: skip
        per_kwargs = {k: config[k] for k in keys}
        if per_kwargs["priority_clip"] is not None:
            per_kwargs["priority_clip"] = tuple(per_kwargs["priority_clip"])
    buf = make_buffer(
        int(config["capacity"]), fields, num_envs=E, n_step=config["n_step"],
        gamma=config["gamma"], frame_stack=config["frame_stack"],
        stack_pad=config["stack_pad"], next_fields=config["next_fields"],
        finals_per_env=finals_per_env, prioritized=bool(per_kwargs),
        recent_ratio=config["recent_ratio"], recent_steps=config["recent_steps"],
        replacement=config["replacement"], **per_kwargs,
    )  # fmt: skip
    c = buf.config
    idt = c.index_dtype
    if count * E >= np.iinfo(idt).max:
        raise ConfigError(
            f"from_replay_buffer: ids up to {count * E} do not fit {idt}; enable jax_enable_x64"
        )
    columns = {}
    for name in c.schema.fields:
        columns[name] = _fit(name, _time_major(arrays[f"columns/steps/{name}"], E, C), c)
    F, F_np = c.finals_per_env, int(meta["finals_capacity"])
    src, dst = [], []
    for e in range(E):
        fid = np.arange(int(env[e, F_HEAD]), int(env[e, F_COUNT]))
        src.append(e * F_np + fid % F_np)
        dst.append(e * F + fid % F)
    src_rows, dst_rows = np.concatenate(src), np.concatenate(dst)
    finals = {}
    for name in c.observation_names:
        fin = arrays[f"columns/finals/{name}"]
        out = np.zeros((E * F, *fin.shape[1:]), fin.dtype)
        out[dst_rows] = fin[src_rows]
        finals[name] = _fit(name, out, c)
    owner = np.full(E * F, -1, np.int64)
    owner[dst_rows] = arrays["index/final_owner"][src_rows]
    host = BufferState(
        columns=columns,
        finals=finals,
        count=np.asarray(count, idt),
        head=env[:, HEAD].astype(idt),
        lo=env[:, LO].astype(idt),
        hi=env[:, HI].astype(idt),
        last_end=env[:, LAST_END].astype(idt),
        f_count=env[:, F_COUNT].astype(idt),
        f_head=env[:, F_HEAD].astype(idt),
        ep_start=_time_major(slot_meta[:, EP_START], E, C).astype(idt),
        final_fid=_time_major(slot_meta[:, FINAL_FID], E, C).astype(idt),
        final_owner=owner.astype(idt),
        priorities=None,
    )
    state: BufferState = jax.device_put(host)
    if c.prioritized:
        pmeta = meta["priorities"]
        prio, sums, mins = empty_tree(c)
        loaded = _time_major(arrays["priorities/prio"], E, C).astype(np.float32)
        pri = PriorityState(
            prio=prio.at[: E * C].set(loaded),
            sums=sums,
            mins=mins,
            max_priority=jnp.asarray(pmeta["max_priority"], jnp.float32),
            beta_step=jnp.asarray(pmeta["beta_step"], idt),
        )
        state = buf._rebuild(state._replace(priorities=pri))
    return buf, state


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
