"""Stand-in for ``nnabla_rl.replay_buffers.decorable_replay_buffer``."""

from __future__ import annotations

from collections.abc import Callable

from rlreplay.compat.nnabla_rl.replay_buffer import Experience, ReplayBuffer

__all__ = ["DecorableReplayBuffer"]


class DecorableReplayBuffer(ReplayBuffer):
    """Buffer which can decorate the experience with external decoration function.

    This buffer enables decorating the experience before the item is used for building the
    batch. Decoration function will be called when ``__getitem__`` is called (and so for every
    experience :meth:`sample` and :meth:`sample_indices` return). You can use this buffer to
    augment the data or add noise to the experience. The function gets each experience as it
    was appended (any object); in the columnar store its arrays are fresh copies each time, so
    stored data is never changed.

    Args:
        capacity: Most experiences kept, or None for no limit.
        decor_fun: ``experience -> experience``.
        seed: Seed of this buffer's random generator (an rlreplay addition).

    Example:
        >>> import numpy as np
        >>> from rlreplay.compat.nnabla_rl.replay_buffers import DecorableReplayBuffer
        >>> def noisy(e):
        ...     s, a, r, non_terminal, s_next, info = e
        ...     return (s + 0.5, a, r, non_terminal, s_next, info)
        >>> buffer = DecorableReplayBuffer(capacity=10, decor_fun=noisy)
        >>> buffer.append((np.zeros(2), np.zeros(1), 0.0, 0.0, np.ones(2), {}))
        >>> buffer[0][0]
        array([0.5, 0.5])
    """

    def __init__(
        self,
        capacity: int | None,
        decor_fun: Callable[[Experience], Experience],
        *,
        seed: int | None = None,
    ) -> None:
        super().__init__(capacity=capacity, seed=seed)
        # Not checked here: nnabla-rl calls it at the first read (TypeError if not callable).
        self._decor_fun = decor_fun

    def _decorate(self, experience: Experience) -> Experience:
        return self._decor_fun(experience)
