"""The prefetching iterator: overlap, clean shutdown, errors re-raised, bounded waits."""

from __future__ import annotations

import gc
import itertools
import threading
import time
from typing import Any

import numpy as np
import pytest

import rlreplay as rr
from rlreplay.io import Prefetcher
from tests.io.conftest import FIELDS, Buffer, PBuffer, fill


def test_items_in_order_and_bounded_lookahead() -> None:
    counter = itertools.count()
    with Prefetcher(lambda: next(counter), prefetch=3) as it:
        assert [next(it) for _ in range(10)] == list(range(10))
        time.sleep(0.2)
        made = next(counter)  # calls so far: 10 taken + at most 3 queued + 1 waiting to be put
        assert made <= 10 + 3 + 1
    assert not it.alive


def test_close_stops_the_thread_and_iteration() -> None:
    it = Prefetcher(lambda: 1, prefetch=2)
    assert next(it) == 1
    it.close()
    assert not it.alive
    with pytest.raises(StopIteration):
        next(it)
    it.close()  # twice is harmless


def test_close_from_another_thread_wakes_a_waiting_consumer() -> None:
    gate = threading.Event()

    def slow() -> int:
        gate.wait(5.0)
        return 1

    it = Prefetcher(slow, prefetch=1)
    threading.Timer(0.2, it.close).start()
    t0 = time.monotonic()
    with pytest.raises(StopIteration):
        next(it)
    assert time.monotonic() - t0 < 2.0
    gate.set()
    it._thread.join(2.0)
    assert not it.alive


def test_error_is_reraised_in_the_consumer_then_iteration_ends() -> None:
    calls = itertools.count()

    def flaky() -> int:
        k = next(calls)
        if k == 2:
            raise KeyError("boom")
        return k

    it = Prefetcher(flaky, prefetch=2)
    assert [next(it), next(it)] == [0, 1]
    with pytest.raises(KeyError, match="boom"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)
    assert not it.alive


@pytest.mark.parametrize("prefetch", [1, 2])
def test_error_with_a_full_queue_is_not_lost(prefetch: int) -> None:
    def fail() -> int:
        raise ValueError("empty")

    it = Prefetcher(fail, prefetch=prefetch)
    it._thread.join(2.0)  # the producer has failed and ended before anyone asked
    with pytest.raises(ValueError, match="empty"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)


def test_timeout_when_nothing_comes() -> None:
    gate = threading.Event()
    it = Prefetcher(lambda: gate.wait(10.0), prefetch=1, timeout=0.2)
    with pytest.raises(rr.ReplayTimeout, match=r"within 0\.2 s"):
        next(it)
    gate.set()
    it.close()
    assert not it.alive


def test_dropped_iterator_stops_its_thread() -> None:
    it = Prefetcher(lambda: 0, prefetch=1)
    thread = it._thread
    del it
    gc.collect()
    thread.join(2.0)
    assert not thread.is_alive()


def test_buffer_iterate_sample_kwargs_and_methods() -> None:
    buf = PBuffer(200, FIELDS, n_step=2, seed=0)
    fill(buf, 100, seed=0)
    with buf.iterate(8, prefetch=2, recent_ratio=None) as it:
        b = next(it)
        assert b.obs.shape == (8, 3) and b.weights.shape == (8,)
        assert buf.update_priorities(b.ids, np.ones(8)) == 0
    with buf.iterate(4, method="sample_sequences", length=5) as it:
        assert next(it).obs.shape == (4, 5, 3)
    with buf.iterate(2, method="sample_episodes", as_="torch") as it:
        import torch

        ep = next(it)
        assert isinstance(ep.obs, torch.Tensor) and ep.obs.shape[0] == 2
    with pytest.raises(rr.ConfigError, match="method"):
        buf.iterate(2, method="dequeue")
    with pytest.raises(rr.ConfigError, match="as_"):
        buf.iterate(2, as_="tf")


def test_buffer_errors_reach_the_learner() -> None:
    empty = Buffer(20, FIELDS, seed=0)
    with empty.iterate(4) as it, pytest.raises(rr.EmptyBufferError):
        next(it)
    buf = Buffer(20, FIELDS, seed=0)
    fill(buf, 10, seed=0)
    it = buf.iterate(4, timeout=5.0)
    next(it)
    buf.close()
    with pytest.raises(rr.ReplayClosed):
        for _ in range(10):  # at most prefetch batches were made before the close
            next(it)
    it.close()


def test_sampling_overlaps_the_learner_step() -> None:
    """With a slow learner step and a slow sampler, prefetching hides the sampler's time."""
    buf = Buffer(500, FIELDS, seed=0)
    fill(buf, 200, seed=0)
    delay = 0.03

    def slow_sample(batch_size: int) -> Any:
        time.sleep(delay)  # stands for assembling a large batch (time.sleep frees the GIL)
        return buf.sample(batch_size)

    n = 10
    with Prefetcher(lambda: slow_sample(32), prefetch=2) as it:
        next(it)
        t0 = time.monotonic()
        for _ in range(n):
            next(it)
            time.sleep(delay)  # the learner's step
        overlapped = time.monotonic() - t0
    assert overlapped < n * 2 * delay * 0.8  # serial would take n * (sample + step)
