"""FIFO use of a device buffer: ``dequeue`` and ``gather_all``, as the NumPy core's
(:mod:`rlreplay.buffer.fifo`, ALF's ``dequeue`` and ``gather_all``).

Both read whole runs from each env's oldest stored step with the sequence gather
(:func:`rlreplay.torch.sequences.gather`): raw per-step fields shaped ``(K, T, ...)``, with
``next_<obs>``, ``mask``, ``next_known`` and per-step ``ids`` and ``env_ids``. ``dequeue``
then drops those steps (:meth:`rlreplay.torch.ring.Ring.dequeue`), as the core's
``EpisodeIndex.dequeue`` does: the envs' ``head`` moves, final records of dropped steps are
freed, ``lo`` and ``hi`` are recomputed, and a prioritized buffer's leaves of dropped steps
lose their mass.

What they return has a shape that depends on what is stored (``gather_all``) or must be
refused when too little is stored (``dequeue``): both read the per-env counts on the host, one
wait for the device each.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from rlreplay.buffer.sync import check_timeout, flag
from rlreplay.errors import ConfigError, EmptyBufferError, ShapeError
from rlreplay.spec import positive_int
from rlreplay.torch.batch import DeviceBatch
from rlreplay.torch.config import host_env_ids

if TYPE_CHECKING:
    from torch import Tensor

    from rlreplay.torch.buffer import DeviceReplayBuffer

__all__ = ["dequeue", "gather_all", "host_env_ids"]

Array = np.ndarray[Any, Any]


def _runs_from_heads(buf: DeviceReplayBuffer, env: Tensor, length: int) -> dict[str, Tensor]:
    """Runs of ``length`` steps from envs ``env``'s oldest stored steps (real up to each
    env's newest), with per-step ``ids`` and ``env_ids`` ``(K, length)``."""
    import torch

    from rlreplay.torch import sequences

    ring = buf._ring
    t0 = ring.head.index_select(0, env)
    out = sequences.gather(ring, buf.storage, env, t0, length, False)
    E = buf.config.num_envs
    lanes = torch.arange(length, dtype=torch.int64, device=buf.device)
    out["ids"] = (t0[:, None] + lanes) * E + env[:, None]
    out["env_ids"] = env[:, None].expand(-1, length).clone()
    return out


def dequeue(
    buf: DeviceReplayBuffer, n: int, env_ids: Any = None, *, block: bool = False,
    timeout: float | None = None,
) -> DeviceBatch:  # fmt: skip
    """See :meth:`rlreplay.torch.DeviceReplayBuffer.dequeue`."""
    import torch

    n = positive_int("n", n)
    check_timeout(timeout)
    if flag("block", block):
        raise ConfigError(
            "block: a device buffer is used from one thread, so no add can come while "
            "dequeue waits; expected block=False"
        )
    c, ring = buf.config, buf._ring
    envs = np.arange(c.num_envs) if env_ids is None else host_env_ids(c.num_envs, env_ids)
    if n > c.env_capacity:
        raise ShapeError(
            f"n: {n} steps per env can never be stored (env_capacity {c.env_capacity}); "
            "dequeue at most that many"
        )
    stored = ring.env_counts() - ring.head.cpu().numpy()
    if (stored[envs] < n).any():
        raise EmptyBufferError(
            f"dequeue: {n} steps per env requested, envs hold {stored[envs].tolist()}"
        )
    env = torch.from_numpy(envs.copy()).to(buf.device)
    out = _runs_from_heads(buf, env, n)
    if envs.size:
        ring.dequeue(env, n)
        ring.settle(buf.storage.steps["terminated"], buf.storage.steps["truncated"])
        if buf._prio is not None:
            buf._prio.rebuild()
        stored[envs] -= n
        ring.prune_holes(ring.env_counts() - stored)  # (the new heads, on the host)
        if buf._pacing is not None:  # a removal is no sample; the limiter's size drops
            buf._pacing.reread(stored)
    return DeviceBatch(out)


def gather_all(buf: DeviceReplayBuffer) -> DeviceBatch:
    """See :meth:`rlreplay.torch.DeviceReplayBuffer.gather_all`."""
    ring = buf._ring
    stored = ring.env_counts() - ring.head.cpu().numpy()
    return DeviceBatch(_runs_from_heads(buf, ring.envs, int(stored.max())))
