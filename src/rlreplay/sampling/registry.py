"""Samplers by name, so that a buffer built with ``sampler=`` can be rebuilt from its
configuration (checkpoints, copies, pickles).

A buffer whose sampler is not its class's default records it in its configuration as
``{"name": sampler.name, **sampler.config()}``; :func:`sampler_from_config` makes a new,
unbound sampler from that. :func:`register_sampler` adds a sampler class of one's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlreplay.errors import ConfigError
from rlreplay.sampling.base import Sampler
from rlreplay.sampling.prioritized import PrioritizedSampler
from rlreplay.sampling.uniform_sampler import UniformSampler

__all__ = ["register_sampler", "sampler_from_config"]

_SAMPLERS: dict[str, type[Any]] = {"uniform": UniformSampler, "prioritized": PrioritizedSampler}


def register_sampler(cls: type[Any]) -> type[Any]:
    """Make ``cls`` (a :class:`~rlreplay.sampling.Sampler` class whose ``config()`` gives its
    constructor's keyword arguments) rebuildable by its ``name``; returns ``cls``.

    Raises:
        ConfigError: ``cls`` has no ``name``, or another class has that name.
    """
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise ConfigError(f"register_sampler: {cls!r} has no str attribute 'name'")
    known = _SAMPLERS.get(name)
    if known is not None and known is not cls:
        raise ConfigError(f"register_sampler: the name {name!r} is taken by {known!r}")
    _SAMPLERS[name] = cls
    return cls


def sampler_from_config(spec: Mapping[str, Any]) -> Sampler:
    """A new sampler from ``{"name": ..., **config}`` (as a buffer's configuration holds it).

    Raises:
        ConfigError: An unknown name (pass ``sampler=`` to the call that rebuilds the buffer,
            or register the class), or arguments its class refuses.
    """
    params = dict(spec)
    name = params.pop("name", None)
    cls = _SAMPLERS.get(str(name))
    if cls is None:
        raise ConfigError(
            f"sampler: no sampler class is registered as {name!r} (known: {sorted(_SAMPLERS)}); "
            "give sampler= again or register the class with rlreplay.sampling.register_sampler"
        )
    sampler: Sampler = cls(**params)
    return sampler
