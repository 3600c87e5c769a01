"""Sample-time transforms: functions from :class:`rlreplay.Batch` to :class:`rlreplay.Batch`.

A transform never modifies stored data. Give transforms to a buffer (``transforms=[...]``,
applied in order to every sample, as nnabla-rl's ``DecorableReplayBuffer`` does) or to one call
(``buf.sample(B, transform=f)``). A transform that needs the buffer itself (to read other steps
of an episode, or the buffer's random generator) has a ``bind(buffer)`` method, which the buffer
calls before first use; it then runs under the buffer's lock.

:class:`HindsightRelabel` (hindsight experience replay) is the library's bindable transform.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeAlias, runtime_checkable

from rlreplay.batch import Batch
from rlreplay.transforms.bound import BoundBuffer
from rlreplay.transforms.hindsight import HindsightRelabel

__all__ = ["BindableTransform", "BoundBuffer", "HindsightRelabel", "Transform", "apply_transform"]

Transform: TypeAlias = Callable[[Batch], Batch]


@runtime_checkable
class BindableTransform(Protocol):
    """A transform that must know the buffer it samples from."""

    def bind(self, buffer: BoundBuffer) -> None:
        """Attach to ``buffer`` (called by the buffer before the first use)."""
        ...

    def __call__(self, batch: Batch) -> Batch:
        """Return the transformed batch."""
        ...


def apply_transform(fn: Any, batch: Batch) -> Batch:
    """Call ``fn(batch)`` and check that it returned a :class:`Batch`."""
    out = fn(batch)
    if not isinstance(out, Batch):
        raise TypeError(
            f"transform {getattr(fn, '__name__', fn)!r} returned {type(out).__name__}; a "
            "transform must return an rr.Batch (use batch.replace(...))"
        )
    return out
