"""Rate limiters against Reverb's semantics (``rate_limiter.cc``, ``rate_limiters.py``)."""

from __future__ import annotations

import pickle
import sys
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlreplay as rr
from rlreplay.limits import RateLimiter


class ReverbTable:
    """A slow model of a Reverb table's counters and its limiter's two predicates.

    Written from Reverb's C++ (``CanInsert`` / ``CanSample``): ``inserts_``, ``samples_``,
    ``deletes_`` with ``size = inserts_ - deletes_``.
    """

    def __init__(self, spi: float, min_size: int, min_diff: float, max_diff: float, cap: int):
        self.spi, self.min_size, self.min_diff, self.max_diff = spi, min_size, min_diff, max_diff
        self.cap = cap
        self.inserts = self.samples = self.deletes = 0

    def can_insert(self, n: int) -> bool:
        if self.inserts + n - self.deletes <= self.min_size:
            return True
        diff = (n + self.inserts) * self.spi - self.samples
        return diff <= self.max_diff

    def can_sample(self, n: int) -> bool:
        if self.inserts - self.deletes < self.min_size:
            return False
        diff = self.inserts * self.spi - self.samples - n
        return diff >= self.min_diff

    def insert(self, n: int) -> int:
        self.inserts += n
        # A table of max size `cap` evicts its oldest items (Reverb's remover): deletes.
        self.deletes = max(self.deletes, self.inserts - self.cap)
        return self.inserts - self.deletes


def test_min_size_is_reverbs():
    lim = rr.MinSize(3)
    assert (lim.samples_per_insert, lim.min_size_to_sample) == (1.0, 3)
    assert lim.min_diff == -sys.float_info.max and lim.max_diff == sys.float_info.max
    for size in range(1, 4):
        assert not lim.can_sample(1)
        lim.await_insert(1, timeout=0)
        lim.commit_insert(1, size)
    assert lim.can_sample(1)
    for _ in range(100):  # no ratio: samples and inserts never wait past the minimum size
        lim.await_sample(7, timeout=0)
    lim.await_insert(1, timeout=0)
    with pytest.raises(rr.ConfigError):
        rr.MinSize(0)


def test_sample_to_insert_ratio_band_and_checks():
    lim = rr.SampleToInsertRatio(samples_per_insert=4, min_size_to_sample=10, error_buffer=8)
    assert (lim.min_diff, lim.max_diff) == (32.0, 48.0)
    lim = rr.SampleToInsertRatio(2.0, 5, (-3.0, 7.0))
    assert (lim.min_diff, lim.max_diff) == (-3.0, 7.0)
    with pytest.raises(rr.ConfigError, match="samples_per_insert"):
        rr.SampleToInsertRatio(0, 5, 10)
    with pytest.raises(rr.ConfigError, match="min_size_to_sample"):
        rr.SampleToInsertRatio(1, 0, 10)
    with pytest.raises(rr.ConfigError, match=r"2 \* max\(1, samples_per_insert\)"):
        rr.SampleToInsertRatio(3.0, 5, 2.9)  # band 5.8 < 6
    with pytest.raises(rr.ConfigError, match="never start"):
        rr.SampleToInsertRatio(1.0, 5, (6.0, 20.0))
    with pytest.raises(ValueError):  # ConfigError is a ValueError, as Reverb's checks raise
        rr.SampleToInsertRatio(-1.0, 5, 10)


ops = st.lists(st.tuples(st.sampled_from(["insert", "sample"]), st.integers(1, 4)), max_size=120)


@settings(max_examples=150, deadline=None)
@given(
    spi=st.sampled_from([0.5, 1.0, 2.0, 3.5]),
    min_size=st.integers(1, 6),
    half=st.floats(4.0, 20.0),
    cap=st.integers(3, 30),
    ops=ops,
)
def test_random_calls_match_reverbs_predicates(spi, min_size, half, cap, ops):
    lim = rr.SampleToInsertRatio(spi, min_size, half)
    ref = ReverbTable(spi, min_size, lim.min_diff, lim.max_diff, cap)
    for op, n in ops:
        if op == "insert":
            expected = ref.can_insert(n)
            assert lim.can_insert(n) == expected
            if expected:
                lim.await_insert(n, timeout=0)
                lim.commit_insert(n, ref.insert(n))
            else:
                with pytest.raises(rr.ReplayTimeout):
                    lim.await_insert(n, timeout=0)
        else:
            expected = ref.can_sample(n)
            assert lim.can_sample(n) == expected
            if expected:
                lim.await_sample(n, timeout=0)
                ref.samples += n
            else:
                with pytest.raises(rr.ReplayTimeout):
                    lim.await_sample(n, timeout=0)
        s = lim.stats
        assert (s.inserts, s.samples, s.size) == (
            ref.inserts,
            ref.samples,
            ref.inserts - ref.deletes,
        )
        # Reverb's invariant: past the free stage no granted call leaves the band.
        if ref.inserts - ref.deletes > min_size:
            diff = ref.inserts * spi - ref.samples
            assert diff <= lim.max_diff
        if ref.samples:
            assert ref.inserts * spi - ref.samples >= lim.min_diff


def test_sampler_blocks_until_inserts_release_it():
    lim = rr.SampleToInsertRatio(samples_per_insert=1.0, min_size_to_sample=2, error_buffer=2.0)
    got: list[float] = []

    def sampler():
        lim.await_sample(1, timeout=10)
        got.append(time.monotonic())

    t = threading.Thread(target=sampler)
    t.start()
    time.sleep(0.1)
    assert not got  # size 0 < 2: waiting
    lim.await_insert(1, timeout=0)
    lim.commit_insert(1, 1)
    time.sleep(0.1)
    assert not got  # size 1 < 2: still waiting
    released = time.monotonic()
    lim.await_insert(1, timeout=0)
    lim.commit_insert(1, 2)
    t.join(5)
    assert got and got[0] >= released
    s = lim.stats
    assert s.sample_waits == 1 and s.sample_blocked_s >= 0.15 and s.samples == 1


def test_writer_blocks_until_samples_release_it():
    # spi 2, band [0, 4] after min size 1: inserts stop once diff would pass 4.
    lim = rr.SampleToInsertRatio(2.0, 1, (0.0, 4.0))
    lim.await_insert(2, timeout=0)  # free stage then diff 4
    lim.commit_insert(2, 2)
    assert not lim.can_insert(1)  # diff would be 6 > 4
    done = threading.Event()

    def writer():
        lim.await_insert(1, timeout=10)
        lim.commit_insert(1, 3)
        done.set()

    t = threading.Thread(target=writer)
    t.start()
    assert not done.wait(0.15)
    lim.await_sample(1, timeout=0)  # diff 3: 3 + 2 > 4, still blocked
    assert not done.wait(0.1)
    lim.await_sample(1, timeout=0)  # diff 2: an insert brings it to 4
    assert done.wait(5)
    t.join(5)
    assert lim.stats.insert_waits == 1 and lim.stats.inserts == 3


def test_uncommitted_inserts_do_not_pay_for_samples():
    lim = rr.SampleToInsertRatio(1.0, 1, (0.0, 10.0))
    lim.await_insert(3, timeout=0)  # granted, not stored yet
    assert not lim.can_sample(1)  # size 0: nothing to read
    lim.commit_insert(2, 2)
    assert lim.can_sample(2) and not lim.can_sample(3)  # the third insert is still pending
    lim.cancel_insert(1)
    assert lim.stats.inserts == 2 and lim.stats.pending_inserts == 0
    with pytest.raises(rr.ConfigError):
        lim.commit_insert(1, 3)


def test_timeout_and_close_wake_waiters():
    lim = rr.MinSize(5)
    t0 = time.monotonic()
    with pytest.raises(rr.ReplayTimeout) as info:
        lim.await_sample(1, timeout=0.2)
    assert time.monotonic() - t0 >= 0.19
    assert isinstance(info.value, TimeoutError) and "min_size_to_sample=5" in str(info.value)
    assert lim.stats.sample_timeouts == 1
    errors: list[BaseException] = []

    def waiter():
        try:
            lim.await_sample(1, timeout=30)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=waiter) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.1)
    lim.close()
    for t in threads:
        t.join(5)
    assert len(errors) == 3 and all(isinstance(e, rr.ReplayClosed) for e in errors)
    with pytest.raises(rr.ReplayClosed):
        lim.await_insert(1, timeout=0)
    with pytest.raises(rr.ConfigError):
        lim.await_insert(1, timeout=-1)


def test_batch_wider_than_the_band_is_refused():
    lim = rr.SampleToInsertRatio(1.0, 10, 10.0)  # band 20: at most 19 per sample
    with pytest.raises(rr.ConfigError, match="at most 19"):
        lim.await_sample(20, timeout=0)


def test_pickle_and_state_round_trip():
    lim = rr.SampleToInsertRatio(2.0, 2, 6.0)
    lim.await_insert(3, timeout=0)
    lim.commit_insert(3, 3)
    lim.await_sample(2, timeout=0)
    copy = pickle.loads(pickle.dumps(lim))
    assert (
        type(copy) is rr.SampleToInsertRatio and copy.stats.inserts == 3 and copy.stats.samples == 2
    )
    assert copy.can_sample(1) == lim.can_sample(1) and copy.can_insert(4) == lim.can_insert(4)
    fresh = lim.clone()
    assert type(fresh) is rr.SampleToInsertRatio and fresh.stats.inserts == 0
    assert fresh.config() == lim.config() and isinstance(fresh, RateLimiter)
    fresh.load_state_dict(lim.state_dict())
    assert fresh.stats == copy.stats
    with pytest.raises(rr.ConfigError):
        rr.MinSize(1).load_state_dict(lim.state_dict())
