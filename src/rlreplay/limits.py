"""Rate limiters: when an insert or a sample may proceed (Reverb's ``RateLimiter``).

A rate limiter keeps three counters, as Reverb's does: ``inserts`` (items inserted so far),
``samples`` (items sampled so far) and ``size`` (items the table holds now: inserts minus
the items deleted or overwritten since). With ``spi = samples_per_insert`` it defines::

    diff = inserts * spi - samples

    can_sample(n):  size >= min_size_to_sample  and  diff - n >= min_diff
    can_insert(n):  size + n <= min_size_to_sample  or  diff + n * spi <= max_diff

These are the predicates of Reverb's ``RateLimiter::CanSample`` / ``CanInsert`` (its C++
``rate_limiter.cc``): until the table holds ``min_size_to_sample`` items inserts are free and
samples wait; after that a call that would move ``diff`` out of ``[min_diff, max_diff]``
waits until calls on the other side bring it back. :class:`MinSize` and
:class:`SampleToInsertRatio` are Reverb's two presets, with its argument checks.

Waiting calls (:meth:`RateLimiter.await_insert`, :meth:`RateLimiter.await_sample`) take a
``timeout`` (``None`` or ``inf``: for ever; NaN or a negative number: :class:`rlreplay.ConfigError`;
see :mod:`rlreplay.spec.arguments`) and raise :class:`rlreplay.ReplayTimeout` when it runs out, and
:class:`rlreplay.ReplayClosed` when :meth:`RateLimiter.close` wakes them. A request for ``n``
items is granted whole (Reverb's ``CanSample(n)`` / ``CanInsert(n)``): a batch of ``B``
samples counts ``B`` samples, a vector step of ``E`` envs ``E`` inserts. A limiter whose band
``max_diff - min_diff`` is narrower than the largest sample batch plus ``spi`` times the
largest insert can deadlock a sampler against a writer: :meth:`RateLimiter.await_sample`
refuses a batch that no sequence of single inserts could ever let through.

Inserts are granted in two steps so that the owner can grant, then store, then report: an
insert counts towards ``inserts`` (and so towards the ratio seen by other writers) as soon as
it is granted, but towards ``size`` (what samples wait for) only once the owner commits it
with the table's new size (:meth:`RateLimiter.commit_insert`), or is handed back if the store
failed (:meth:`RateLimiter.cancel_insert`); a granted sample whose draw failed is handed back
too (:meth:`RateLimiter.cancel_sample`).

Owners: a core buffer (``rr.ReplayBuffer(..., rate_limiter=lim)``: its ``add``/``extend``
insert one item per env step, ``sample``/``sample_sequences`` sample one per row, and the
limiter's ``size`` is the buffer's sampleable count) or the service
(:class:`rlreplay.distributed.ReplayService`, which keeps its own copy in an actor). A limiter
counts for one owner (:meth:`RateLimiter.bind`).
"""

from __future__ import annotations

import logging
import math
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from rlreplay.errors import ConfigError, ReplayClosed, ReplayTimeout
from rlreplay.spec.arguments import shown, timeout_seconds

__all__ = ["LimiterStats", "MinSize", "RateLimiter", "SampleToInsertRatio", "waits_end_when"]

_log = logging.getLogger(__name__)
_SLICE = 0.05  # seconds between a wait's checks of its thread's waits_end_when condition
_local = threading.local()  # .stopped: this thread's waits_end_when condition (or None)


@contextmanager
def waits_end_when(stopped: Callable[[], bool]) -> Iterator[None]:
    """Within the block, a limiter wait of this thread also ends once ``stopped()`` is true.

    For a thread that waits for someone else, such as :meth:`rlreplay.ReplayBuffer.iterate`'s
    producer: closing the iterator makes ``stopped()`` true, and the producer's wait in the
    limiter raises :class:`rlreplay.ReplayClosed` within ``_SLICE`` seconds instead of waiting
    until the limiter allows a draw nobody will take (nothing is counted for it). Waits check
    ``stopped()`` every ``_SLICE`` seconds; outside such a block they wait in one piece.
    """
    previous = getattr(_local, "stopped", None)
    _local.stopped = stopped
    try:
        yield
    finally:
        _local.stopped = previous


@dataclass(frozen=True)
class LimiterStats:
    """A snapshot of a limiter's counters.

    Attributes:
        inserts: Items whose insert was granted (committed or still being stored).
        samples: Items sampled.
        size: Items the owner reported holding at its last commit.
        pending_inserts: Granted inserts not yet committed or cancelled.
        insert_waits: Insert requests that had to wait.
        sample_waits: Sample requests that had to wait.
        insert_blocked_s: Seconds insert requests spent waiting, summed.
        sample_blocked_s: Seconds sample requests spent waiting, summed.
        insert_timeouts: Insert requests that ran out of time.
        sample_timeouts: Sample requests that ran out of time.
    """

    inserts: int
    samples: int
    size: int
    pending_inserts: int
    insert_waits: int
    sample_waits: int
    insert_blocked_s: float
    sample_blocked_s: float
    insert_timeouts: int
    sample_timeouts: int

    def to_dict(self) -> dict[str, float]:
        """The counters as a plain dict."""
        return asdict(self)


class RateLimiter:
    """Reverb's rate limiter: blocks inserts and samples that would break a sample/insert ratio.

    Invariant (outside the free-insert stage ``size + n <= min_size_to_sample``): every granted
    insert leaves ``inserts * spi - samples <= max_diff`` and every granted sample leaves it
    ``>= min_diff``. All methods are thread-safe; waiting releases the limiter's lock.

    Args:
        samples_per_insert: ``spi > 0``: how many samples each insert pays for.
        min_size_to_sample: Samples wait until the owner holds at least this many items.
        min_diff: Lower bound of ``inserts * spi - samples`` that samples respect.
        max_diff: Upper bound of ``inserts * spi - samples`` that inserts respect.

    Example:
        >>> import rlreplay as rr
        >>> lim = rr.SampleToInsertRatio(samples_per_insert=2.0, min_size_to_sample=1,
        ...                              error_buffer=4.0)
        >>> lim.can_sample(1), lim.can_insert(1)
        (False, True)
    """

    def __init__(
        self,
        samples_per_insert: float,
        min_size_to_sample: int,
        min_diff: float,
        max_diff: float,
    ) -> None:
        spi = _number("samples_per_insert", samples_per_insert)
        if not spi > 0.0:
            raise ConfigError(f"samples_per_insert: expected a number > 0, got {spi}")
        _int_at_least("min_size_to_sample", min_size_to_sample, 0)
        lo, hi = _number("min_diff", min_diff), _number("max_diff", max_diff)
        if lo > hi:
            raise ConfigError(f"min_diff/max_diff: expected min_diff <= max_diff, got {lo} > {hi}")
        self.samples_per_insert = spi
        self.min_size_to_sample = min_size_to_sample
        self.min_diff = lo
        self.max_diff = hi
        self._cond = threading.Condition(threading.Lock())
        self._inserts = 0
        self._pending = 0
        self._samples = 0
        self._size = 0
        self._closed = False
        self._waits = [0, 0]  # insert, sample
        self._blocked = [0.0, 0.0]
        self._timeouts = [0, 0]
        self._owner: weakref.ref[object] | None = None  # the buffer it counts for (bind)

    # ------------------------------------------------------------------ Reverb's predicates
    def can_insert(self, n: int = 1) -> bool:
        """Whether ``n`` inserts may proceed now (Reverb's ``CanInsert(n)``)."""
        with self._cond:
            return self._can_insert(_count("n", n))

    def can_sample(self, n: int = 1) -> bool:
        """Whether ``n`` samples may proceed now (Reverb's ``CanSample(n)``)."""
        with self._cond:
            return self._can_sample(_count("n", n))

    def _can_insert(self, n: int) -> bool:
        # Until the table reaches min_size_to_sample inserts are free (counting the ones
        # granted but not yet stored, which will add to the size).
        if self._size + self._pending + n <= self.min_size_to_sample:
            return True
        return (self._inserts + n) * self.samples_per_insert - self._samples <= self.max_diff

    def _can_sample(self, n: int) -> bool:
        if self._size < self.min_size_to_sample:
            return False
        # Only stored inserts pay for samples: a sample never runs ahead of the data it reads.
        committed = self._inserts - self._pending
        return committed * self.samples_per_insert - self._samples - n >= self.min_diff

    # ------------------------------------------------------------------ waiting
    def await_insert(self, n: int = 1, timeout: float | None = None) -> None:
        """Wait until ``n`` inserts may proceed, then grant them (they count as inserts).

        The caller then stores the items and calls :meth:`commit_insert` (or
        :meth:`cancel_insert` if storing failed).

        Args:
            n: Items to insert (``>= 1``).
            timeout: Most seconds to wait; ``None`` (or ``inf``) waits for ever, ``0`` does not
                wait.

        Raises:
            ConfigError: ``n`` is not an int ``>= 1``, or ``timeout`` is NaN, negative or not
                a number.
            ReplayTimeout: Not granted within ``timeout``.
            ReplayClosed: The limiter is (or got) closed.
        """
        n = _count("n", n)
        self._await(0, lambda: self._can_insert(n), timeout, f"insert of {n}")
        self._inserts += n
        self._pending += n
        self._cond.release()

    def commit_insert(self, n: int, size: int) -> None:
        """``n`` granted inserts were stored; the owner now holds ``size`` items.

        ``size`` is what samples wait for (``min_size_to_sample``): the owner's count after
        the store, which accounts for items overwritten or deleted by it.
        """
        n = _count("n", n)
        size = _counter("size", size)
        with self._cond:
            if n > self._pending:
                raise ConfigError(f"commit_insert: {n} inserts committed, {self._pending} pending")
            self._pending -= n
            self._size = size
            self._cond.notify_all()

    def cancel_insert(self, n: int) -> None:
        """Hand back ``n`` granted inserts that were not stored (the store raised)."""
        n = _count("n", n)
        with self._cond:
            if n > self._pending:
                raise ConfigError(f"cancel_insert: {n} inserts cancelled, {self._pending} pending")
            self._pending -= n
            self._inserts -= n
            self._cond.notify_all()

    def set_size(self, size: int) -> None:
        """The owner's size changed without an insert (items deleted or cleared)."""
        size = _counter("size", size)
        with self._cond:
            self._size = size
            self._cond.notify_all()

    def await_sample(self, n: int = 1, timeout: float | None = None) -> None:
        """Wait until ``n`` samples may proceed, then count them as sampled.

        Args:
            n: Items to sample (``>= 1``): a batch counts its size.
            timeout: Most seconds to wait; ``None`` (or ``inf``) waits for ever, ``0`` does not
                wait.

        Raises:
            ConfigError: ``n`` is not an int ``>= 1``, ``timeout`` is NaN, negative or not a
                number, or ``n`` exceeds ``max_diff - min_diff - samples_per_insert``: inserts
                stop before ``diff`` can reach ``min_diff + n`` (once the table is past its free
                stage), so the batch could be granted at best by luck; sample smaller batches
                or widen the limiter's band.
            ReplayTimeout: Not granted within ``timeout``.
            ReplayClosed: The limiter is (or got) closed.
        """
        n = _count("n", n)
        width = self.max_diff - self.min_diff - self.samples_per_insert
        if n > width:
            raise ConfigError(
                f"sample: a batch of {n} needs max_diff - min_diff - samples_per_insert >= {n}, "
                f"this limiter has {width:g} ({self!r}); sample at most {math.floor(width)} at "
                "once or widen error_buffer"
            )
        self._await(1, lambda: self._can_sample(n), timeout, f"sample of {n}")
        self._samples += n
        self._cond.notify_all()  # fewer samples owed: blocked inserts may go
        self._cond.release()

    def cancel_sample(self, n: int) -> None:
        """Hand back ``n`` granted samples that were not drawn (the draw raised).

        For an owner that grants, then draws: a sample that could not be drawn (nothing
        sampleable, a closed buffer) pays for nothing, so it does not count.
        """
        n = _count("n", n)
        with self._cond:
            if n > self._samples:
                raise ConfigError(f"cancel_sample: {n} samples cancelled, {self._samples} counted")
            self._samples -= n
            self._cond.notify_all()  # more samples owed again: blocked samples may go

    def _await(
        self, kind: int, ready: Callable[[], bool], timeout: float | None, what: str
    ) -> None:
        """Return holding the lock once ``ready()``; raise (lock released) otherwise."""
        seconds = timeout_seconds(timeout)  # NaN/negative refused; inf: for ever (None)
        self._cond.acquire()
        try:
            if self._closed:
                raise ReplayClosed(f"{type(self).__name__} is closed")
            if ready():
                return
            self._waits[kind] += 1
            start = time.monotonic()
            stopped: Callable[[], bool] | None = getattr(_local, "stopped", None)
            if stopped is None:
                done = self._cond.wait_for(lambda: self._closed or ready(), seconds)
            else:
                done = self._wait_in_slices(ready, seconds, stopped)
            self._blocked[kind] += time.monotonic() - start
            if self._closed:
                raise ReplayClosed(f"{type(self).__name__} was closed while a {what} waited")
            if not done and stopped is not None and stopped():
                raise ReplayClosed(
                    f"{type(self).__name__}: the caller of a waiting {what} stopped (e.g. its "
                    "iterate() was closed)"
                )
            if not done:
                self._timeouts[kind] += 1
                raise ReplayTimeout(
                    f"rate limiter: {what} not allowed within timeout={timeout} s "
                    f"({self._describe()})"
                )
        except BaseException:
            self._cond.release()
            raise

    def _wait_in_slices(
        self, ready: Callable[[], bool], timeout: float | None, stopped: Callable[[], bool]
    ) -> bool:
        """``Condition.wait_for`` (lock held) that also gives up once ``stopped()``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = _SLICE if deadline is None else min(_SLICE, deadline - time.monotonic())
            if self._cond.wait_for(lambda: self._closed or ready(), max(left, 0.0)):
                return True
            if stopped() or (deadline is not None and time.monotonic() >= deadline):
                return False

    def close(self) -> None:
        """Wake every waiting call with :class:`rlreplay.ReplayClosed`; later waits raise too."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    # ------------------------------------------------------------------ introspection
    @property
    def stats(self) -> LimiterStats:
        """The counters now (inserts, samples, size, waits and time blocked)."""
        with self._cond:
            return LimiterStats(
                inserts=self._inserts,
                samples=self._samples,
                size=self._size,
                pending_inserts=self._pending,
                insert_waits=self._waits[0],
                sample_waits=self._waits[1],
                insert_blocked_s=self._blocked[0],
                sample_blocked_s=self._blocked[1],
                insert_timeouts=self._timeouts[0],
                sample_timeouts=self._timeouts[1],
            )

    def _describe(self) -> str:
        diff = self._inserts * self.samples_per_insert - self._samples
        return (
            f"inserts={self._inserts}, samples={self._samples}, size={self._size}, "
            f"diff={diff:g}, allowed [{self.min_diff:g}, {self.max_diff:g}], "
            f"min_size_to_sample={self.min_size_to_sample}"
        )

    def config(self) -> dict[str, Any]:
        """The constructor arguments of the underlying :class:`RateLimiter`."""
        return {
            "samples_per_insert": self.samples_per_insert,
            "min_size_to_sample": self.min_size_to_sample,
            "min_diff": self.min_diff,
            "max_diff": self.max_diff,
        }

    def to_json(self) -> dict[str, Any]:
        """The class name and :meth:`config`, as a buffer's checkpoint stores its limiter."""
        return {"class": type(self).__name__, **self.config()}

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> RateLimiter:
        """The limiter (fresh counters) that :meth:`to_json` describes.

        Raises:
            ConfigError: An unknown class or invalid parameters.
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"rate_limiter: expected a mapping, got {data!r}")
        params = dict(data)
        cls = _CLASSES.get(str(params.pop("class", None)))
        if cls is None or set(params) != set(_PARAMS):
            raise ConfigError(
                f"rate_limiter: expected {{'class': one of {sorted(_CLASSES)}, "
                f"{', '.join(repr(p) for p in _PARAMS)}}}, got {dict(data)!r}"
            )
        out = object.__new__(cls)
        RateLimiter.__init__(out, **params)
        return out

    def bind(self, owner: object) -> None:
        """Register the one buffer this limiter counts for (Reverb's ``RegisterTable``).

        A limiter's ``size`` is its owner's size, so two owners would overwrite each other's;
        :meth:`clone` gives another owner its own limiter.

        Raises:
            ConfigError: The limiter already counts for another owner.
        """
        with self._cond:
            current = None if self._owner is None else self._owner()
            if current is not None and current is not owner:
                raise ConfigError(
                    f"rate_limiter: {self!r} already limits {type(current).__name__} at "
                    f"{id(current):#x}; give each buffer its own (limiter.clone())"
                )
            self._owner = weakref.ref(owner)

    def clone(self) -> RateLimiter:
        """A fresh limiter of the same class and parameters, with zeroed counters."""
        fresh = object.__new__(type(self))
        RateLimiter.__init__(fresh, **self.config())
        return fresh

    def state_dict(self) -> dict[str, Any]:
        """Parameters and counters (pending inserts are not part of a state: they count as
        not inserted)."""
        with self._cond:
            return {
                "config": self.config(),
                "inserts": self._inserts - self._pending,
                "samples": self._samples,
                "size": self._size,
            }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore counters saved by :meth:`state_dict` of a limiter with equal parameters.

        Raises:
            ConfigError: Other parameters, a counter that is not an int ``>= 0``, or inserts
                being stored now; nothing changes then.
        """
        keys = ("config", "inserts", "samples", "size")
        if not isinstance(state, Mapping) or any(k not in state for k in keys):
            raise ConfigError(f"load_state_dict: expected a mapping with keys {keys}")
        config = state["config"]
        counts = [_counter(f"load_state_dict: {k}", state[k]) for k in keys[1:]]
        with self._cond:
            if not isinstance(config, Mapping) or dict(config) != self.config():
                raise ConfigError(
                    f"load_state_dict: parameters {shown(config)} differ from {self.config()}"
                )
            if self._pending:
                raise ConfigError("load_state_dict: inserts are being stored; try again later")
            self._inserts, self._samples, self._size = counts
            self._cond.notify_all()

    def __getstate__(self) -> dict[str, Any]:
        # A limiter travels (to a Ray actor) as its parameters and counters, never its lock.
        return self.state_dict()

    def __setstate__(self, state: dict[str, Any]) -> None:
        RateLimiter.__init__(self, **state["config"])
        self.load_state_dict(state)

    def __repr__(self) -> str:
        return (
            f"RateLimiter(samples_per_insert={self.samples_per_insert:g}, "
            f"min_size_to_sample={self.min_size_to_sample}, min_diff={self.min_diff:g}, "
            f"max_diff={self.max_diff:g})"
        )


class MinSize(RateLimiter):
    """Samples wait until the table holds ``min_size_to_sample`` items; nothing else waits.

    Reverb's ``MinSize``: ``samples_per_insert=1`` and the widest band
    (``-float max, +float max``).

    Args:
        min_size_to_sample: ``>= 1``.

    Raises:
        ConfigError: ``min_size_to_sample < 1``.
    """

    def __init__(self, min_size_to_sample: int) -> None:
        _int_at_least("min_size_to_sample", min_size_to_sample, 1)
        super().__init__(1.0, min_size_to_sample, -sys.float_info.max, sys.float_info.max)


class SampleToInsertRatio(RateLimiter):
    """Keeps ``samples / inserts`` near ``samples_per_insert`` once ``min_size_to_sample`` is met.

    Reverb's ``SampleToInsertRatio``. With a number ``error_buffer`` the allowed band of
    ``diff = inserts * spi - samples`` is centred on where it stands when sampling starts::

        min_diff = spi * min_size_to_sample - error_buffer
        max_diff = spi * min_size_to_sample + error_buffer

    and a pair ``(min_diff, max_diff)`` gives the band directly.

    Args:
        samples_per_insert: ``spi > 0``: average times each item is sampled over its lifetime.
        min_size_to_sample: ``>= 1``: items the table must hold before any sample.
        error_buffer: Half-width of the band, or the band ``(min_diff, max_diff)``.

    Raises:
        ConfigError: ``spi <= 0``, ``min_size_to_sample < 1``, a band narrower than
            ``2 * max(1, spi)`` (inserts and samples could block each other for ever), or
            ``min_diff > spi * min_size_to_sample`` (samples would never start). A band whose
            top is below ``spi * min_size_to_sample`` only logs a warning, as in Reverb: it
            deadlocks unless samples run concurrently with the first inserts.

    Example:
        >>> import rlreplay as rr
        >>> lim = rr.SampleToInsertRatio(samples_per_insert=4, min_size_to_sample=10,
        ...                              error_buffer=8)
        >>> lim.min_diff, lim.max_diff
        (32.0, 48.0)
    """

    def __init__(
        self,
        samples_per_insert: float,
        min_size_to_sample: int,
        error_buffer: float | tuple[float, float],
    ) -> None:
        spi = _number("samples_per_insert", samples_per_insert)
        if not spi > 0.0:
            raise ConfigError(f"samples_per_insert: expected a number > 0, got {spi}")
        _int_at_least("min_size_to_sample", min_size_to_sample, 1)
        offset = spi * min_size_to_sample
        if isinstance(error_buffer, tuple | list):
            if len(error_buffer) != 2:
                raise ConfigError(
                    f"error_buffer: expected a number or (min_diff, max_diff), got {error_buffer!r}"
                )
            lo = _number("error_buffer[0]", error_buffer[0])
            hi = _number("error_buffer[1]", error_buffer[1])
        else:
            half = _number("error_buffer", error_buffer)
            lo, hi = offset - half, offset + half
        if hi - lo < 2 * max(1.0, spi):
            raise ConfigError(
                f"error_buffer: the band max_diff - min_diff = {hi - lo:g} must be >= "
                f"2 * max(1, samples_per_insert) = {2 * max(1.0, spi):g}; a narrower one can "
                "block inserts and samples for ever"
            )
        if lo > offset:
            raise ConfigError(
                f"error_buffer: min_diff {lo:g} is above samples_per_insert * "
                f"min_size_to_sample = {offset:g}: samples could never start"
            )
        if hi < offset:
            _log.warning(
                "SampleToInsertRatio: max_diff %g is below samples_per_insert * "
                "min_size_to_sample = %g; unless samples run while the first items are "
                "inserted this deadlocks once min_size_to_sample items are in",
                hi,
                offset,
            )
        super().__init__(spi, min_size_to_sample, lo, hi)


_CLASSES: dict[str, type[RateLimiter]] = {
    c.__name__: c for c in (RateLimiter, MinSize, SampleToInsertRatio)
}
_PARAMS = ("samples_per_insert", "min_size_to_sample", "min_diff", "max_diff")


# Counts beyond this are refused: every count stays exact in a float64 (the ratio's arithmetic)
# and in an int64 (checkpoints), far beyond any run (10^6 items a second for 285 years).
_MAX_COUNT = 1 << 53


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool | np.timedelta64) or not isinstance(
        value, int | float | np.integer | np.floating
    ):
        raise ConfigError(f"{name}: expected a finite number, got {shown(value)}")
    try:
        out = float(value)
    except OverflowError:  # an int past float max
        out = math.inf
    if not math.isfinite(out):
        raise ConfigError(f"{name}: expected a finite number, got {shown(value)}")
    return out


def _int_at_least(name: str, value: Any, lowest: int) -> None:
    """A Python ``int`` (not a bool) in ``[lowest, 2**53]``, or :class:`ConfigError`."""
    if isinstance(value, bool) or not isinstance(value, int) or not lowest <= value <= _MAX_COUNT:
        raise ConfigError(f"{name}: expected an int in [{lowest}, 2**53], got {shown(value)}")


def _count(name: str, value: Any) -> int:
    if (
        isinstance(value, bool | np.timedelta64)
        or not isinstance(value, int | np.integer)
        or not 1 <= value <= _MAX_COUNT
    ):
        raise ConfigError(f"{name}: expected an int in [1, 2**53], got {shown(value)}")
    return int(value)


def _counter(name: str, value: Any) -> int:
    """A counter or size: an int (NumPy's too) in ``[0, 2**53]``, else :class:`ConfigError`."""
    if (
        isinstance(value, bool | np.timedelta64)
        or not isinstance(value, int | np.integer)
        or not 0 <= value <= _MAX_COUNT
    ):
        raise ConfigError(f"{name}: expected an int in [0, 2**53], got {shown(value)}")
    return int(value)
