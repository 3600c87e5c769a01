"""Every blocking call has a timeout and is woken by ``close()``.

The blocking calls are ``add(block=True)``, ``extend(block=True)`` and ``dequeue(block=True)``
of a buffer, ``await_insert`` / ``await_sample`` of a rate limiter, and the background thread of
``iterate()`` on a rate-limited buffer (waiting in the limiter, or for room in its full queue):
the buffer's ``close()`` ends it within a second and ``next`` then raises ``ReplayClosed``; the
iterator's own ``close()`` ends its wait in the limiter without drawing or counting a sample.
Each one, left waiting, raises :class:`rlreplay.ReplayTimeout` once its ``timeout`` has passed
(and not much later), and :class:`rlreplay.ReplayClosed` within a second when another thread
closes the buffer or the limiter, even with eight threads waiting at once; nothing is stored by
a call that gave up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rlreplay as rr

E, C = 2, 4  # env 0 is kept full (adds wait for room), env 1 empty (dequeues wait for steps)
FIELDS = {"obs": rr.Field((2,), np.float32)}


def fifo() -> rr.ReplayBuffer:
    buf = rr.ReplayBuffer(E * C, FIELDS, num_envs=E, seed=0)
    for t in range(C):
        buf.add(env_ids=[0], **step(t))
    return buf


def step(t: int) -> dict[str, Any]:
    return {
        "obs": np.full((1, 2), t, np.float32),
        "reward": np.ones(1, np.float32),
        "terminated": np.zeros(1, bool),
        "truncated": np.zeros(1, bool),
    }


def steps(n: int) -> dict[str, Any]:
    return {
        "obs": np.zeros((n, 2), np.float32),
        "reward": np.ones(n, np.float32),
        "terminated": np.zeros(n, bool),
        "truncated": np.zeros(n, bool),
    }


def blocking_calls(buf: rr.ReplayBuffer, timeout: float | None) -> list[Callable[[], Any]]:
    """Eight calls that wait on ``buf``: three adds, two extends, three dequeues."""

    def add() -> Any:
        return buf.add(env_ids=[0], block=True, timeout=timeout, **step(9))

    def extend() -> Any:
        return buf.extend(env_id=0, block=True, timeout=timeout, **steps(2))

    def dequeue() -> Any:
        return buf.dequeue(1, env_ids=[1], block=True, timeout=timeout)

    return [add, add, add, extend, extend, dequeue, dequeue, dequeue]


def start(calls: list[Callable[[], Any]]) -> tuple[list[threading.Thread], list[Any]]:
    """Runs each call in its own thread; ``results[i]`` gets its exception (or its result)."""
    results: list[Any] = [None] * len(calls)

    def run(i: int, call: Callable[[], Any]) -> None:
        try:
            results[i] = call()
        except BaseException as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i, c), daemon=True) for i, c in enumerate(calls)]
    for thread in threads:
        thread.start()
    return threads, results


def wait_until_blocked(count: Callable[[], int], expected: int, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while count() < expected:
        assert time.monotonic() < deadline, f"only {count()} of {expected} threads are waiting"
        time.sleep(0.005)


def join_all(threads: list[threading.Thread], within: float) -> float:
    start_time = time.monotonic()
    for thread in threads:
        thread.join(max(0.0, within - (time.monotonic() - start_time)))
    elapsed = time.monotonic() - start_time
    assert not any(t.is_alive() for t in threads), f"threads still blocked after {elapsed:.2f} s"
    return elapsed


@pytest.mark.parametrize("timeout", [None, 60.0])
def test_close_wakes_eight_blocked_threads_within_a_second(timeout: float | None) -> None:
    buf = fifo()
    threads, results = start(blocking_calls(buf, timeout))
    wait_until_blocked(lambda: buf._sync.waiting, 8)
    time.sleep(0.05)  # every thread is inside its wait, not on the way to it
    buf.close()
    elapsed = join_all(threads, within=1.0)
    assert elapsed < 1.0
    assert all(isinstance(r, rr.ReplayClosed) for r in results), results
    with pytest.raises(rr.ReplayClosed):
        buf.dequeue(1, block=True, timeout=5)


def test_every_blocking_call_times_out_and_stores_nothing() -> None:
    buf = fifo()
    before = buf.state_dict()["arrays"]
    threads, results = start(blocking_calls(buf, timeout=0.3))
    t0 = time.monotonic()
    join_all(threads, within=5.0)
    assert time.monotonic() - t0 < 3.0
    assert all(isinstance(r, rr.ReplayTimeout) for r in results), results
    after = buf.state_dict()["arrays"]
    for name in before:
        np.testing.assert_array_equal(before[name], after[name], err_msg=name)
    assert buf._sync.waiting == 0


def test_a_blocked_call_goes_on_when_its_condition_is_met() -> None:
    buf = fifo()
    threads, results = start(
        [
            lambda: buf.add(env_ids=[0], block=True, timeout=10, **step(7)),
            lambda: buf.dequeue(1, env_ids=[1], block=True, timeout=10),
        ]
    )
    wait_until_blocked(lambda: buf._sync.waiting, 2)
    buf.dequeue(1, env_ids=[0])  # room in env 0: the add goes on
    buf.add(env_ids=[1], **step(8))  # a step in env 1: the dequeue goes on
    join_all(threads, within=5.0)
    assert isinstance(results[0], np.ndarray)
    np.testing.assert_array_equal(results[1].obs, np.full((1, 1, 2), 8, np.float32))


def test_close_wakes_eight_threads_blocked_on_a_rate_limiter() -> None:
    limiter = rr.SampleToInsertRatio(samples_per_insert=1.0, min_size_to_sample=5, error_buffer=2.0)
    calls: list[Callable[[], Any]] = [lambda: limiter.await_sample(1, timeout=60)] * 8
    threads, results = start(calls)
    wait_until_blocked(lambda: limiter.stats.sample_waits, 8)
    time.sleep(0.05)
    limiter.close()
    assert join_all(threads, within=1.0) < 1.0
    assert all(isinstance(r, rr.ReplayClosed) for r in results), results


def test_rate_limiter_waits_time_out() -> None:
    limiter = rr.MinSize(3)
    t0 = time.monotonic()
    with pytest.raises(rr.ReplayTimeout):
        limiter.await_sample(1, timeout=0.2)
    assert 0.15 < time.monotonic() - t0 < 2.0


def limited(limiter: rr.RateLimiter, steps_added: int) -> rr.ReplayBuffer:
    buf = rr.ReplayBuffer(64, {"obs": rr.Field((), np.float32)}, seed=0, rate_limiter=limiter)
    for t in range(steps_added):
        buf.add(obs=t, reward=1.0, terminated=False, truncated=False)
    return buf


def test_close_ends_iterate_threads_blocked_on_the_rate_limiter() -> None:
    # MinSize(100) in 64 slots: every draw waits in the limiter; 8 iterators wait at once.
    buf = limited(rr.MinSize(100), 5)
    iterators = [buf.iterate(2, prefetch=2) for _ in range(8)]
    limiter = buf.rate_limiter
    assert limiter is not None
    wait_until_blocked(lambda: limiter.stats.sample_waits, 8)
    time.sleep(0.05)
    buf.close()
    assert join_all([it._thread for it in iterators], within=1.0) < 1.0
    for it in iterators:
        with pytest.raises(rr.ReplayClosed):
            next(it)
        with pytest.raises(StopIteration):
            next(it)


def test_close_ends_an_iterate_thread_waiting_on_its_full_queue() -> None:
    # Ratio 1 with an error buffer of 4: three batches of 2 are drawn, two of them queued; the
    # thread then holds the third and waits for room in the queue, not in the limiter.
    limiter = rr.SampleToInsertRatio(samples_per_insert=1.0, min_size_to_sample=2, error_buffer=4.0)
    buf = limited(limiter, 5)
    it = buf.iterate(2, prefetch=2)
    # (The first draw of a new schema compiles its kernel: slow on a busy machine.)
    wait_until_blocked(lambda: it._queue.qsize(), 2, within=120.0)
    time.sleep(0.2)
    buf.close()
    assert join_all([it._thread], within=1.0) < 1.0
    drawn = []
    with pytest.raises(rr.ReplayClosed):
        while True:
            drawn.append(next(it))
    assert 0 < len(drawn) <= 2
    assert all(b.obs.shape == (2,) for b in drawn)


def test_closing_the_iterator_stops_it_without_closing_the_buffer() -> None:
    buf = limited(rr.MinSize(20), 5)
    it = buf.iterate(2, prefetch=2)
    limiter = buf.rate_limiter
    assert limiter is not None
    wait_until_blocked(lambda: limiter.stats.sample_waits, 1)
    t0 = time.monotonic()
    it.close()  # its thread's wait in the limiter ends with it: nothing drawn, nothing counted
    assert time.monotonic() - t0 < 1.0
    assert not it.alive
    with pytest.raises(StopIteration):
        next(it)
    assert limiter.stats.samples == 0 and limiter.stats.sample_timeouts == 0
    for t in range(16):  # 21 steps: 20 sampleable
        buf.add(obs=t, reward=1.0, terminated=False, truncated=False)
    assert buf.sample(2).obs.shape == (2,)
    assert limiter.stats.samples == 2
    buf.close()
