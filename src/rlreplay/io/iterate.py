"""A prefetching iterator: batches are drawn on a background thread while the learner works.

:class:`Prefetcher` calls a sampling function on one daemon thread and keeps up to
``prefetch`` results in a bounded queue, so the next batch is assembled (and, with
``as_="torch"`` to a GPU, already on its way there) while the consumer runs its learner step.
Every wait has a timeout: the producer checks for :meth:`Prefetcher.close` (and for its
source being closed, ``closed``) at least every ``_POLL`` seconds, the consumer waits at most
``timeout`` seconds for a batch, and ``close`` waits at most ``join_timeout`` seconds for the
thread.

Ordering and priorities: a batch is drawn up to ``prefetch + 1`` batches before the consumer
sees it, so priority updates made meanwhile do not affect it (as with any prefetching
learner; ``prefetch=1`` keeps the lag smallest).
"""

from __future__ import annotations

import contextlib
import queue
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from rlreplay.errors import ReplayClosed, ReplayTimeout
from rlreplay.limits import waits_end_when
from rlreplay.spec.arguments import timeout_seconds
from rlreplay.spec.schema import positive_int

__all__ = ["Prefetcher"]

T = TypeVar("T")
_POLL = 0.05  # seconds between the producer's checks for close() while the queue is full


class _Failure:
    """A producer's exception, handed to the consumer through the queue."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


_DONE = object()  # the producer stopped (closed or failed): nothing more will come


def _produce(
    fn: Callable[[], Any],
    out: queue.Queue[Any],
    stop: threading.Event,
    closed: Callable[[], bool] | None = None,
) -> None:  # runs on the background thread

    def ended() -> bool:  # the iterator or its source (e.g. the buffer) was closed
        return stop.is_set() or (closed is not None and closed())

    while not ended():
        try:
            with waits_end_when(ended):  # a rate limiter's wait in fn ends with the iterator
                item: Any = fn()
        except BaseException as exc:  # handed over, re-raised in the consumer
            item = _Failure(exc)
        handed = False
        while not handed and not ended():
            try:
                out.put(item, timeout=_POLL)
                handed = True
            except queue.Full:
                continue
        if handed and isinstance(item, _Failure):
            return  # the consumer ends the iteration when it takes the failure
    # Closed: tell a waiting consumer that nothing more comes (making room for the marker). A
    # closed source is the ReplayClosed any read of it raises; a closed iterator just stops.
    closing = ReplayClosed("iterate: the buffer (the source of the batches) was closed")
    last: Any = _DONE if stop.is_set() else _Failure(closing)
    while True:
        try:
            out.put_nowait(last)
            return
        except queue.Full:
            with contextlib.suppress(queue.Empty):
                out.get_nowait()


class Prefetcher(Generic[T], Iterator[T]):
    """Iterate over ``fn()`` results produced ahead on a background thread.

    Invariants: at most ``prefetch`` results wait in the queue (plus one being made); after
    :meth:`close` the thread ends within ``_POLL`` seconds of its current ``fn()`` call
    returning, and iteration stops. An exception raised by ``fn`` is raised by the ``next``
    call that would have returned its result; iteration ends after it.

    Args:
        fn: Produces one item per call (e.g. ``lambda: buf.sample(256)``).
        prefetch: Items made ahead (``>= 1``).
        timeout: Most seconds one ``next`` waits for an item (``None``: for ever, checking
            every ``_POLL`` seconds that the producer is alive).
        join_timeout: Most seconds :meth:`close` waits for the thread to end.
        name: The thread's name.
        closed: Whether the source was closed (e.g. the buffer's ``close()``): the producer
            checks it at least every ``_POLL`` seconds, also while the queue is full, ends, and
            ``next`` raises :class:`rlreplay.ReplayClosed` after the batches already made.

    Raises (from ``next``):
        ReplayTimeout: No item within ``timeout``.
        ReplayClosed: The source was closed (``closed``), or ``fn`` raised it.
        StopIteration: After :meth:`close`, or after ``fn``'s error was raised.

    Example:
        >>> import itertools
        >>> counter = itertools.count()
        >>> with Prefetcher(lambda: next(counter), prefetch=2) as it:
        ...     [next(it) for _ in range(3)]
        [0, 1, 2]
    """

    def __init__(
        self,
        fn: Callable[[], T],
        *,
        prefetch: int = 2,
        timeout: float | None = None,
        join_timeout: float = 10.0,
        name: str = "rlreplay-prefetch",
        closed: Callable[[], bool] | None = None,
    ) -> None:
        self.prefetch = positive_int("prefetch", prefetch)
        self.timeout = timeout_seconds(timeout)  # NaN refused, inf: for ever (None)
        self.join_timeout = timeout_seconds(join_timeout, "join_timeout")
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=self.prefetch)
        self._stop = threading.Event()
        self._finished = False
        self._thread = threading.Thread(
            target=_produce, args=(fn, self._queue, self._stop, closed), name=name, daemon=True
        )
        # An iterator dropped without close() still stops its thread.
        self._finalizer = weakref.finalize(self, self._stop.set)
        self._thread.start()

    def __iter__(self) -> Prefetcher[T]:
        return self

    def __next__(self) -> T:
        if self._finished:
            raise StopIteration
        waited = 0.0
        while True:
            try:
                item = self._queue.get(timeout=_POLL)
                break
            except queue.Empty:
                waited += _POLL
                if self._stop.is_set() or (not self._thread.is_alive() and self._queue.empty()):
                    self._finished = True
                    raise StopIteration from None
                if self.timeout is not None and waited >= self.timeout:
                    raise ReplayTimeout(
                        f"iterate: no batch within {self.timeout} s (is the buffer empty or "
                        "the sampling function blocked?)"
                    ) from None
        if item is _DONE:
            self._finished = True
            raise StopIteration
        if isinstance(item, _Failure):
            self._finished = True
            self.close()
            raise item.error
        result: T = item
        return result

    def close(self) -> None:
        """Stop the producer, drop prefetched items and wait (bounded) for the thread."""
        self._finished = True
        self._stop.set()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        if self._thread is not threading.current_thread():
            self._thread.join(self.join_timeout)

    @property
    def alive(self) -> bool:
        """Whether the background thread still runs."""
        return self._thread.is_alive()

    def __enter__(self) -> Prefetcher[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
