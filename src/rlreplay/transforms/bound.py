"""What a bindable transform may read of the buffer it is bound to.

A transform with a ``bind(buffer)`` method (:class:`rlreplay.transforms.BindableTransform`) is
given the :class:`rlreplay.ReplayBuffer` it samples from, and runs under that buffer's lock.
:class:`BoundBuffer` names what it may use of it: the configuration, the lock, and the parts
it reads directly (the episode index, the columns, the random generator). Typed here, not
against ``ReplayBuffer``, because the buffer imports this package (never the reverse).

Buffers that cannot bind a transform (the torch device buffer, the JAX buffer) refuse
bindable ones by name with :func:`unbound_transforms`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np

    from rlreplay.episodes.index import EpisodeIndex
    from rlreplay.spec.schema import Schema
    from rlreplay.storage import Columns

__all__ = ["BoundBuffer", "unbound_transforms"]


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


def unbound_transforms(
    fns: Sequence[Any], names: Sequence[str], batch: str, instead: str
) -> tuple[Callable[..., Any], ...]:
    """``fns`` checked for a buffer that cannot bind transforms (a device or JAX buffer): each
    a callable without ``bind``. Raises :class:`~rlreplay.ConfigError` naming the offending
    ``names[i]``, with ``batch`` (the batch type's name) and ``instead`` (what a bindable
    transform's user can do instead, after the reason) in the message."""
    from rlreplay.errors import ConfigError

    for fn, name in zip(fns, names, strict=True):
        if not callable(fn):
            raise ConfigError(f"{name}: expected a callable {batch} -> {batch}, got {fn!r}")
        if hasattr(fn, "bind"):  # a BindableTransform
            raise ConfigError(
                f"{name}: {type(fn).__name__} is a bindable transform: it reads the episode "
                f"index, columns and NumPy generator of a host buffer, {instead}"
            )
    return tuple(fns)
