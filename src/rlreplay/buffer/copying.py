"""Pickling and copying of a replay buffer (``pickle``, ``copy.deepcopy``, ``copy.copy``).

Used by :class:`rlreplay.ReplayBuffer`'s ``__reduce__``, ``__copy__`` and ``__deepcopy__``. A
buffer pickles *by value*, through the same state a checkpoint holds
(:mod:`rlreplay.buffer.state`: the configuration, the scalars of ``meta`` with the RNG state
and counters, and the state arrays of the episode index, the columns and, for a prioritized
buffer, the priorities). Unpickling builds a buffer of the same class and configuration and
installs that state, checked as :func:`rlreplay.load` checks a file. So a copy holds the same
steps, episodes (abandoned ones included), priorities, id counters, ``beta`` step, rate-limiter
counters and RNG state, and the same further calls give the same results on the copy as on the
original; the two are independent from then on. Locks and conditions are new ones; nothing
waits on the copy.

What else travels, and how:

* ``storage="memmap"``: the arrays pickle by value, as a :class:`numpy.memmap` does, and the
  copy keeps them in memory (``storage="memory"``): its working directory belongs to the
  original. To copy onto disk, :meth:`~rlreplay.ReplayBuffer.save` and
  ``rlreplay.load(file, storage="memmap", path=...)``.
* ``storage="shared"`` (its arrays are shared with writer processes) and closed buffers are
  refused with :class:`rlreplay.ConfigError` / :class:`rlreplay.ReplayClosed`, the buffer left
  as it was: another process reaches a shared buffer through ``share()`` and
  :func:`rlreplay.attach`.
* ``rate_limiter``: the copy gets its own limiter with the same parameters and counters (a
  limiter counts for one buffer); waiters of the original stay with the original.
* ``transforms``: part of the pickled object, as attributes are in plain Python: functions by
  reference (a lambda or local function fails to pickle, as it does anywhere), objects by value.
  :func:`copy.deepcopy` deep-copies them (functions are kept: the copy module never copies
  them); :func:`copy.copy` takes a shallow copy of each. A bindable transform
  (:class:`rlreplay.HindsightRelabel`) arrives unbound and is bound to the copy.

Cost: pickling copies the state arrays under the lock once (so the pickle is one instant of
the buffer even while other threads write) and the pickle then holds them; a copy with
:mod:`copy` reads the original's arrays straight into the new buffer (one copy in all).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from rlreplay.errors import ConfigError, ReplayClosed
from rlreplay.limits import RateLimiter
from rlreplay.sampling.registry import sampler_from_config
from rlreplay.spec.schema import Schema

__all__ = ["clone", "reduce"]


def _constructed(cls: type[Any], config: Mapping[str, Any]) -> Any:
    """A new, empty ``cls`` with the configuration ``config`` (as ``_config()`` gives it)."""
    kwargs = dict(config)
    fields = Schema.from_json(kwargs.pop("fields")).fields
    if "rate_limiter" in kwargs:  # its parameters; its counters are in the state's meta
        kwargs["rate_limiter"] = RateLimiter.from_json(kwargs["rate_limiter"])
    if "sampler" in kwargs:  # a sampler given to the constructor: a new one like it
        kwargs["sampler"] = sampler_from_config(kwargs["sampler"])
    capacity = kwargs.pop("capacity")
    return cls(capacity, fields, **kwargs)


def _unpickle(
    cls: type[Any], config: Mapping[str, Any], meta: Mapping[str, Any], arrays: Mapping[str, Any]
) -> Any:
    """Rebuild a pickled buffer (module level: pickles refer to it by name)."""
    buf = _constructed(cls, config)
    try:
        buf._state.install(meta, arrays)
    except BaseException:
        buf.close()
        raise
    return buf


def check_copyable(buf: Any, what: str) -> None:
    """Refuse what cannot be copied by value (the buffer is left as it is)."""
    if buf._sync.closed:
        raise ReplayClosed(
            f"{what}: {type(buf).__name__} is closed; its storage was released (copy or "
            "save a buffer before close())"
        )
    if buf._backend.kind == "shared" or buf._sync.shared is not None:
        raise ConfigError(
            f"{what}: storage='shared' buffers are not copied by value (their arrays are "
            "shared with writer processes); give another process the buffer with "
            "buffer.share() and rlreplay.attach(handle), or copy it with save() and "
            "rlreplay.load()"
        )


def snapshot(buf: Any, what: str, copy_arrays: bool) -> tuple[dict[str, Any], ...]:
    """``(config, meta, arrays)`` of ``buf`` now (under its lock), arrays copied or live views."""
    check_copyable(buf, what)
    buf._backend.flush()
    state = buf._state
    live = state.arrays()
    return (
        buf._config(),
        copy.deepcopy(state.meta()),
        {k: np.array(v) for k, v in live.items()} if copy_arrays else live,
    )


def reduce(buf: Any) -> tuple[Any, ...]:
    """``buf.__reduce__()``: ``(rebuild, (class, config, meta, arrays), {"transforms": ...})``.

    The transforms go in the state part, which pickle fills in after the new buffer exists,
    so a transform that refers back to the buffer gets the new one.

    Raises:
        ConfigError: ``storage="shared"`` (use ``share()`` / :func:`rlreplay.attach`).
        ReplayClosed: The buffer is closed.
    """
    with buf._lock:
        config, meta, arrays = snapshot(buf, "pickle", copy_arrays=True)
        return (_unpickle, (type(buf), config, meta, arrays), {"transforms": buf.transforms})


def clone(buf: Any, memo: dict[int, Any] | None, copier: Callable[[Any], Any]) -> Any:
    """An independent copy of ``buf`` (``copy.copy``/``copy.deepcopy``: ``copier`` copies
    each transform)."""
    with buf._lock:
        config, meta, live = snapshot(buf, "copy", copy_arrays=False)
        new = _constructed(type(buf), config)
        try:
            new._state.install(meta, live)  # one copy: from the live arrays into the new ones
            if memo is not None:
                memo[id(buf)] = new  # a transform that refers back gets the copy
            new._set_transforms(tuple(copier(fn) for fn in buf.transforms))
        except BaseException:
            new.close()
            raise
        return new
