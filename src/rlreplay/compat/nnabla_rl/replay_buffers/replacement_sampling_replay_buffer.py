"""Stand-in for ``nnabla_rl.replay_buffers.replacement_sampling_replay_buffer``."""

from __future__ import annotations

import operator
from typing import Any

from rlreplay.compat.nnabla_rl.replay_buffer import ReplayBuffer

__all__ = ["ReplacementSamplingReplayBuffer"]


class ReplacementSamplingReplayBuffer(ReplayBuffer):
    """nnabla-rl's replay buffer that samples *with* replacement.

    :meth:`sample` draws ``num_samples`` positions independently and uniformly from ``[0, len -
    num_steps + 1)`` (so a position can come twice, and ``num_samples`` may exceed the buffer's
    length), then returns ``sample_indices`` of them. Everything else is
    :class:`~rlreplay.compat.nnabla_rl.replay_buffer.ReplayBuffer`'s.

    Args:
        capacity: Most experiences kept, or None for no limit.
        seed: Seed of a random generator of the buffer's own (an rlreplay addition); without
            it the buffer draws from nnabla-rl's global ``random.drng``, as nnabla-rl does.

    Example:
        >>> import numpy as np
        >>> buffer = ReplacementSamplingReplayBuffer(capacity=10, seed=0)
        >>> buffer.append((np.zeros(2), 0, 1.0, 0.0, np.ones(2), {}))
        >>> experiences, info = buffer.sample(num_samples=3)
        >>> len(experiences), info["weights"].shape
        (3, (3, 1))
    """

    def __init__(self, capacity: int | None = None, *, seed: int | None = None) -> None:
        super().__init__(capacity=capacity, seed=seed)

    def sample(self, num_samples: int = 1, num_steps: int = 1) -> tuple[Any, dict[str, Any]]:
        """Randomly sample num_samples experiences, with replacement.

        Args:
            num_samples: Number of samples to sample from the replay buffer. Defaults to 1.
            num_steps: Number of timesteps to sample. Should be greater than 0. Defaults to 1.

        Returns:
            As :meth:`ReplayBuffer.sample`.

        Raises:
            ValueError: No position can be drawn (the buffer holds fewer than num_steps
                experiences), num_samples below 1, or num_steps 0 or negative.
        """
        num_samples, num_steps = operator.index(num_samples), operator.index(num_steps)
        if num_steps <= 0:
            raise ValueError(f"num_steps: {num_steps} should be greater than 0!")
        max_index = len(self) - num_steps + 1
        if max_index <= 0:
            raise ValueError(
                f"a must be greater than 0 unless no samples are taken (buffer length "
                f"{len(self)} < num_steps {num_steps})"
            )
        if num_samples < 0:
            raise ValueError("negative dimensions are not allowed")
        indices = self._rng.choice(max_index, size=num_samples, replace=True)
        return self.sample_indices(indices, num_steps=num_steps)
