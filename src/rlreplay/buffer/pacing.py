"""Pacing writes against samples: the buffer's :class:`rlreplay.RateLimiter`, when it has one.

The limiter (:mod:`rlreplay.limits`) decides when an insert or a sample may proceed; this part
connects it to one buffer: checks it at construction, waits for its grants without the buffer's
lock (:meth:`Pacing.commit`), keeps its size equal to the buffer's sampleable count, and gives
its counters to the buffer's state. A buffer without a limiter has a :class:`Pacing` whose
``limiter`` is ``None``; every method is then a no-op.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from rlreplay.buffer.sync import Sync, check_timeout
from rlreplay.errors import ConfigError
from rlreplay.limits import RateLimiter
from rlreplay.writing.writer import Prepared

__all__ = ["Pacing"]

Array = np.ndarray[Any, Any]


class Pacing:
    """The rate limiter of one buffer (or none)."""

    __slots__ = ("limiter", "size", "sync")

    def __init__(self, limiter: RateLimiter | None, sync: Sync, size: Callable[[], int]) -> None:
        """Pace a buffer's writes and samples with ``limiter`` (checked by :meth:`check`).

        Args:
            limiter: The constructor's ``rate_limiter``.
            sync: The buffer's lock.
            size: The buffer's sampleable count (called under the lock).
        """
        self.limiter = limiter
        self.sync = sync
        self.size = size

    @staticmethod
    def check(limiter: Any, *, storage: str, num_envs: int) -> None:
        """Refuse a ``rate_limiter`` a buffer of ``num_envs`` envs on ``storage`` cannot use
        (before anything is allocated)."""
        if limiter is None:
            return
        if not isinstance(limiter, RateLimiter):
            raise ConfigError(
                f"rate_limiter: expected None or an rr.RateLimiter (rr.MinSize, "
                f"rr.SampleToInsertRatio), got {limiter!r}"
            )
        if storage == "shared":
            raise ConfigError(
                "rate_limiter: writer processes of storage='shared' cannot wait on a "
                "limiter in this process; rate-limit many writers with "
                "rlreplay.distributed.ReplayService(rate_limiter=...)"
            )
        spi, width = limiter.samples_per_insert, limiter.max_diff - limiter.min_diff
        if num_envs * spi > width:
            # Past the free stage samples keep diff >= min_diff, so a step of every env
            # (num_envs inserts at once) could never again fit under max_diff: a hang.
            raise ConfigError(
                f"rate_limiter: a step of all {num_envs} envs is {num_envs} inserts, "
                f"which need max_diff - min_diff >= num_envs * samples_per_insert = "
                f"{num_envs * spi:g}; {limiter!r} has {width:g} (widen error_buffer)"
            )

    def counts(self) -> dict[str, Any]:
        """The limiter's parameters and counters, for the state (pending inserts: not in)."""
        assert self.limiter is not None
        state = self.limiter.state_dict()
        return {**self.limiter.to_json(), "inserts": state["inserts"], "samples": state["samples"]}

    def restore(self, counts: Any) -> None:
        """Take back :meth:`counts` if the limiter has the saved parameters (a load may give
        another limiter; it starts afresh). The size follows in :meth:`resized` once the
        arrays are in."""
        limiter = self.limiter
        if limiter is None or counts is None:
            return
        if {k: v for k, v in counts.items() if k not in ("inserts", "samples")} != (
            limiter.to_json()
        ):
            return
        inserts, samples = int(counts["inserts"]), int(counts["samples"])
        if min(inserts, samples) < 0:
            raise ConfigError(f"rate_limiter: counters must be >= 0, got {dict(counts)!r}")
        state = {"config": limiter.config(), "inserts": inserts, "samples": samples, "size": 0}
        limiter.load_state_dict(state)

    def resized(self) -> None:
        """Tell the limiter the sampleable count after a removal (``clear``, ``dequeue``)."""
        if self.limiter is not None:
            self.limiter.set_size(self.size())

    def commit(
        self,
        prepare: Callable[[], Prepared],
        store: Callable[[Prepared, bool, float | None], Array],
        block: bool,
        timeout: float | None,
    ) -> Array:
        """``store`` a validated call paced by the limiter: validate, wait for the grant, store.

        The grant is awaited without the buffer's lock (a sampler needs the lock to pay for
        the inserts a writer waits on); the call is validated first, so a rejected call is
        never granted, and a grant whose store raises is handed back. ``timeout`` bounds the
        limiter's wait and the wait for room together.
        """
        limiter, sync = self.limiter, self.sync
        assert limiter is not None  # only called with a limiter
        if timeout is not None:
            check_timeout(timeout)
        with sync.lock:
            sync.check_open()
            prep = prepare()
        n = int(prep.rows_env.shape[0])
        if n == 0:  # nothing to insert: nothing to ask for
            with sync.lock:
                sync.check_open()
                return store(prep, block, timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        limiter.await_insert(n, timeout)
        committed = False
        try:
            with sync.lock:
                sync.check_open()
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                ids = store(prep, block, left)
                # Under the lock: commits reach the limiter in the order of the stores.
                limiter.commit_insert(n, self.size())
                committed = True
                return ids
        finally:
            if not committed:
                limiter.cancel_insert(n)
