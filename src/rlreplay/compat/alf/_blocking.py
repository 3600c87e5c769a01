"""Blocking calls that ALF's ``stop()`` ends and ``revive()`` re-enables (private to ALF's).

ALF's ``stop()`` does not close the buffer: it only makes blocked (and later) blocking
``add_batch`` / ``dequeue`` calls return ``None`` at once, until ``revive()``; non-blocking
calls go on working. The core has no such switch (its ``close`` is final), so a blocking call
here waits on the core in slices of at most :data:`POLL` seconds and looks at the flag between
them: room or data that arrives wakes the waiter at once (the core's condition), a ``stop()``
within :data:`POLL` seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from rlreplay import ReplayBuffer as CoreBuffer
from rlreplay import ReplayTimeout
from rlreplay.buffer import check_timeout

__all__ = ["POLL", "deadline_of", "wait_for_empty", "wait_unless_stopped"]

POLL = 0.05  # seconds between two looks at the stop flag while blocked

T = TypeVar("T")


def wait_unless_stopped(
    call: Callable[[float], T], stopped: Callable[[], bool], timeout: float | None, what: str
) -> T | None:
    """``call(slice_seconds)`` (a blocking core call) until it succeeds; ``None`` if stopped.

    Args:
        call: Runs the blocking core call with the given timeout; raises
            :class:`rlreplay.ReplayTimeout` when it runs out.
        stopped: Whether the buffer is stopped (checked before every slice).
        timeout: The caller's timeout in seconds (``None`` or ``inf``: for ever).
        what: The call's name, for the timeout message.

    Raises:
        rlreplay.ReplayTimeout: Not done within ``timeout``.
        rlreplay.ConfigError: A bad ``timeout``.
    """
    seconds = check_timeout(timeout)  # None: for ever (None or inf); NaN, negative: refused
    deadline = None if seconds is None else time.monotonic() + seconds
    while not stopped():
        left = POLL if deadline is None else min(POLL, max(0.0, deadline - time.monotonic()))
        try:
            return call(left)
        except ReplayTimeout:
            if deadline is not None and time.monotonic() >= deadline:
                raise ReplayTimeout(f"{what}: not possible within timeout={timeout} s") from None
    return None


def deadline_of(timeout: float | None) -> float | None:
    """The ``time.monotonic()`` at which ``timeout`` seconds from now run out (checked)."""
    seconds = check_timeout(timeout)
    return None if seconds is None else time.monotonic() + seconds


def wait_for_empty(
    core: CoreBuffer,
    envs: np.ndarray[Any, Any],
    stopped: Callable[[], bool],
    deadline: float | None,
) -> bool:
    """Wait until every env of ``envs`` stores nothing (a blocking add with ``max_length=1``).

    The core keeps two steps per env, so its own wait for room would not block at ALF's one;
    this polls the stored range every millisecond, without holding the core's lock. The
    caller re-checks under the lock.

    Returns:
        True when the envs are empty, False when the buffer was stopped meanwhile.

    Raises:
        rlreplay.ReplayTimeout: Not empty by ``deadline``.
    """
    while not stopped():
        first, end = core.stored_range()
        if (end[envs] == first[envs]).all():
            return True
        if deadline is not None and time.monotonic() >= deadline:
            raise ReplayTimeout("add_batch: no free slot within the timeout (max_length=1)")
        time.sleep(0.001)
    return False
