"""Stand-in for ``nnabla_rl.replay_buffers.buffer_iterator``: a replay buffer in batches.

nnabla-rl's on-policy algorithms (PPO, TRPO, GAIL, ...) fill a buffer, then run epochs over it
with ``BufferIterator``; each batch is whatever the buffer's ``sample_indices`` returns.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

import rlreplay.compat.nnabla_rl.random as rl_random
from rlreplay.compat.nnabla_rl._checks import check_seed

__all__ = ["BufferIterator"]


class BufferIterator:
    """Iterates through a replay buffer in batches of ``batch_size`` positions.

    The positions ``0 .. len(buffer) - 1`` (taken when the iterator is built) are visited once
    per epoch, shuffled at the start of every epoch when ``shuffle`` is true; the last batch of
    an epoch holds the positions left (it may be smaller). Each batch is
    ``buffer.sample_indices(positions)``, so ``(experiences, info)`` for nnabla-rl's buffers.
    When an epoch is over, :meth:`next` starts the next one (``repeat=True``) or raises
    ``StopIteration``; :meth:`reset` starts a new epoch at once.

    Args:
        buffer: Anything with ``len()`` and ``sample_indices(indices)``.
        batch_size: Positions per batch.
        shuffle: Visit the positions in a new random order each epoch.
        repeat: Start over when an epoch is over, instead of stopping.
        seed: Seed of a generator of the iterator's own for the shuffles (an rlreplay
            addition); without it the shuffles draw from nnabla-rl's global ``random.drng``
            (seeded by ``utils.reproductions.set_global_seed``), as nnabla-rl's do.

    Example:
        >>> import numpy as np
        >>> from rlreplay.compat.nnabla_rl.replay_buffer import ReplayBuffer
        >>> buffer = ReplayBuffer()
        >>> buffer.append_all([(np.zeros(1), 0, float(t), 1.0, np.zeros(1), {}) for t in range(5)])
        >>> iterator = BufferIterator(buffer, batch_size=2, shuffle=False, repeat=False)
        >>> [[e[2] for e in experiences] for experiences, info in iterator]
        [[0.0, 1.0], [2.0, 3.0], [4.0]]
    """

    def __init__(
        self,
        buffer: Any,
        batch_size: int,
        shuffle: bool = True,
        repeat: bool = True,
        *,
        seed: int | None = None,
    ) -> None:
        self._replay_buffer = buffer
        self._batch_size = operator.index(batch_size)
        self._shuffle = shuffle
        self._repeat = repeat
        seed = check_seed(seed)
        self._own_rng = None if seed is None else np.random.default_rng(seed)
        self._indices = np.arange(len(buffer))
        self._index = 0
        self.reset()

    @property
    def _rng(self) -> np.random.Generator:
        """The shuffles' generator: the iterator's own (``seed=``) or nnabla-rl's ``drng``."""
        return rl_random.drng if self._own_rng is None else self._own_rng

    def __iter__(self) -> BufferIterator:
        return self

    def __next__(self) -> Any:
        return self.next()

    def next(self) -> Any:
        """The next batch: ``buffer.sample_indices`` of the next ``batch_size`` positions.

        Raises:
            StopIteration: The epoch is over and ``repeat`` is false.
        """
        if self._end_of_buffer():
            if not self._repeat:
                raise StopIteration
            self.reset()
        indices = self._indices[self._index : self._index + self._batch_size]
        self._index += self._batch_size
        return self._sample(indices)

    def _sample(self, indices: np.ndarray[Any, Any]) -> Any:
        return self._replay_buffer.sample_indices(indices)

    def _end_of_buffer(self) -> bool:
        return len(self._indices) <= self._index

    def reset(self) -> None:
        """Start a new epoch (reshuffled when ``shuffle`` is true)."""
        self._index = 0
        if self._shuffle:
            self._rng.shuffle(self._indices)
