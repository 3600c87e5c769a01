"""Replay inside ``jax.jit``: a buffer of pure functions over a pytree state.

:func:`make_buffer` returns a :class:`JaxBuffer` whose ``init``, ``add``, ``sample``,
``sample_sequences``, ``update_priorities``, ``get_transitions``, ``get_sequences``,
``clear``, ``abandon_episode`` and ``can_sample`` are pure functions of a
:class:`BufferState` (a pytree of arrays), usable under ``jit``, inside ``lax.scan``, under
``vmap`` and with donated buffers. The semantics are the NumPy core's (ids, sampleable
transitions, n-step windows, final observations, frame stacks, sequences, the recency mix,
the proportional and rank-based laws, abandoned episodes); :func:`to_replay_buffer` and
:func:`from_replay_buffer` move a state to and from a NumPy :class:`rlreplay.ReplayBuffer`
(checkpoints, inspection, exports).

Owns: the JAX state layout and its kernels (``ring``: episode bookkeeping, ``assemble``:
transitions, ``sequences``: runs of steps, ``draws``: uniform draws and the recency mix,
``tree``, ``prioritized`` and ``rank``: the prioritized laws, ``holes``: abandoned
episodes). Knows nothing of the NumPy core's storage or sampler internals: conversions go
through the public ``state_dict`` / ``load_state_dict``. JAX is imported on first use, so
``import rlreplay`` (and this package's import) stays free of it.

Memory: observations are stored once; an env keeps the final observations of at most
``finals_per_env`` ended episodes in a small side ring (default a quarter of its slots), since
shapes are static under ``jit``. An env that ends more episodes within its ring drops its
oldest stored episode whole (see :class:`JaxBuffer`).

Example:
    >>> import jax, numpy as np, rlreplay as rr, rlreplay.jax as rrj
    >>> buf = rrj.make_buffer(capacity=100, fields={"obs": rr.Field((3,), np.float32)})
    >>> state = buf.init()
    >>> state.columns["obs"].shape
    (100, 3)
"""

from rlreplay.jax.batch import JaxBatch
from rlreplay.jax.buffer import JaxBuffer
from rlreplay.jax.convert import from_replay_buffer, to_replay_buffer
from rlreplay.jax.factory import make_buffer
from rlreplay.jax.state import BufferState, PriorityState

__all__ = [
    "BufferState",
    "JaxBatch",
    "JaxBuffer",
    "PriorityState",
    "from_replay_buffer",
    "make_buffer",
    "to_replay_buffer",
]
