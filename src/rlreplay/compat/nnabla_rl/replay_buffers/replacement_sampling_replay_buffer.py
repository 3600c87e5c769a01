"""Stand-in for ``nnabla_rl.replay_buffers.replacement_sampling_replay_buffer``."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlreplay.compat.nnabla_rl.replay_buffer import ReplayBuffer
from rlreplay.spec import check_rows

__all__ = ["ReplacementSamplingReplayBuffer"]

Array = np.ndarray[Any, Any]


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

        nnabla-rl 0.16.0's steps: ``max_index = len - num_steps + 1``, the draw
        (:meth:`_random_indices`), then :meth:`sample_indices` (which rejects ``num_steps``
        below 1 after the draw, and ``num_samples == 0`` as empty indices).

        Args:
            num_samples: Number of samples to sample from the replay buffer. Defaults to 1.
            num_steps: Number of timesteps to sample. Should be greater than 0. Defaults to 1.

        Returns:
            As :meth:`ReplayBuffer.sample`.

        Raises:
            ValueError: No position can be drawn (the buffer holds fewer than num_steps
                experiences), num_samples 0 or negative, or num_steps 0 or negative.
            TypeError: A num_samples NumPy's draw does not take as a size.
        """
        max_index = len(self) - num_steps + 1
        if isinstance(num_samples, int | np.integer) and isinstance(num_steps, int | np.integer):
            # (before the draw: num_samples draws, then num_steps reads of each)
            n, k = int(num_samples), max(1, int(num_steps))
            check_rows("num_samples", num_samples, n * k, 32, "sample")
        indices = self._random_indices(num_samples=num_samples, max_index=max_index)
        return self.sample_indices(indices, num_steps=num_steps)

    def _random_indices(self, num_samples: int, max_index: int | None = None) -> Array:
        """``drng.choice(max_index, size=num_samples, replace=True)``, as nnabla-rl draws.

        Raises:
            ValueError: ``max_index`` below 1 with ``num_samples`` not 0, or a negative
                ``num_samples`` (NumPy's checks, the buffer's figures added).
        """
        if max_index is None:
            max_index = len(self)
        try:
            out: Array = self._rng.choice(max_index, size=num_samples, replace=True)
        except ValueError as exc:
            raise ValueError(
                f"sample: cannot draw num_samples={num_samples!r} positions from "
                f"[0, {max_index!r}) (buffer length {len(self)}): {exc}"
            ) from None
        return out
