"""Between a device buffer and a NumPy :class:`rlreplay.ReplayBuffer`, and checkpoints.

Both directions go through the NumPy buffer's public ``state_dict`` / ``load_state_dict``, so a
converted buffer passes every check a checkpoint passes (:func:`rlreplay.load`): counters,
episode starts and ends, final records, sampleable ranges and priorities. The layouts are the
same row for row (env ``e``'s ring in rows ``e * C .. e * C + C - 1``); only the finals ring
may differ in size (the core's grows, the device buffer's holds ``finals_per_env`` records per
env). A device buffer's checkpoint (:meth:`~rlreplay.torch.DeviceReplayBuffer.save`) is a core
checkpoint: :func:`rlreplay.load` reads it as a NumPy buffer and :func:`load` as a device
buffer.

What is not data is not carried: the random generator's state (a loaded buffer is seeded
anew), transforms, rate limiters. Every function here waits for the device.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from rlreplay.buffer import PrioritizedReplayBuffer, ReplayBuffer
from rlreplay.errors import ConfigError
from rlreplay.spec import Field
from rlreplay.torch.buffer import DevicePrioritizedReplayBuffer, DeviceReplayBuffer
from rlreplay.torch.config import default_finals

__all__ = ["from_replay_buffer", "load", "to_replay_buffer"]

Array = np.ndarray[Any, Any]

# Columns of the NumPy index's tables (rlreplay.episodes.kernels; part of the checkpoint format).
COUNT, HEAD, LAST_END, LO, HI, F_COUNT, F_HEAD = range(7)
EP_START, FINAL_FID, EP_END = range(3)
ABANDONED = -2


def _episode_ends(final_fid: Array, head: Array, count: int, C: int) -> Array:
    """Per slot of a stored step: its episode's last step, -1 while it runs."""
    E = head.shape[0]
    ep_end = np.full(E * C, -1, np.int64)
    never = np.iinfo(np.int64).max
    for e in range(E):
        t = np.arange(int(head[e]), count, dtype=np.int64)
        rows = e * C + t % C
        ends = np.where(final_fid[rows] != -1, t, never)
        following = np.minimum.accumulate(ends[::-1])[::-1]  # the first end at or after t
        ep_end[rows] = np.where(following == never, -1, following)
    return ep_end


def to_replay_buffer(buf: DeviceReplayBuffer, *, seed: int | None = None) -> ReplayBuffer:
    """A NumPy buffer holding what ``buf`` holds: the same ids, transitions and priorities.

    A :class:`rlreplay.PrioritizedReplayBuffer` for a prioritized buffer, else a
    :class:`rlreplay.ReplayBuffer`, with the same configuration (fields in their declared
    dtypes). Use it to inspect or export the contents; ``save`` it for a checkpoint.

    Example:
        >>> import numpy as np, rlreplay as rr, rlreplay.torch as rrt
        >>> buf = rrt.DeviceReplayBuffer(8, {"obs": rr.Field((), np.float32)})
        >>> len(rrt.to_replay_buffer(buf))
        0
    """
    c, ring, st = buf.config, buf._ring, buf.storage
    E, C, F = c.num_envs, c.env_capacity, c.finals_per_env
    fields = dict(c.schema.fields)
    cls = PrioritizedReplayBuffer if c.prioritized else ReplayBuffer
    np_buf = cls(c.capacity, fields, seed=seed, **c.core_kwargs())
    sd = np_buf.state_dict()
    count = ring.count

    def host(t: Any) -> Array:
        return np.asarray(t.cpu().numpy(), np.int64)

    env = np.zeros((E, 7), np.int64)
    env[:, COUNT] = count
    env[:, HEAD] = host(ring.head)
    env[:, LAST_END] = host(ring.last_end)
    env[:, LO] = host(ring.lo)
    env[:, HI] = host(ring.hi)
    env[:, F_COUNT] = host(ring.f_count)
    env[:, F_HEAD] = host(ring.f_head)
    slot_meta = np.zeros((E * C, 3), np.int64)
    slot_meta[:, EP_START] = host(ring.ep_start)
    slot_meta[:, FINAL_FID] = host(ring.final_fid)
    slot_meta[:, EP_END] = _episode_ends(slot_meta[:, FINAL_FID], env[:, HEAD], count, C)
    arrays: dict[str, Array] = {
        "index/env": env,
        "index/slot_meta": slot_meta,
        "index/final_owner": host(ring.final_owner),
    }
    for name, f in fields.items():
        arrays[f"columns/steps/{name}"] = st.to_numpy(st.steps[name], f.dtype)
    for name in c.observation_names:
        arrays[f"columns/finals/{name}"] = st.to_numpy(st.finals[name], fields[name].dtype)
    meta = dict(sd["meta"])
    meta["finals_capacity"] = F
    if buf._prio is not None:
        pri = buf._prio
        arrays["priorities/prio"] = pri.prio.cpu().numpy().astype(np.float64)
        meta["priorities"] = {
            "beta_step": pri.beta_step,
            "max_priority": float(pri.max_priority),
            "snapshot_size": 0,
            # Rank-based: one change pending, so the core (sort_interval=1) ranks exactly
            # before its first draw, as the device buffer ranks at every draw.
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
            f"from_replay_buffer: a {cls} with its own sampler has no device counterpart; "
            "expected an rr.ReplayBuffer or an rr.PrioritizedReplayBuffer"
        )
    if config["record_episodic_return"]:
        raise ConfigError("from_replay_buffer: record_episodic_return has no device counterpart")
    counts = env[:, COUNT]
    if (counts != counts[0]).any():
        raise ConfigError(
            f"from_replay_buffer: the device buffer's envs step together; this buffer's envs "
            f"have added {counts.tolist()} steps"
        )


def from_replay_buffer(
    np_buf: ReplayBuffer,
    *,
    device: Any = "cpu",
    finals_per_env: int | None = None,
    seed: int | None = None,
) -> DeviceReplayBuffer:
    """A device buffer holding what a NumPy buffer holds (its ids, transitions, priorities,
    largest priority and ``beta``'s step), with the same configuration.

    Args:
        np_buf: An :class:`rlreplay.ReplayBuffer` or a
            :class:`rlreplay.PrioritizedReplayBuffer` whose envs have all added the same
            number of steps. A rank-based buffer's ranks become exact at every draw (the
            core's ``sort_interval=1``), whatever its ``sort_interval``.
        device: The device buffer's torch device.
        finals_per_env: Final observations kept per env (default: the device buffer's
            default, or more if the NumPy buffer holds more).
        seed: The device buffer's generator seed.

    Raises:
        rlreplay.ConfigError: A buffer the device buffer cannot represent (naming why): other
            samplers, recorded episodic returns, envs at different
            steps, abandoned episodes, ``finals_per_env`` below the final observations held.
    """
    sd = np_buf.state_dict()
    config, arrays, meta = sd["config"], sd["arrays"], sd["meta"]
    env: Array = arrays["index/env"]
    _refuse_unsupported(sd["class"], config, env)
    prioritized = sd["class"] == "PrioritizedReplayBuffer"
    E = int(config["num_envs"])
    C = int(config["capacity"]) // E
    count = int(env[0, COUNT])
    slot_meta: Array = arrays["index/slot_meta"]
    for e in range(E):
        rows = e * C + np.arange(int(env[e, HEAD]), count) % C
        if (slot_meta[rows, FINAL_FID] == ABANDONED).any():
            raise ConfigError(
                f"from_replay_buffer: env {e} holds an abandoned episode (abandon_episode); "
                "the device buffer has no such episodes"
            )
    live = int((env[:, F_COUNT] - env[:, F_HEAD]).max())
    if finals_per_env is None:
        finals_per_env = max(default_finals(C, prioritized), live)
    elif finals_per_env < live:
        raise ConfigError(
            f"finals_per_env: an env of this buffer holds {live} final observations; expected "
            f"at least that, got {finals_per_env}"
        )
    fields = {name: Field.from_json(d) for name, d in config["fields"].items()}
    common: dict[str, Any] = dict(
        num_envs=E, n_step=config["n_step"], gamma=config["gamma"],
        frame_stack=config["frame_stack"], stack_pad=config["stack_pad"],
        next_fields=config["next_fields"], finals_per_env=finals_per_env, device=device,
        seed=seed,
    )  # fmt: skip
    buf: DeviceReplayBuffer
    if prioritized:
        keys = ("alpha", "beta", "beta_final", "beta_steps", "eps", "initial_priority",
                "priority_clip", "stratified", "variant")  # fmt: skip
        per = {k: config[k] for k in keys}
        if per["priority_clip"] is not None:
            per["priority_clip"] = tuple(per["priority_clip"])
        buf = DevicePrioritizedReplayBuffer(int(config["capacity"]), fields, **per, **common)
    else:
        buf = DeviceReplayBuffer(
            int(config["capacity"]), fields, recent_ratio=config["recent_ratio"],
            recent_steps=config["recent_steps"], replacement=config["replacement"], **common,
        )  # fmt: skip
    F, F_np = buf.config.finals_per_env, int(meta["finals_capacity"])
    src, dst = [], []
    for e in range(E):
        fid = np.arange(int(env[e, F_HEAD]), int(env[e, F_COUNT]))
        src.append(e * F_np + fid % F_np)
        dst.append(e * F + fid % F)
    src_rows, dst_rows = np.concatenate(src), np.concatenate(dst)
    ring, st = buf._ring, buf.storage
    for name in buf.config.schema.fields:
        st.assign(st.steps[name], Ellipsis, arrays[f"columns/steps/{name}"])
    for name in buf.config.observation_names:
        fin = arrays[f"columns/finals/{name}"]
        out = np.zeros((E * F, *fin.shape[1:]), fin.dtype)
        out[dst_rows] = fin[src_rows]
        st.assign(st.finals[name], Ellipsis, out)
    owner = np.full(E * F, -1, np.int64)
    owner[dst_rows] = arrays["index/final_owner"][src_rows]
    ring.count = count
    for t, values in (
        (ring.head, env[:, HEAD]), (ring.lo, env[:, LO]), (ring.hi, env[:, HI]),
        (ring.last_end, env[:, LAST_END]), (ring.f_count, env[:, F_COUNT]),
        (ring.f_head, env[:, F_HEAD]), (ring.ep_start, slot_meta[:, EP_START]),
        (ring.final_fid, slot_meta[:, FINAL_FID]), (ring.final_owner, owner),
    ):  # fmt: skip
        st.assign(t, Ellipsis, np.ascontiguousarray(values, np.int64))
    if buf._prio is not None:
        pri, pmeta = buf._prio, meta["priorities"]
        st.assign(pri.prio, Ellipsis, arrays["priorities/prio"])
        pri.max_priority.fill_(float(pmeta["max_priority"]))
        pri.beta_step = int(pmeta["beta_step"])
        pri.rebuild()
    return buf


def load(
    path: str | os.PathLike[str],
    *,
    device: Any = "cpu",
    finals_per_env: int | None = None,
    seed: int | None = None,
) -> DeviceReplayBuffer:
    """A device buffer from a checkpoint file of the NumPy core's format (written by
    :meth:`rlreplay.torch.DeviceReplayBuffer.save` or :meth:`rlreplay.ReplayBuffer.save`):
    :func:`rlreplay.load`, then :func:`from_replay_buffer`."""
    from rlreplay.buffer.loading import load as core_load

    return from_replay_buffer(
        core_load(path), device=device, finals_per_env=finals_per_env, seed=seed
    )
