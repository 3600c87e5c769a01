"""Stand-in for ``nnabla_rl.replay_buffers.buffer_iterator``: a replay buffer in batches.

nnabla-rl's on-policy algorithms (PPO, TRPO, GAIL, ...) fill a buffer, then run epochs over it
with ``BufferIterator``; each batch is whatever the buffer's ``sample_indices`` returns. The
logic is nnabla-rl 0.16.0's (Apache-2.0, Sony Group Corporation), checked against its source.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from rlreplay.compat.nnabla_rl._checks import check_seed

__all__ = ["BufferIterator"]


class BufferIterator:
    """Iterates through a replay buffer in batches of ``batch_size`` positions (nnabla-rl's).

    :meth:`reset` takes the positions ``0 .. len(buffer) - 1`` (shuffled when ``shuffle``).
    :meth:`next` returns ``buffer.sample_indices`` of the next ``batch_size`` of them. The
    batch that reaches the end of the positions ends the epoch (:meth:`is_new_epoch` turns
    true): with ``repeat`` it is filled up from a new epoch's positions, otherwise it holds
    the positions left. The call after it raises ``StopIteration`` (so a ``for`` loop runs
    one epoch); with ``repeat`` the calls after that go on with the new epoch.

    Args:
        buffer: Any buffer with ``len`` and ``sample_indices`` (nnabla-rl's buffers).
        batch_size: Positions per batch.
        shuffle: Shuffle the positions at every :meth:`reset` (with NumPy's global
            ``np.random.shuffle``, as nnabla-rl does).
        repeat: Fill the epoch's last batch from the next epoch and go on after it.
        seed: Seed of a generator of the iterator's own for the shuffles (an rlreplay
            addition); without it the shuffles use ``np.random.shuffle``, as nnabla-rl's do.

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
        self._new_epoch = False
        self._batch_size = operator.index(batch_size)
        self._shuffle = shuffle
        self._repeat = repeat
        seed = check_seed(seed)
        self._own_rng = None if seed is None else np.random.default_rng(seed)
        self._indices: np.ndarray[Any, Any] = np.arange(0)
        self._index = 0
        self.reset()

    def __iter__(self) -> BufferIterator:
        return self

    def next(self) -> Any:
        """The next batch: ``buffer.sample_indices`` of the next ``batch_size`` positions.

        Raises:
            StopIteration: The previous batch ended an epoch (then the flag is cleared).
        """
        if self.is_new_epoch():
            self._new_epoch = False
            raise StopIteration
        indices = self._indices[self._index : self._index + self._batch_size]
        if len(indices) < self._batch_size:
            if self._repeat:
                rest = self._batch_size - len(indices)
                self.reset()
                indices = np.append(indices, self._indices[self._index : self._index + rest])
                self._index += rest
            else:
                self._index = len(self._replay_buffer)
            self._new_epoch = True
        else:
            self._index += self._batch_size
            self._new_epoch = len(self._replay_buffer) <= self._index
        return self._sample(indices)

    __next__ = next

    def is_new_epoch(self) -> bool:
        """Whether the last batch ended an epoch."""
        return self._new_epoch

    def reset(self) -> None:
        """Start a new epoch: the buffer's positions, shuffled when ``shuffle`` is true."""
        self._indices = np.arange(len(self._replay_buffer))
        if self._shuffle:
            if self._own_rng is None:
                np.random.shuffle(self._indices)  # noqa: NPY002 (nnabla-rl's global shuffle)
            else:
                self._own_rng.shuffle(self._indices)
        self._index = 0

    def _sample(self, indices: np.ndarray[Any, Any]) -> Any:
        return self._replay_buffer.sample_indices(indices)
