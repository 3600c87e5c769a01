"""Sample-time transforms on a device buffer: functions ``DeviceBatch -> DeviceBatch``, as the
core's (:mod:`rlreplay.transforms`).

A buffer's ``transforms=[...]`` are applied in order to every :meth:`sample` (and
:meth:`get_transitions` does not apply them, as the core's), then a call's
``transform=f`` (:meth:`sample`, :meth:`sample_sequences`; the buffer's transforms are for
transitions and do not apply to sequences). A transform gets the batch of tensors on the
device and returns a new one (``batch.replace(...)``); it runs on the host thread that calls
``sample``, with whatever device work it queues. If it raises, the draw is rolled back, as in
the core: the buffer's generator (and a prioritized buffer's ``beta`` step) is put back as it
was, a rate limiter's grant is handed back, and the exception passes through.

Bindable transforms (a ``bind(buffer)`` method, :class:`rlreplay.transforms.HindsightRelabel`)
read the buffer they are bound to: the core's episode index and NumPy columns, under its lock,
with its NumPy generator. A device buffer has none of those on the host, so it refuses them
by name (:class:`~rlreplay.ConfigError`); relabel on a core buffer (:meth:`to_replay_buffer`)
or write the relabelling as a function of the batch's tensors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from rlreplay.errors import ConfigError
from rlreplay.torch.batch import DeviceBatch
from rlreplay.transforms.bound import unbound_transforms

if TYPE_CHECKING:
    import torch

    from rlreplay.torch.prioritized import Priorities

__all__ = ["DeviceTransform", "apply", "checked", "checked_all", "rollback_point"]

DeviceTransform: TypeAlias = Callable[[DeviceBatch], DeviceBatch]


#: What a bindable transform's refusal says after the reason.
_INSTEAD = (
    "which a device buffer keeps on the device; sample it from a host buffer "
    "(to_replay_buffer(), or storage='memory'), or pass a function DeviceBatch -> DeviceBatch"
)


def checked(fn: Any, name: str) -> DeviceTransform:
    """``fn`` if a device buffer can apply it, else :class:`ConfigError` naming ``name``."""
    out: DeviceTransform = unbound_transforms([fn], [name], "DeviceBatch", _INSTEAD)[0]
    return out


def checked_all(fns: Sequence[Any]) -> tuple[DeviceTransform, ...]:
    """The constructor's ``transforms``, each checked."""
    if isinstance(fns, str | bytes) or not isinstance(fns, Sequence):
        raise ConfigError(
            f"transforms: expected a sequence of callables DeviceBatch -> DeviceBatch, got {fns!r}"
        )
    names = [f"transforms[{i}]" for i in range(len(fns))]
    return unbound_transforms(fns, names, "DeviceBatch", _INSTEAD)


def apply(fn: DeviceTransform, batch: DeviceBatch) -> DeviceBatch:
    """``fn(batch)``, checked to be a :class:`DeviceBatch` (as the core checks a transform's
    :class:`rlreplay.Batch`)."""
    out = fn(batch)
    if not isinstance(out, DeviceBatch):
        raise TypeError(
            f"transform {getattr(fn, '__name__', fn)!r} returned {type(out).__name__}; a "
            "device buffer's transform must return a DeviceBatch (use batch.replace(...))"
        )
    return out


def rollback_point(gen: torch.Generator, prio: Priorities | None) -> Callable[[], None]:
    """A function that puts the generator and ``beta``'s step back as they are now (the
    generator's state is a host copy: no wait for the device)."""
    state = gen.get_state()
    step = None if prio is None else prio.beta_step

    def undo() -> None:
        gen.set_state(state)
        if prio is not None and step is not None:
            prio.beta_step = step

    return undo
