"""Between a device buffer and a NumPy :class:`rlreplay.ReplayBuffer`, and checkpoints.

Both directions go through the NumPy buffer's public ``state_dict`` / ``load_state_dict``, so a
converted buffer passes every check a checkpoint passes (:func:`rlreplay.load`): counters,
episode starts and ends, final records, sampleable ranges and priorities. The layouts are the
same row for row (env ``e``'s ring in rows ``e * C .. e * C + C - 1``); only the finals ring
may differ in size (the core's grows, the device buffer's holds ``finals_per_env`` records per
env). A device buffer's checkpoint (:meth:`~rlreplay.torch.DeviceReplayBuffer.save`) is a core
checkpoint: :func:`rlreplay.load` reads it as a NumPy buffer and :func:`load` as a device
buffer.

A rate limiter goes with the buffer as a checkpoint keeps it: a limiter of the same class and
parameters with the same counts of inserts and samples (each buffer its own), its size that
of the receiving buffer. What is not data is not carried: the random generator's state (a
loaded buffer is seeded anew), transforms. Every function here waits for the device.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from rlreplay.buffer import ReplayBuffer
from rlreplay.buffer.portable import Contents, Index, Priorities, read_contents, write_contents
from rlreplay.limits import RateLimiter
from rlreplay.torch.buffer import DeviceReplayBuffer
from rlreplay.torch.config import default_finals
from rlreplay.torch.holes import holes_from_index
from rlreplay.torch.prioritized_buffer import DevicePrioritizedReplayBuffer

__all__ = ["from_replay_buffer", "load", "to_replay_buffer"]

Array = np.ndarray[Any, Any]


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
    fields = dict(c.schema.fields)

    def host(t: Any) -> Array:
        return np.array(t.cpu().numpy(), np.int64)

    index = Index(
        count=ring.env_counts(), head=host(ring.head),
        last_end=host(ring.last_end), lo=host(ring.lo), hi=host(ring.hi),
        f_count=host(ring.f_count), f_head=host(ring.f_head), ep_start=host(ring.ep_start),
        final_fid=host(ring.final_fid), final_owner=host(ring.final_owner),
    )  # fmt: skip
    priorities = None
    if buf._prio is not None:
        pri = buf._prio
        priorities = Priorities(
            prio=pri.prio.cpu().numpy().astype(np.float64),
            max_priority=float(pri.max_priority),
            beta_step=pri.beta_step,
        )
    kwargs = c.core_kwargs()
    limiter = buf.rate_limiter
    if limiter is not None:  # its own limiter (one counts for one buffer); counters below
        kwargs["rate_limiter"] = limiter.clone()
    contents = Contents(
        kwargs=kwargs, capacity=c.capacity, fields=fields,
        finals_per_env=c.finals_per_env, index=index,
        steps={name: st.to_numpy(st.steps[name], f.dtype) for name, f in fields.items()},
        finals={
            name: st.to_numpy(st.finals[name], fields[name].dtype)
            for name in c.observation_names
        },
        priorities=priorities,
    )  # fmt: skip
    np_buf = write_contents(contents, seed=seed)
    if limiter is not None:
        _carry_counts(limiter, np_buf.rate_limiter, np_buf.num_sampleable)
    return np_buf


def _carry_counts(source: RateLimiter, target: RateLimiter | None, size: int) -> None:
    """``target`` (a clone of ``source``) takes ``source``'s inserts and samples, and the
    size of its own buffer."""
    assert target is not None  # built with the clone
    state = source.state_dict()
    target.load_state_dict({**state, "size": int(size)})


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
            :class:`rlreplay.PrioritizedReplayBuffer` (its envs may have added different
            numbers of steps, as after ``add(..., env_ids=...)``). A rank-based buffer's
            ranks become exact at every draw (the core's ``sort_interval=1``), whatever its
            ``sort_interval``.
        device: The device buffer's torch device.
        finals_per_env: Final observations kept per env (default: the device buffer's
            default, or more if the NumPy buffer holds more).
        seed: The device buffer's generator seed.

    Raises:
        rlreplay.ConfigError: A buffer the device buffer cannot represent (naming why): other
            samplers, recorded episodic returns, ``finals_per_env`` below the final
            observations held.
    """
    got = read_contents(
        np_buf, kind="device", finals_per_env=finals_per_env, default_finals=default_finals,
        lockstep=False, abandoned=True,
    )  # fmt: skip
    common: dict[str, Any] = dict(
        finals_per_env=got.finals_per_env, device=device, seed=seed, **got.kwargs
    )
    limiter = np_buf.rate_limiter
    if limiter is not None:  # its own limiter (one counts for one buffer); counters below
        common["rate_limiter"] = limiter.clone()
    buf: DeviceReplayBuffer
    if got.prioritized:
        buf = DevicePrioritizedReplayBuffer(got.capacity, got.fields, **common)
    else:
        buf = DeviceReplayBuffer(got.capacity, got.fields, **common)
    ring, st, ix = buf._ring, buf.storage, got.index
    for name in got.fields:
        st.assign(st.steps[name], Ellipsis, got.steps[name])
    for name in buf.config.observation_names:
        st.assign(st.finals[name], Ellipsis, got.finals[name])
    ring.set_counts(ix.count)
    for t, values in (
        (ring.head, ix.head), (ring.lo, ix.lo), (ring.hi, ix.hi),
        (ring.next_start, ix.last_end + 1),
        (ring.f_count, ix.f_count), (ring.f_head, ix.f_head), (ring.ep_start, ix.ep_start),
        (ring.final_fid, ix.final_fid), (ring.final_end[: ix.final_owner.size], ix.final_owner + 1),
    ):  # fmt: skip
        st.assign(t, Ellipsis, np.ascontiguousarray(values, np.int64))
    ring.relink()
    ring.holes = holes_from_index(
        buf.config, ring.device, ix.head, ix.count, ix.final_fid, ix.ep_start
    )
    if buf._prio is not None and got.priorities is not None:
        pri = buf._prio
        st.assign(pri.prio, Ellipsis, got.priorities.prio)
        pri.max_priority.fill_(got.priorities.max_priority)
        pri.beta_step = got.priorities.beta_step
        pri.rebuild()
    if limiter is not None and buf._pacing is not None:
        buf._pacing.reread(np.asarray(ix.count - ix.head, np.int64))
        _carry_counts(limiter, buf.rate_limiter, buf._pacing.size())
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
