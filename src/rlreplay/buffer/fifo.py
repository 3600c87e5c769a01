"""FIFO use of a replay buffer: ``dequeue`` (ALF's) and ``gather_all``.

:class:`Fifo` removes the oldest steps of envs, waiting for them with ``block`` on the buffer's
condition (:class:`~rlreplay.buffer.sync.Sync`), and reads whole runs from each env's oldest
stored step (:func:`rlreplay.assemble.sequences.gather_runs`). Removals move the sampleable set
(:class:`~rlreplay.buffer.events.SampleableEvents`) and the rate limiter's size
(:class:`~rlreplay.buffer.pacing.Pacing`); a removal is no sample for the limiter.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlreplay.assemble.sequences import gather_runs
from rlreplay.batch import Batch
from rlreplay.buffer.events import SampleableEvents
from rlreplay.buffer.pacing import Pacing
from rlreplay.buffer.sync import Sync, check_timeout, flag
from rlreplay.episodes.index import HEAD, EpisodeIndex
from rlreplay.errors import EmptyBufferError, ShapeError
from rlreplay.spec.schema import positive_int
from rlreplay.storage import Columns
from rlreplay.writing.writer import StepWriter

__all__ = ["Fifo"]

Array = np.ndarray[Any, Any]


class Fifo:
    """``dequeue`` and ``gather_all`` of one buffer (see the module docstring)."""

    def __init__(
        self,
        cols: Columns,
        index: EpisodeIndex,
        writer: StepWriter,
        events: SampleableEvents,
        sync: Sync,
        pacing: Pacing,
    ) -> None:
        self.cols = cols
        self.index = index
        self.writer = writer  # checks env ids
        self.events = events
        self.sync = sync
        self.pacing = pacing
        self.all_envs = np.arange(index.num_envs, dtype=np.int64)

    def dequeue(
        self,
        n: int,
        env_ids: Any = None,
        *,
        block: bool = False,
        timeout: float | None = None,
    ) -> Batch:
        """Remove and return the oldest ``n`` steps of each env (ALF ``dequeue``).

        Args:
            n: Steps per env.
            env_ids: Which envs (default: all).
            block: Wait until every named env holds ``n`` steps (``queue.Queue.get``).
            timeout: With ``block``, the most seconds to wait (``None`` or ``inf``: for ever;
                see :func:`check_timeout`). Checked with or without ``block``.

        Returns:
            Raw per-step fields shaped ``(len(env_ids), n, ...)``, with ``next_<obs>``,
            ``next_known``, per-step ``ids`` and ``env_ids``.

        Raises:
            ConfigError: ``n`` is not a positive int, ``timeout`` is not a valid timeout.
            ShapeError: ``n`` is more than an env can hold.
            EmptyBufferError: Not enough steps and ``block`` is False.
            ReplayTimeout: ``block`` and not enough steps within ``timeout``.
            ReplayClosed: The buffer is (or got) closed.
        """
        n = positive_int("n", n)
        seconds = check_timeout(timeout)
        block = flag("block", block)
        sync, index = self.sync, self.index
        with sync.lock:
            sync.check_open()
            envs = self.all_envs if env_ids is None else self.writer.check_env_ids(env_ids)

            def ready() -> bool:
                return bool((index.stored_per_env()[envs] >= n).all())

            if n > index.env_capacity:
                raise ShapeError(
                    f"n: {n} steps per env can never be stored (env_capacity "
                    f"{index.env_capacity}); dequeue at most that many"
                )
            if not block and not ready():
                have = index.stored_per_env()[envs].tolist()
                raise EmptyBufferError(f"dequeue: {n} steps per env requested, envs hold {have}")
            sync.wait(ready, seconds, "dequeue(block=True)")
            data = self.runs_from_heads(envs, np.full(envs.shape[0], n), n)
            before = self.events.before()
            index.dequeue(envs, n)
            self.events.after(before)
            self.pacing.resized()  # dequeue is no sample for the limiter; its size drops
            sync.cond.notify_all()
            return Batch(data)

    def gather_all(self) -> Batch:
        """Every stored step, shaped ``(E, T, ...)`` (ALF ``gather_all``).

        ``T`` is the most steps any env holds; ``mask`` marks real steps where envs hold
        fewer. Per-step ``ids`` and ``env_ids`` are included.
        """
        with self.sync.lock:
            self.sync.check_open()
            stored = self.index.stored_per_env()
            return Batch(self.runs_from_heads(self.all_envs, stored, int(stored.max())))

    def runs_from_heads(self, envs: Array, n_real: Array, length: int) -> dict[str, Array]:
        """Runs of ``length`` steps from each env's oldest stored step (``n_real`` real)."""
        index = self.index
        heads = index.env[envs, HEAD]
        data = gather_runs(self.cols, index, envs, heads, n_real, length)
        steps = heads[:, None] + np.arange(length)
        data["ids"] = index.ids(envs[:, None], steps)
        data["env_ids"] = np.repeat(envs[:, None], length, axis=1)
        return data
