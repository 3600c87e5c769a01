"""One shard of a :class:`~rlreplay.distributed.ReplayService`: a core buffer in a Ray actor.

The class is plain Python (the service wraps it with ``ray.remote``), so it is tested without
Ray too. Every method runs whole on the actor's one thread: a shard's answer about its masses
and the draw that follows in the same call see the same state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rlreplay.batch import Batch
from rlreplay.buffer import ReplayBuffer
from rlreplay.prioritized import PrioritizedReplayBuffer
from rlreplay.spec import Field

__all__ = ["Shard"]

Array = np.ndarray[Any, Any]


class Shard:
    """A core buffer with the calls the service makes on it.

    Args:
        capacity: The shard's buffer capacity (the service's ``capacity // num_shards``).
        fields: As for :class:`rlreplay.ReplayBuffer`.
        num_envs: Local envs (service envs ``e`` with ``e % num_shards`` equal to the shard).
        prioritized: A :class:`rlreplay.PrioritizedReplayBuffer` (proportional) if True.
        seed: The buffer's seed.
        options: Other constructor arguments (``n_step``, ``gamma``, ``alpha``, ...).
    """

    def __init__(
        self,
        capacity: int,
        fields: Mapping[str, Field | tuple[Any, Any]],
        num_envs: int,
        prioritized: bool,
        seed: int,
        options: Mapping[str, Any],
    ) -> None:
        cls = PrioritizedReplayBuffer if prioritized else ReplayBuffer
        self.buffer: ReplayBuffer = cls(capacity, fields, num_envs=num_envs, seed=seed, **options)
        self.prioritized = prioritized
        self.version = 0  # counts writes, so the limiter can order the sizes it is told

    def extend(self, chunks: Sequence[tuple[int, Mapping[str, Any]]]) -> tuple[int, int, int]:
        """Store runs of consecutive steps, one ``(local env, values with axis T)`` each.

        Returns:
            ``(version, sampleable count, steps stored)`` after the writes.
        """
        stored = 0
        try:
            for env, values in chunks:
                stored += int(self.buffer.extend(env_id=env, **values).shape[0])
        finally:
            self.version += 1
        return self.version, self.buffer.num_sampleable, stored

    def info(self) -> tuple[int, float, float]:
        """``(sampleable count, mass, smallest positive mass)``: the mass is the count for a
        uniform shard and ``sum p ** alpha`` for a prioritized one (``inf``: no mass)."""
        buf = self.buffer
        if isinstance(buf, PrioritizedReplayBuffer):
            # The buffer's own sum and min trees (exact), read together under its lock.
            total, smallest, count = buf.priority_mass()
            return count, total, smallest
        count = buf.num_sampleable
        return count, float(count), 1.0 if count else float("inf")

    def sample(self, batch_size: int) -> tuple[Batch, float, float]:
        """Draw ``batch_size`` with the shard's own law, plus its masses at the draw."""
        buf = self.buffer
        batch = buf.sample(batch_size)
        if isinstance(buf, PrioritizedReplayBuffer):
            total, smallest, _ = buf.priority_mass()
            return batch, total, smallest
        return batch, float(buf.num_sampleable), 1.0

    def update_priorities(self, ids: Array, priorities: Array) -> int:
        """The core's ``update_priorities`` (stale ids ignored)."""
        buf = self.buffer
        if not isinstance(buf, PrioritizedReplayBuffer):
            from rlreplay.errors import ConfigError

            raise ConfigError("update_priorities: the service is not prioritized")
        return buf.update_priorities(ids, priorities)

    def sizes(self) -> tuple[int, int]:
        """``(stored, sampleable)`` transitions."""
        return len(self.buffer), self.buffer.num_sampleable

    def get_transitions(self, ids: Array) -> Batch:
        """The core's :meth:`~rlreplay.ReplayBuffer.get_transitions` (local ids)."""
        return self.buffer.get_transitions(ids)

    def close(self) -> None:
        """Close the buffer."""
        self.buffer.close()
