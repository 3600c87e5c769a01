"""The buffer's synchronisation part: one re-entrant lock, the condition blocking calls wait on,
and whether the buffer is open.

Every public method of :class:`rlreplay.ReplayBuffer` takes :attr:`Sync.lock` for its own
duration (:class:`Atomic` holds it across several calls). Blocking calls (``add(block=True)``,
``dequeue(block=True)``) wait on :attr:`Sync.cond`, a condition on the same lock, with
:class:`queue.Queue` timeout semantics (:meth:`Sync.wait`); :meth:`Sync.close` wakes them and
they raise :class:`rlreplay.ReplayClosed`. This module knows no array and no other part: the
shared-memory state (:mod:`rlreplay.sharing`), when a buffer has one, is folded in by
:meth:`Sync.check_open` through its ``fold()``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any, Generic, TypeVar

import numpy as np

from rlreplay.errors import ConfigError, ReplayClosed, ReplayTimeout
from rlreplay.spec.arguments import shown, timeout_seconds

__all__ = ["Atomic", "Sync", "check_timeout", "flag"]

_B = TypeVar("_B")


class Sync:
    """The lock, the condition and the open/closed state of one buffer.

    Invariant: :attr:`lock` (re-entrant) guards every part of the buffer; :attr:`cond` is a
    condition on it; :attr:`waiting` counts the calls waiting on it (writers notify only when
    it is not 0); once :attr:`closed`, nothing reads or writes the buffer's storage.
    """

    __slots__ = ("closed", "cond", "lock", "owner", "shared", "waiting")

    def __init__(self, owner: str) -> None:
        self.owner = owner  # the buffer's class name, for errors
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.waiting = 0
        self.closed = False
        # rlreplay.sharing.handle.SharedState once the buffer was shared, else None
        self.shared: Any = None

    def check_open(self) -> None:
        """Raise :class:`ReplayClosed` if closed; fold in the steps writer processes published
        (``storage="shared"``). Called under :attr:`lock` by every call that reads or writes."""
        if self.closed:
            raise ReplayClosed(f"{self.owner} is closed")
        if self.shared is not None:
            self.shared.fold()

    def wake(self) -> None:
        """Wake blocking calls (after a write or removal), if any wait."""
        if self.waiting:
            self.cond.notify_all()

    def wait(self, ready: Callable[[], bool], timeout: float | None, what: str) -> None:
        """Wait (releasing the lock) until ``ready()``; ``queue.Queue`` timeout semantics, with
        ``inf`` (or more than the platform can wait) for ever and NaN refused
        (:func:`check_timeout`)."""
        seconds = check_timeout(timeout)
        if ready():
            return
        self.waiting += 1
        try:
            done = self.cond.wait_for(lambda: self.closed or ready(), seconds)
        finally:
            self.waiting -= 1
        self.check_open()
        if not done:
            raise ReplayTimeout(f"{what}: not possible within timeout={timeout} s")

    def close(self) -> bool:
        """Mark closed and wake every waiter (they raise :class:`ReplayClosed`); False if it
        was closed already."""
        if self.closed:
            return False
        self.closed = True
        if self.shared is not None:
            self.shared.close()  # writers see the buffer closed
        self.cond.notify_all()
        return True


class Atomic(Generic[_B]):
    """The context manager :meth:`ReplayBuffer.atomic` returns: holds the buffer's lock."""

    __slots__ = ("_buffer", "_lock")

    def __init__(self, buffer: _B, lock: threading.RLock) -> None:
        self._buffer = buffer
        self._lock = lock

    def __enter__(self) -> _B:
        self._lock.acquire()
        return self._buffer

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._lock.release()


def check_timeout(timeout: Any) -> float | None:
    """Check a blocking call's ``timeout``: the seconds to wait, or ``None`` for ever.

    ``None``: for ever; a finite number ``>= 0``: at most that many seconds (``0``: no wait);
    ``inf``, or at least :data:`threading.TIMEOUT_MAX` seconds: for ever, as ``None``. Checked on
    every call that takes a timeout, whether or not it ends up waiting.

    Raises:
        ConfigError: NaN, a negative number, one too large for a float, a bool or anything
            that is not a number (naming ``timeout`` and the value).

    Example:
        >>> from rlreplay.buffer import check_timeout
        >>> check_timeout(2), check_timeout(float("inf"))
        (2.0, None)
    """
    return timeout_seconds(timeout)


def flag(name: str, value: Any) -> bool:
    """A call's boolean option: a ``bool`` or NumPy bool, else :class:`ConfigError` naming it."""
    if value is True or value is False:
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    raise ConfigError(f"{name}: expected True or False, got {type(value).__name__} {shown(value)}")
