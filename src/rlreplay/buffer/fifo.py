"""Locking and FIFO use of a replay buffer: ``atomic``, blocking waits, ``dequeue``, ``gather_all``.

A part of :class:`rlreplay.ReplayBuffer` (see :mod:`rlreplay.buffer.host`). Every public method
takes the buffer's one re-entrant lock; :meth:`FifoMixin.atomic` holds it across several calls.
Blocking calls wait on the buffer's condition (``_cond``, on that lock) with
:class:`queue.Queue` timeout semantics; :meth:`close` wakes them and they raise
:class:`rlreplay.ReplayClosed`.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

import numpy as np

from rlreplay.assemble.sequences import gather_runs
from rlreplay.batch import Batch
from rlreplay.buffer.host import Array, BufferHost
from rlreplay.episodes.index import HEAD
from rlreplay.errors import ConfigError, EmptyBufferError, ReplayTimeout, ShapeError
from rlreplay.spec.arguments import shown, timeout_seconds
from rlreplay.spec.schema import positive_int

__all__ = ["Atomic", "FifoMixin", "check_timeout", "flag"]

_B = TypeVar("_B", bound=BufferHost)


class Atomic(Generic[_B]):
    """The context manager :meth:`FifoMixin.atomic` returns: holds the buffer's lock."""

    __slots__ = ("_buffer",)

    def __init__(self, buffer: _B) -> None:
        self._buffer = buffer

    def __enter__(self) -> _B:
        self._buffer._lock.acquire()
        return self._buffer

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._buffer._lock.release()


class FifoMixin(BufferHost):
    """``atomic``, blocking waits, ``dequeue``, ``gather_all`` of :class:`rlreplay.ReplayBuffer`."""

    def atomic(self) -> Atomic[Self]:
        """Hold the buffer's lock across several calls: no other thread reads or writes between.

        Every public method already takes the lock for its own duration; ``with buf.atomic():``
        makes a group of calls one step for every other thread (e.g. read
        :meth:`stored_range`, then fetch by ids that are then still stored). The lock is
        re-entrant: the calls inside, and nested ``atomic()`` blocks of the same thread, take
        it again without deadlock.

        A blocking call inside (``add(block=True)``, ``dequeue(block=True)``) releases the lock
        while it waits, as :meth:`threading.Condition.wait` does (so other threads can make the
        room or the data it waits for), and takes it back before returning: the block is
        atomic before and after such a wait, not across it. The context neither checks nor
        changes whether the buffer is open: calls inside raise :class:`rlreplay.ReplayClosed`
        as usual.

        Returns:
            A context manager whose ``with ... as b`` gives this buffer.

        Example:
            >>> import numpy as np, rlreplay as rr
            >>> buf = rr.ReplayBuffer(8, {"obs": rr.Field((), np.float32)})
            >>> with buf.atomic():
            ...     ids = buf.extend(obs=np.arange(3, dtype=np.float32), reward=np.zeros(3),
            ...                      terminated=[False, False, True], truncated=[False] * 3,
            ...                      next_obs=np.zeros(3, np.float32))
            ...     first, end = buf.stored_range()
            >>> first.tolist(), end.tolist(), ids.tolist()
            ([0], [3], [0, 1, 2])
        """
        return Atomic(self)

    def _wait(self, ready: Callable[[], bool], timeout: float | None, what: str) -> None:
        """Wait (releasing the lock) until ``ready()``; ``queue.Queue`` timeout semantics, with
        ``inf`` (or more than the platform can wait) for ever and NaN refused
        (:func:`check_timeout`)."""
        seconds = check_timeout(timeout)
        if ready():
            return
        self._waiting += 1
        try:
            done = self._cond.wait_for(lambda: self._closed or ready(), seconds)
        finally:
            self._waiting -= 1
        self._check_open()
        if not done:
            raise ReplayTimeout(f"{what}: not possible within timeout={timeout} s")

    def _wait_for_room(self, rows_env: Array, timeout: float | None) -> None:
        need = np.bincount(rows_env, minlength=self.num_envs)
        if need.max() > self._env_capacity:
            raise ShapeError(
                f"block: {int(need.max())} steps for one env can never fit its "
                f"{self._env_capacity} slots; split the call"
            )
        room = self._env_capacity - need

        def ready() -> bool:
            return bool((self._index.stored_per_env() <= room).all())

        self._wait(ready, timeout, "add(block=True)")

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
        with self._lock:
            self._check_open()
            envs = self._all_envs if env_ids is None else self._writer.check_env_ids(env_ids)

            def ready() -> bool:
                return bool((self._index.stored_per_env()[envs] >= n).all())

            if n > self._env_capacity:
                raise ShapeError(
                    f"n: {n} steps per env can never be stored (env_capacity "
                    f"{self._env_capacity}); dequeue at most that many"
                )
            if not block and not ready():
                have = self._index.stored_per_env()[envs].tolist()
                raise EmptyBufferError(f"dequeue: {n} steps per env requested, envs hold {have}")
            self._wait(ready, seconds, "dequeue(block=True)")
            data = self._runs_from_heads(envs, np.full(envs.shape[0], n), n)
            before = self._index.bounds() if self._tracks_sampleable else None
            self._index.dequeue(envs, n)
            if before is not None:
                empty = np.zeros(0, np.int64)
                self._notify_sampleable(before, empty, empty)
            self._limiter_resized()  # dequeue is no sample for the limiter; its size drops
            self._cond.notify_all()
            return Batch(data)

    def gather_all(self) -> Batch:
        """Every stored step, shaped ``(E, T, ...)`` (ALF ``gather_all``).

        ``T`` is the most steps any env holds; ``mask`` marks real steps where envs hold
        fewer. Per-step ``ids`` and ``env_ids`` are included.
        """
        with self._lock:
            self._check_open()
            stored = self._index.stored_per_env()
            return Batch(self._runs_from_heads(self._all_envs, stored, int(stored.max())))

    def _runs_from_heads(self, envs: Array, n_real: Array, length: int) -> dict[str, Array]:
        heads = self._index.env[envs, HEAD]
        data = gather_runs(self._cols, self._index, envs, heads, n_real, length)
        steps = heads[:, None] + np.arange(length)
        data["ids"] = self._index.ids(envs[:, None], steps)
        data["env_ids"] = np.repeat(envs[:, None], length, axis=1)
        return data


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
