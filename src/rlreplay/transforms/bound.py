"""What a bindable transform may read of the buffer it is bound to.

A transform with a ``bind(buffer)`` method (:class:`rlreplay.transforms.BindableTransform`) is
given the :class:`rlreplay.ReplayBuffer` it samples from, and runs under that buffer's lock.
:class:`BoundBuffer` names what it may use of it: the configuration, the lock, and the parts
it reads directly (the episode index, the columns, the random generator). Typed here, not
against ``ReplayBuffer``, because the buffer imports this package (never the reverse).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np

    from rlreplay.episodes.index import EpisodeIndex
    from rlreplay.spec.schema import Schema
    from rlreplay.storage import Columns

__all__ = ["BoundBuffer"]


class BoundBuffer(Protocol):
    """The part of a :class:`rlreplay.ReplayBuffer` a bindable transform uses."""

    @property
    def schema(self) -> Schema:
        """The buffer's fields."""
        ...

    @property
    def frame_stack(self) -> int:
        """Frames per stacked observation."""
        ...

    @property
    def n_step(self) -> int:
        """The n-step window."""
        ...

    @property
    def gamma(self) -> float:
        """The discount."""
        ...

    @property
    def _lock(self) -> Any:
        """The buffer's re-entrant lock."""
        ...

    @property
    def _index(self) -> EpisodeIndex:
        """The episode index (cursors, episodes, ids)."""
        ...

    @property
    def _cols(self) -> Columns:
        """The stored columns."""
        ...

    @property
    def _rng(self) -> np.random.Generator:
        """The buffer's one random generator (checkpointed)."""
        ...

    def _check_open(self) -> None:
        """Raise :class:`rlreplay.ReplayClosed` if the buffer is closed."""
        ...
