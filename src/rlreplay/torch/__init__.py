"""Replay on a torch device: eager, stateful buffers whose tensors live on any torch device
(``"cpu"``, ``"cuda:0"``, ...) and are updated in place.

:class:`DeviceReplayBuffer` and :class:`DevicePrioritizedReplayBuffer` have the NumPy core's
semantics (:class:`rlreplay.ReplayBuffer`, :class:`rlreplay.PrioritizedReplayBuffer`), for
envs that step together or subsets of them (``add(..., env_ids=...)``): the same ids, sampleable
transitions and transition values bit for bit, the same laws for draws, with the JAX buffer's
one documented difference (``finals_per_env``: an env that ends more episodes than it keeps
final observations for drops its oldest stored episode whole). ``add``, ``sample`` and
``update_priorities`` never wait for the device: they read no device value on the host, so a
training loop on a GPU keeps its queue full. :func:`to_replay_buffer` /
:func:`from_replay_buffer` move a buffer to and from the NumPy core (checkpoints: ``save`` and
:func:`load` use the core's format).

Owns: the device buffer (``buffer``, ``prioritized_buffer``), its write and read sides
(``writing``, ``reading``), bookkeeping (``ring``), abandoned episodes (``holes``), draws
(``draws``), transitions (``assemble``), priorities (``prioritized``), rate limiting
(``pacing``), transforms (``transforms``), conversions (``convert``), the compiled sample
(``compiled``). The field columns are a :class:`rlreplay.storage.TorchStorage`, the priority
trees
:mod:`rlreplay.sampling.torch_trees`; the arguments are checked by the core's own checks.
Torch is imported when a buffer is made (``import rlreplay`` stays free of it; this package's
import needs no torch).

Layout: env ``e``'s ring is rows ``e * C .. e * C + C - 1`` of every column (``C = capacity //
num_envs``), step ``t`` in row ``e * C + t % C``, its id ``t * num_envs + e``: the NumPy
core's layout, so storage and priorities are the core's row for row.

Example:
    >>> import numpy as np, torch, rlreplay as rr, rlreplay.torch as rrt
    >>> buf = rrt.DeviceReplayBuffer(100, {"obs": rr.Field((3,), np.float32)}, num_envs=4,
    ...                              device="cpu", seed=0)
    >>> buf.storage.steps["obs"].shape
    torch.Size([100, 3])
"""

from rlreplay.torch.batch import DeviceBatch
from rlreplay.torch.buffer import DeviceReplayBuffer
from rlreplay.torch.compiled import compiled_sampler
from rlreplay.torch.convert import from_replay_buffer, load, to_replay_buffer
from rlreplay.torch.prioritized_buffer import DevicePrioritizedReplayBuffer

__all__ = [
    "DeviceBatch",
    "DevicePrioritizedReplayBuffer",
    "DeviceReplayBuffer",
    "compiled_sampler",
    "from_replay_buffer",
    "load",
    "to_replay_buffer",
]
