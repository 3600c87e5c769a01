"""A learner's ``update_priorities(..., wait=False)`` queue for a sharded service.

Updates are kept in the learner's process and go to each shard (later updates of an id win,
as in the core) inside the service's next draw call to it (:meth:`UpdateQueue.dispatch`: no
call of their own; the shard applies them, then draws), or as one call per shard when many are
queued or before a call that is not a draw. Ray runs one caller's calls to an actor in order,
and the queue is taken and the calls submitted under one lock, so a draw sees every update
queued before it and a shard applies the updates in the order they were made. Errors come back
without waiting (an answer's, or the one a draw returns for its updates) and surface at a
later call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from rlreplay.distributed.split import pack_updates
from rlreplay.distributed.writer import call

__all__ = ["UpdateQueue"]

Array = np.ndarray[Any, Any]
T = TypeVar("T")


class UpdateQueue:
    """Queued priority updates per shard, and the refs of sent ones not yet answered.

    Args:
        shards: The shard actors.
        max_ids: Queued ids that trigger a send.
        max_unanswered: Sent calls not yet answered before a harvest waits for the oldest.
    """

    def __init__(
        self, shards: Sequence[Any], *, max_ids: int = 1 << 16, max_unanswered: int = 64
    ) -> None:
        self._shards = list(shards)
        self._max_ids = max_ids
        self._max_unanswered = max_unanswered
        # (shard, local id, priority) arrays in call order; split per shard when taken (one
        # split per draw, not one per update call).
        self._queued: list[tuple[Array, Array, Array]] = []
        self._queued_ids = 0
        self._sent: list[Any] = []
        self._errors: list[BaseException] = []  # of updates that rode on draws
        self._lock = threading.Lock()

    def put(self, shard: Array, local: Array, priorities: Array) -> None:
        """Queue updates (each id's shard, local id and priority, flat and checked); send if
        ``max_ids`` are queued."""
        with self._lock:
            self._queued.append((shard, local, priorities))
            self._queued_ids += int(shard.shape[0])
            full = self._queued_ids >= self._max_ids
        if full:
            self.send()

    def _take(self) -> dict[int, bytes]:
        """Empty the queue: per shard, its updates packed in order (caller holds the lock)."""
        if not self._queued:
            return {}
        shard, local, p = (np.concatenate(c) for c in zip(*self._queued, strict=True))
        self._queued, self._queued_ids = [], 0
        if len(self._shards) == 1:
            return {0: pack_updates(local, p)} if shard.shape[0] else {}
        # A stable sort keeps each shard's updates in call order (later ones win).
        order = np.argsort(shard, kind="stable")
        ends = np.cumsum(np.bincount(shard, minlength=len(self._shards)))
        packed = {}
        for k in range(len(self._shards)):
            rows = order[(ends[k - 1] if k else 0) : ends[k]]
            if rows.shape[0]:
                packed[k] = pack_updates(local[rows], p[rows])
        return packed

    def send(self) -> None:
        """Send the queue, one call per shard, in call order."""
        with self._lock:  # a later queue goes after an earlier one
            for k, packed in self._take().items():
                self._sent.append(self._shards[k].update_priorities.remote(packed))

    def dispatch(self, submit: Callable[[Mapping[int, bytes]], T]) -> T:
        """``submit(packed updates per shard)``, with the queue emptied into it: ``submit``
        sends each shard's draw call with its updates (the shard applies them first). Taking
        the queue and submitting happen under the lock, so no later updates reach a shard
        before these."""
        with self._lock:
            return submit(self._take())

    def fail(self, error: BaseException) -> None:
        """Keep the error a shard returned for updates sent with a draw (raised by the next
        :meth:`harvest`)."""
        with self._lock:
            self._errors.append(error)

    def harvest(self, ray: Any, timeout: float | None) -> None:
        """Raise the errors of answered calls and of updates that rode on draws; wait for the
        oldest unanswered call beyond ``max_unanswered``."""
        with self._lock:
            if self._errors:
                error, self._errors = self._errors[0], []
                raise error
            if not self._sent:
                return
            done, self._sent = ray.wait(self._sent, num_returns=len(self._sent), timeout=0)
            while len(self._sent) > self._max_unanswered:
                done.append(self._sent.pop(0))
        if done:
            call(ray, done, timeout, "update_priorities")
