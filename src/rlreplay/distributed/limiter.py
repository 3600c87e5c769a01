"""The service's rate limiter, hosted in a Ray actor that writers and learners share.

The actor runs its calls on threads (a threaded actor), so a waiting call blocks only itself:
:class:`rlreplay.RateLimiter` waits on its own condition with the caller's timeout. Shards
report their sampleable counts after every write with a per-shard version, so a late report
never overrides a newer one; the limiter's size is the sum over shards.
"""

from __future__ import annotations

import threading
from typing import Any

from rlreplay import RateLimiter

__all__ = ["LimiterHost"]


class LimiterHost:
    """A :class:`rlreplay.RateLimiter` with per-shard size reports (run as a Ray actor)."""

    def __init__(self, limiter: RateLimiter, num_shards: int) -> None:
        self.limiter = limiter.clone()  # fresh counters: the service's own
        self._sizes = [(0, 0)] * num_shards  # (version, sampleable count) per shard
        self._lock = threading.Lock()  # calls run on several threads

    def await_insert(self, n: int, timeout: float | None) -> None:
        """:meth:`RateLimiter.await_insert` (raises ReplayTimeout / ReplayClosed)."""
        self.limiter.await_insert(n, timeout)

    def commit_insert(self, n: int, shard: int, version: int, size: int) -> None:
        """``n`` inserts landed in ``shard``, which reported ``size`` at ``version``."""
        with self._lock:
            if version > self._sizes[shard][0]:
                self._sizes[shard] = (version, size)
            self.limiter.commit_insert(n, sum(s for _, s in self._sizes))

    def report_size(self, shard: int, version: int, size: int) -> None:
        """``shard`` holds ``size`` sampleable steps at ``version`` (no insert: a restart or a
        load changed it)."""
        with self._lock:
            if version > self._sizes[shard][0]:
                self._sizes[shard] = (version, size)
            self.limiter.set_size(sum(s for _, s in self._sizes))

    def state_dict(self) -> dict[str, Any]:
        """The limiter's parameters and counters (for a service checkpoint)."""
        return self.limiter.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore counters of :meth:`state_dict`, keeping the size the shards reported."""
        with self._lock:
            size = sum(s for _, s in self._sizes)
            self.limiter.load_state_dict(dict(state, size=size))

    def cancel_insert(self, n: int) -> None:
        """:meth:`RateLimiter.cancel_insert`."""
        self.limiter.cancel_insert(n)

    def await_sample(self, n: int, timeout: float | None) -> None:
        """:meth:`RateLimiter.await_sample`."""
        self.limiter.await_sample(n, timeout)

    def cancel_sample(self, n: int) -> None:
        """:meth:`RateLimiter.cancel_sample`: a granted batch that never reached its caller."""
        self.limiter.cancel_sample(n)

    def stats(self) -> dict[str, Any]:
        """The limiter's counters."""
        return dict(self.limiter.stats.to_dict())

    def close(self) -> None:
        """Wake every waiter with ReplayClosed."""
        self.limiter.close()
