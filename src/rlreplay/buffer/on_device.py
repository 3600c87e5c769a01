"""``storage="torch"``: a buffer whose columns, episode index and priorities live on a torch
device, made by the core's own constructors.

``rr.ReplayBuffer(capacity, fields, storage="torch", device="cuda:0", ...)`` returns a
:class:`rlreplay.torch.DeviceReplayBuffer` and ``rr.PrioritizedReplayBuffer(...,
storage="torch", ...)`` a :class:`rlreplay.torch.DevicePrioritizedReplayBuffer`: the same
arguments, methods and semantics (see :mod:`rlreplay.torch` for the few differences), with
tensors in and out. An argument of the core that the device buffer does not offer
(``record_episodic_return``, ``sampler``, ``path``, an
``as_`` other than ``"torch"``) is refused with a :class:`~rlreplay.ConfigError` naming it,
unless it has its default value; ``finals_per_env`` (the device buffer's own) is accepted
with ``storage="torch"`` only.

Only the two core classes route (``ReplayBuffer.__new__`` asks :func:`routes`); a subclass
keeps the host storages.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from rlreplay.errors import ConfigError

__all__ = ["device_buffer", "routes"]

_ROUTED = ("ReplayBuffer", "PrioritizedReplayBuffer")


def routes(cls: type, kwargs: Mapping[str, Any]) -> bool:
    """Whether ``cls(..., **kwargs)`` makes a device buffer instead of ``cls``."""
    storage = kwargs.get("storage")
    return (
        isinstance(storage, str)
        and storage == "torch"
        and cls.__module__.startswith("rlreplay.buffer.")
        and cls.__name__ in _ROUTED
    )


def _parameters(fn: Any) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(fn).parameters)


def device_buffer(cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The device buffer that ``cls(*args, storage="torch", **kwargs)`` stands for.

    Raises:
        ConfigError: An argument the device buffer does not offer, with other than its
            default value; torch not installed.
    """
    try:
        from rlreplay import torch as rrt
    except ImportError as exc:  # pragma: no cover - exercised without torch installed
        raise ConfigError(
            f"storage: 'torch' needs torch (pip install 'rlreplay[torch]'): {exc}"
        ) from None
    target = (
        rrt.DevicePrioritizedReplayBuffer
        if cls.__name__ == "PrioritizedReplayBuffer"
        else rrt.DeviceReplayBuffer
    )
    kwargs = {k: v for k, v in kwargs.items() if k != "storage"}
    offered = _parameters(target)
    core = _parameters(cls)  # its constructor's parameters
    if cls.__name__ == "PrioritizedReplayBuffer":  # its **kwargs are ReplayBuffer's
        from rlreplay.buffer.replay import ReplayBuffer

        core |= _parameters(ReplayBuffer)
    passed: dict[str, Any] = {}
    for name, value in kwargs.items():
        if name in offered:
            passed[name] = value
            continue
        default = core[name].default if name in core else inspect.Parameter.empty
        if name == "as_":
            if value is None or (isinstance(value, str) and value == "torch"):
                continue  # a device buffer's batches are torch tensors
            raise ConfigError(
                f"as_: a storage='torch' buffer returns torch tensors on its device; got "
                f"{value!r} (pass as_='torch' or leave it out)"
            )
        if default is not inspect.Parameter.empty and _same(value, default):
            continue
        raise ConfigError(
            f"{name}: storage='torch' does not offer it (got {value!r}); the device buffer "
            f"takes {sorted(n for n in offered if n not in ('self', 'capacity', 'fields'))}. "
            "For it, use a host storage ('memory', 'memmap', 'shared')"
        )
    if "device" not in passed or passed["device"] is None:
        passed["device"] = "cpu"
    return target(*args, **passed)


def _same(value: Any, default: Any) -> bool:
    """Whether ``value`` is the default (an empty list for an empty tuple too)."""
    if isinstance(default, tuple) and isinstance(value, list | tuple):
        value = tuple(value)
    try:
        return bool(value == default)
    except Exception:  # an array, or an object whose == raises: not the default
        return False
