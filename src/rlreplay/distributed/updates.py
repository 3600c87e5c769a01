"""A learner's ``update_priorities(..., wait=False)`` queue for a sharded service.

Updates are kept in the learner's process and sent as one call per shard (later updates of an
id win, as in the core) when the service is about to draw, or when many are queued. Ray runs
one caller's calls to an actor in order, so a draw sent after the queue sees every update in
it. Answers are collected without waiting; their errors surface at a later call.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rlreplay.distributed.split import pack_updates
from rlreplay.distributed.writer import call

__all__ = ["UpdateQueue"]

Array = np.ndarray[Any, Any]


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
        self._queued: dict[int, list[tuple[Array, Array]]] = {}
        self._queued_ids = 0
        self._sent: list[Any] = []
        self._lock = threading.Lock()

    def put(self, per_shard: Mapping[int, tuple[Array, Array]]) -> None:
        """Queue ``(local ids, priorities)`` per shard; send if ``max_ids`` are queued."""
        with self._lock:
            for k, update in per_shard.items():
                self._queued.setdefault(k, []).append(update)
                self._queued_ids += int(update[0].shape[0])
            full = self._queued_ids >= self._max_ids
        if full:
            self.send()

    def send(self) -> None:
        """Send the queue, one call per shard, in call order."""
        with self._lock:  # a later queue goes after an earlier one
            for k, parts in self._queued.items():
                ids = np.concatenate([i for i, _ in parts])
                p = np.concatenate([q for _, q in parts])
                packed = pack_updates(ids, p)
                self._sent.append(self._shards[k].update_priorities.remote(packed))
            self._queued, self._queued_ids = {}, 0

    def harvest(self, ray: Any, timeout: float | None) -> None:
        """Raise the errors of answered calls; wait for the oldest beyond ``max_unanswered``."""
        with self._lock:
            if not self._sent:
                return
            done, self._sent = ray.wait(self._sent, num_returns=len(self._sent), timeout=0)
            while len(self._sent) > self._max_unanswered:
                done.append(self._sent.pop(0))
        if done:
            call(ray, done, timeout, "update_priorities")
