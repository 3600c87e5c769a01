"""FIFO use: dequeue / gather_all order, blocking add and dequeue with threads, close, timeouts.

Timing assertions use generous bounds (seconds, not milliseconds) so a loaded CI machine does
not make them flaky; every thread is joined with a timeout so a deadlock fails, never hangs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlreplay as rr
from tests.reference import RefBuffer, assert_batch_matches

PROMPT = 1.0  # seconds: a woken waiter must return well within this
JOIN = 20.0  # seconds: a thread still alive after this is deadlocked


def make(env_capacity: int, num_envs: int = 1, **kw: Any) -> rr.ReplayBuffer:
    return rr.ReplayBuffer(
        env_capacity * num_envs,
        {"obs": rr.Field((2,), np.float32), "action": rr.Field((), np.int64)},
        num_envs=num_envs,
        seed=kw.pop("seed", 0),
        **kw,
    )


def values(env: int, t: int, done: bool = False) -> dict[str, Any]:
    """Step ``t`` of ``env``: obs (env, t), action 100 env + t; ``done`` terminates."""
    return {
        "obs": np.array([env, t], np.float32),
        "action": 100 * env + t,
        "reward": float(t),
        "terminated": done,
        "truncated": False,
        "next_obs": np.array([env, -t], np.float32),
    }


def batched(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {k: np.stack([np.asarray(r[k]) for r in rows]) for k in rows[0]}


def add_all(buf: rr.ReplayBuffer, t: int, done: Any = (), **kw: Any) -> Any:
    """Step ``t`` of every env (``done``: envs whose step ends an episode)."""
    return buf.add(**batched([values(e, t, e in done) for e in range(buf.num_envs)]), **kw)


def add_env(buf: rr.ReplayBuffer, env: int, t: int, done: bool = False, **kw: Any) -> Any:
    return buf.add(env_ids=[env], **batched([values(env, t, done)]), **kw)


class Waiter(threading.Thread):
    """Runs ``fn`` in a thread, recording its result (or error) and when it returned."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self.fn = fn
        self.result: Any = None
        self.error: BaseException | None = None
        self.started_at = 0.0
        self.done_at = 0.0

    def run(self) -> None:
        self.started_at = time.monotonic()
        try:
            self.result = self.fn()
        except BaseException as exc:
            self.error = exc
        self.done_at = time.monotonic()


def start(fn: Callable[[], Any]) -> Waiter:
    w = Waiter(fn)
    w.start()
    return w


def snapshot(buf: rr.ReplayBuffer) -> dict[str, Any]:
    """Everything observable about the stored contents."""
    g = buf.gather_all()
    return {
        "len": len(buf),
        "sampleable": buf.sampleable_ids().tolist(),
        **{k: v.copy() for k, v in g.items()},
    }


def assert_same_state(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


# ---------------------------------------------------------------------- dequeue / gather_all
def test_dequeue_returns_the_oldest_steps_per_env_in_order() -> None:
    buf = make(6, num_envs=2)
    for t in range(5):
        add_all(buf, t, done={1} if t == 2 else ())
    d = buf.dequeue(2)
    assert d.obs.shape == (2, 2, 2) and d.action.shape == d.reward.shape == (2, 2)
    assert d.ids.tolist() == [[0, 2], [1, 3]]  # id = t * E + env
    assert d.env_ids.tolist() == [[0, 0], [1, 1]]
    assert d.obs[..., 1].tolist() == [[0, 1], [0, 1]] and d.obs[..., 0].tolist() == [[0, 0], [1, 1]]
    assert d.action.tolist() == [[0, 1], [100, 101]]
    assert d.next_obs[..., 1].tolist() == [[1, 2], [1, 2]] and d.next_known.all()
    d = buf.dequeue(2)
    assert d.ids.tolist() == [[4, 6], [5, 7]]
    assert d.terminated.tolist() == [[False, False], [True, False]]
    assert d.next_obs.tolist()[1] == [[1, -2], [1, 4]]  # env 1's step 2 ended: its final obs
    assert len(buf) == 2
    d = buf.dequeue(1)
    assert d.ids.tolist() == [[8], [9]] and d.next_known.tolist() == [[False], [False]]
    assert len(buf) == 0


def test_dequeue_after_wrap_around_and_of_a_subset_of_envs() -> None:
    buf = make(4, num_envs=3)
    for t in range(7):  # steps 3..6 stored in every env
        add_all(buf, t)
    d = buf.dequeue(3, env_ids=[2, 0])
    assert d.obs.shape == (2, 3, 2)
    assert d.env_ids[:, 0].tolist() == [2, 0]  # in the order asked
    assert d.obs[..., 1].tolist() == [[3, 4, 5], [3, 4, 5]]
    assert d.ids.tolist() == [[11, 14, 17], [9, 12, 15]]
    assert d.action.tolist() == [[203, 204, 205], [3, 4, 5]]
    g = buf.gather_all()  # env 1 untouched, envs 0 and 2 hold step 6 only
    assert g.mask.tolist() == [[True, False, False, False], [True] * 4, [True, False, False, False]]
    assert g.obs[1, :, 1].tolist() == [3, 4, 5, 6]
    assert g.obs[0, 0].tolist() == [0, 6] and g.obs[2, 0].tolist() == [2, 6]
    d = buf.dequeue(1, env_ids=np.array([1]))
    assert d.ids.tolist() == [[10]]
    for bad in ([3], [0, 0], [-1], 1):
        with pytest.raises(rr.InvalidIdError):
            buf.dequeue(1, env_ids=bad)
    for n in (0, -2, 1.5):
        with pytest.raises(rr.ConfigError):
            buf.dequeue(n)  # type: ignore[arg-type]


def test_gather_all_with_equal_and_unequal_env_sizes() -> None:
    buf = make(5, num_envs=2)
    for t in range(3):
        add_all(buf, t, done={0} if t == 1 else ())
    g = buf.gather_all()
    assert g.obs.shape == (2, 3, 2) and g.mask.all()
    assert g.ids.tolist() == [[0, 2, 4], [1, 3, 5]]
    assert g.env_ids.tolist() == [[0, 0, 0], [1, 1, 1]]
    assert g.terminated.tolist() == [[False, True, False], [False] * 3]
    assert g.next_obs[0, :, 1].tolist() == [1, -1, 0] and g.next_known[0].tolist() == [
        True,
        True,
        False,
    ]
    for t in range(3, 8):  # env 1 gets 5 more steps and wraps; env 0 none
        add_env(buf, 1, t)
    g = buf.gather_all()
    assert g.obs.shape == (2, 5, 2)
    assert g.mask.tolist() == [[True] * 3 + [False] * 2, [True] * 5]
    assert g.obs[1, :, 1].tolist() == [3, 4, 5, 6, 7]
    assert g.obs[0, 3:].tolist() == [[0, 0], [0, 0]]  # padding is zero
    assert g.ids[1].tolist() == [7, 9, 11, 13, 15]
    assert len(buf) == 8  # gather_all removes nothing
    buf.dequeue(3, env_ids=[0])
    g = buf.gather_all()
    assert g.mask.tolist() == [[False] * 5, [True] * 5]
    buf.clear()
    g = buf.gather_all()
    assert g.obs.shape == (2, 0, 2) and g.mask.shape == (2, 0)


def test_dequeued_steps_are_no_longer_sampleable_and_their_ids_are_stale() -> None:
    buf = make(8, num_envs=2, n_step=2, frame_stack=2)
    for t in range(6):
        add_all(buf, t, done={0} if t == 3 else ())
    gone = buf.dequeue(2).ids.ravel()  # env 0 loses steps 0, 1 of its episode 0..3
    assert gone.tolist() == [0, 2, 1, 3]
    left = buf.sampleable_ids().tolist()
    assert not set(gone.tolist()) & set(left)
    # step 2 of env 0 would stack frame 1 (dequeued): it is not sampleable either
    assert 2 * 2 + 0 not in left and 3 * 2 + 0 in left
    for call in (
        lambda i: buf.get_transitions(i),
        lambda i: buf.episode_begin(i),
        lambda i: buf.steps_to_episode_end(i),
        lambda i: buf.get_field("obs", i),
        lambda i: buf.get_episode(int(i[0])),
    ):
        for i in gone.tolist():
            with pytest.raises(rr.InvalidIdError):
                call(np.array([i]))
    assert buf.episode_begin(np.array([4])).tolist() == [0]  # an id, not a slot: now stale
    for _ in range(20):
        assert not set(buf.sample(32).ids.tolist()) & set(gone.tolist())
        assert (buf.sample_sequences(16, 3).ids // 2 >= 2).all()
    with pytest.raises(rr.EmptyBufferError):
        buf.sample_episodes(1)  # env 0's only ended episode lost its first steps


# ---------------------------------------------------------------------- FIFO vs the reference
def ref_dequeue(ref: RefBuffer, envs: list[int], n: int) -> None:
    """Dequeue in the reference: its ``cleared_at`` is the oldest step a clear left."""
    for e in envs:
        ref.cleared_at[e] = ref.oldest_stored(e) + n


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_adds_and_dequeues_match_the_reference(data: st.DataObject) -> None:
    E = data.draw(st.integers(1, 3))
    n_step, k = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 3))
    C = data.draw(st.integers(n_step + k, 8))
    buf = make(C, num_envs=E, n_step=n_step, frame_stack=k, gamma=0.5)
    ref = RefBuffer(E, C, n_step, 0.5, k, True, ("obs",))
    t = [0] * E
    for _ in range(data.draw(st.integers(1, 30))):
        envs = data.draw(st.lists(st.integers(0, E - 1), min_size=1, max_size=E, unique=True))
        if data.draw(st.booleans()):
            rows = []
            for e in envs:
                rows.append(values(e, t[e], data.draw(st.booleans())))
                t[e] += 1
            buf.add(env_ids=envs, **batched(rows))
            for e, r in zip(envs, rows, strict=True):
                ref.add(e, r)
        else:
            n = data.draw(st.integers(1, C))
            have = [len(ref.history[e]) - ref.oldest_stored(e) for e in envs]
            if min(have) < n:
                with pytest.raises(rr.EmptyBufferError):
                    buf.dequeue(n, env_ids=envs)
                continue
            d = buf.dequeue(n, env_ids=envs)
            for row, e in enumerate(envs):
                lo = ref.oldest_stored(e)
                assert d.ids[row].tolist() == [s * E + e for s in range(lo, lo + n)]
                assert d.obs[row].tolist() == [[e, s] for s in range(lo, lo + n)]
            ref_dequeue(ref, envs, n)
        assert len(buf) == len(ref.stored_ids())
        g = buf.gather_all()
        assert sorted(g.ids[g.mask].tolist()) == ref.stored_ids()
        assert sorted(buf.sampleable_ids().tolist()) == ref.sampleable_ids()
        if ref.sampleable_ids():
            assert_batch_matches(buf.get_transitions(np.array(ref.sampleable_ids())), ref)


# ---------------------------------------------------------------------- blocking dequeue
def test_non_blocking_dequeue_with_too_few_steps_raises_at_once() -> None:
    buf = make(4, num_envs=2)
    add_env(buf, 0, 0)
    before = snapshot(buf)
    t0 = time.monotonic()
    for kw in ({}, {"env_ids": [1]}, {"block": False, "timeout": 5.0}):
        with pytest.raises(rr.EmptyBufferError):
            buf.dequeue(1, **kw)  # type: ignore[arg-type]
    assert time.monotonic() - t0 < PROMPT
    assert_same_state(before, snapshot(buf))
    assert buf.dequeue(1, env_ids=[0]).ids.tolist() == [[0]]


def test_blocking_dequeue_returns_at_once_when_ready() -> None:
    buf = make(4)
    buf.add(**values(0, 0))
    t0 = time.monotonic()
    assert buf.dequeue(1, block=True, timeout=0).ids.tolist() == [[0]]
    assert time.monotonic() - t0 < PROMPT


@pytest.mark.parametrize("timeout", [None, 30.0])
def test_blocking_dequeue_waits_for_a_producer_and_wakes_on_add(timeout: float | None) -> None:
    buf = make(4, num_envs=2)
    add_env(buf, 0, 0)
    w = start(lambda: buf.dequeue(2, env_ids=[0, 1], block=True, timeout=timeout))
    time.sleep(0.3)
    assert w.is_alive(), "dequeue(block=True) returned before the data existed"
    add_env(buf, 1, 0)  # env 1 now has 1 step: still not enough
    time.sleep(0.2)
    assert w.is_alive()
    add_all(buf, 1)
    added_at = time.monotonic()
    w.join(JOIN)
    assert not w.is_alive() and w.error is None, w.error
    # woken by the add (a condition variable), not by a poll or the 30 s timeout
    assert w.done_at - added_at < PROMPT
    assert w.result.ids.tolist() == [[0, 2], [1, 3]]
    assert len(buf) == 0


def test_blocking_dequeue_times_out() -> None:
    buf = make(4)
    buf.add(**values(0, 0))
    before = snapshot(buf)
    t0 = time.monotonic()
    with pytest.raises(rr.ReplayTimeout) as info:
        buf.dequeue(2, block=True, timeout=0.3)
    elapsed = time.monotonic() - t0
    assert isinstance(info.value, TimeoutError)
    assert 0.29 <= elapsed < 0.3 + PROMPT
    assert_same_state(before, snapshot(buf))
    with pytest.raises(rr.ReplayTimeout):
        buf.dequeue(2, block=True, timeout=0)
    with pytest.raises(rr.ConfigError):
        buf.dequeue(2, block=True, timeout=-1.0)


# ---------------------------------------------------------------------- blocking add
def test_blocking_add_waits_for_room_until_a_consumer_dequeues() -> None:
    buf = make(3, num_envs=2)
    for t in range(3):
        add_env(buf, 0, t)  # env 0 full, env 1 empty
    t0 = time.monotonic()
    assert add_env(buf, 1, 0, block=True).tolist() == [1]  # env 1 has room: no wait
    assert time.monotonic() - t0 < PROMPT
    w = start(lambda: add_all(buf, 3, block=True))  # names env 0, which is full
    time.sleep(0.3)
    assert w.is_alive(), "add(block=True) overwrote a full env instead of waiting"
    assert len(buf) == 4
    d = buf.dequeue(1, env_ids=[0])
    freed_at = time.monotonic()
    w.join(JOIN)
    assert not w.is_alive() and w.error is None, w.error
    assert w.done_at - freed_at < PROMPT
    assert d.obs[0, 0].tolist() == [0, 0]  # the oldest step left; nothing was overwritten
    assert w.result.tolist() == [6, 3]  # step 3 of env 0, step 1 of env 1
    g = buf.gather_all()
    assert g.obs[0, :, 1].tolist() == [1, 2, 3]


def test_blocking_extend_waits_for_room_for_all_its_steps() -> None:
    buf = make(4)
    buf.extend(**batched([values(0, t) for t in range(3)]))
    with pytest.raises(rr.ShapeError):
        buf.extend(**batched([values(0, t) for t in range(5)]), block=True)  # can never fit
    w = start(lambda: buf.extend(**batched([values(0, t) for t in (3, 4, 5)]), block=True))
    time.sleep(0.2)
    assert w.is_alive()
    buf.dequeue(1)
    time.sleep(0.2)
    assert w.is_alive()  # 2 free slots are not enough for 3 steps
    buf.dequeue(1)
    w.join(JOIN)
    assert w.error is None, w.error
    assert buf.gather_all().obs[0, :, 1].tolist() == [2, 3, 4, 5]


def test_blocking_add_times_out_and_leaves_the_state_unchanged() -> None:
    buf = make(2, num_envs=2, n_step=1)
    for t in range(2):
        add_all(buf, t, done={1} if t == 1 else ())
    before = snapshot(buf)
    t0 = time.monotonic()
    with pytest.raises(rr.ReplayTimeout) as info:
        add_all(buf, 2, done={0, 1}, block=True, timeout=0.3)
    elapsed = time.monotonic() - t0
    assert isinstance(info.value, TimeoutError)
    assert 0.29 <= elapsed < 0.3 + PROMPT
    with pytest.raises(rr.ReplayTimeout):
        buf.add(env_ids=[1], **batched([values(1, 2, True)]), block=True, timeout=0)
    with pytest.raises(rr.ReplayTimeout):
        buf.extend(env_id=0, **batched([values(0, 2)]), block=True, timeout=0.05)
    assert_same_state(before, snapshot(buf))
    assert add_all(buf, 2).tolist() == [4, 5]  # ids continue as if nothing happened
    single = make(2)
    single.add(**values(0, 0))
    single.add(**values(0, 1))
    with pytest.raises(rr.ReplayTimeout):
        single.add(**values(0, 2), block=True, timeout=0.05)
    assert single.gather_all().obs[0, :, 1].tolist() == [0, 1]


def test_rejected_adds_leave_the_state_unchanged() -> None:
    buf = make(3, num_envs=2)
    add_all(buf, 0)
    add_all(buf, 1, done={0})
    no_final = batched([values(1, 2, True)])
    del no_final["next_obs"]
    bad_calls: list[Callable[[], Any]] = [
        # a step that ends its episode without next_obs
        lambda: buf.add(env_ids=[1], **no_final, block=True),
        # the wrong leading axis
        lambda: buf.add(**batched([values(0, 2)]), block=True, timeout=0.01),
        # more steps than an env can ever hold, blocking
        lambda: buf.extend(env_id=0, **batched([values(0, t) for t in range(4)]), block=True),
        # a negative timeout
        lambda: buf.add(**batched([values(0, 2), values(1, 2)]), block=True, timeout=-1.0),
    ]
    add_all(buf, 2)  # both envs full now: the blocking calls above would have to wait
    before = snapshot(buf)
    for call in bad_calls:
        with pytest.raises(rr.ReplayError):
            call()
        assert_same_state(before, snapshot(buf))
    assert add_all(buf, 3).tolist() == [6, 7]


# ---------------------------------------------------------------------- close
def test_close_wakes_every_waiter_with_replay_closed() -> None:
    buf = make(4, num_envs=2)
    for t in range(4):
        add_env(buf, 0, t)  # env 0 full
    add_env(buf, 1, 0)  # env 1 holds one step
    waiters = [
        start(lambda: buf.dequeue(4, block=True)),  # env 1 lacks steps
        start(lambda: buf.dequeue(3, env_ids=[1], block=True, timeout=60)),
        start(lambda: add_all(buf, 4, block=True)),  # env 0 has no room
        start(lambda: buf.extend(env_id=0, **batched([values(0, 5)]), block=True, timeout=60)),
    ]
    time.sleep(0.3)
    assert all(w.is_alive() for w in waiters)
    buf.close()
    closed_at = time.monotonic()
    for w in waiters:
        w.join(JOIN)
        assert not w.is_alive()
        assert isinstance(w.error, rr.ReplayClosed), w.error
        assert w.done_at - closed_at < PROMPT
    for call in (
        lambda: buf.dequeue(1),
        lambda: buf.dequeue(1, block=True),
        lambda: add_all(buf, 2, block=True),
        lambda: buf.gather_all(),
        lambda: buf.sample(1),
    ):
        with pytest.raises(rr.ReplayClosed):
            call()
    buf.close()  # harmless twice


# ---------------------------------------------------------------------- concurrency
def test_producer_consumer_and_samplers_never_deadlock() -> None:
    E, C, steps, n = 2, 8, 240, 3
    buf = make(C, num_envs=E, n_step=2, frame_stack=2, seed=3)
    errors: list[BaseException] = []
    consumed: list[np.ndarray] = []
    stop = threading.Event()

    def guarded(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # reported below
                errors.append(exc)
                stop.set()

        return run

    def producer() -> None:
        for t in range(steps):
            add_all(
                buf, t, done={e for e in range(E) if (t + e) % 7 == 6}, block=True, timeout=JOIN
            )

    def consumer() -> None:
        for _ in range(steps // n):
            consumed.append(buf.dequeue(n, block=True, timeout=JOIN).obs)

    def sampler() -> None:
        while not stop.is_set():
            try:
                b = buf.sample(8)
                assert (b.obs[:, -1, 0] == b.env_ids).all()
                s = buf.sample_sequences(4, 3, within_episode=False)
                assert (s.obs[..., 0][s.mask] == np.repeat(s.env_ids, 3)[s.mask.ravel()]).all()
                buf.gather_all()
            except rr.EmptyBufferError:
                pass  # the consumer emptied the buffer between two calls

    threads = [threading.Thread(target=guarded(f), daemon=True) for f in (producer, consumer)]
    samplers = [threading.Thread(target=guarded(sampler), daemon=True) for _ in range(3)]
    for th in threads + samplers:
        th.start()
    for th in threads:
        th.join(JOIN)
    stop.set()
    for th in samplers:
        th.join(JOIN)
    assert not any(th.is_alive() for th in threads + samplers), "deadlock"
    assert not errors, errors
    got = np.concatenate(consumed, axis=1)  # (E, steps, 2): every step once, in order
    assert got.shape == (E, steps, 2)
    for e in range(E):
        assert got[e, :, 0].tolist() == [e] * steps
        assert got[e, :, 1].tolist() == list(range(steps))
    assert len(buf) == 0


def test_impossible_blocking_requests_fail_at_once() -> None:
    buf = make(4, num_envs=1)
    with pytest.raises(rr.ShapeError, match="never"):
        buf.dequeue(5, block=True)
    with pytest.raises(rr.ConfigError, match="timeout"):
        buf.dequeue(1, block=False, timeout=-1)
    with pytest.raises(rr.ConfigError, match="timeout"):
        buf.add(**values(0, 0), block=False, timeout=-0.5)
    assert len(buf) == 0


def exact_step(buf: rr.ReplayBuffer, t: int) -> dict[str, Any]:
    """Step ``t`` of every env in the fields' own dtypes: what ``add``'s fast path stores."""
    E = buf.num_envs
    if E == 1:
        return values(0, t)
    return {
        "obs": np.full((E, 2), t, np.float32),
        "action": np.full(E, t, np.int64),
        "reward": np.full(E, t, np.float32),
        "terminated": np.zeros(E, bool),
        "truncated": np.zeros(E, bool),
        "next_obs": np.full((E, 2), -t, np.float32),
    }


@pytest.mark.parametrize("envs", [1, 2])
def test_a_fast_path_add_wakes_a_blocked_dequeue(envs: int) -> None:
    buf = make(4, num_envs=envs)
    buf._writer._countdown[0] = 1  # vector: the lockstep kernel from the first step
    buf.add(**exact_step(buf, 0))
    assert buf._index._pending == 1  # the fast path stored it
    w = start(lambda: buf.dequeue(2, block=True, timeout=30.0))
    time.sleep(0.3)
    assert w.is_alive()
    buf.add(**exact_step(buf, 1))
    added_at = time.monotonic()
    w.join(JOIN)
    assert not w.is_alive() and w.error is None, w.error
    assert w.done_at - added_at < PROMPT
    assert w.result.obs[..., 1].tolist() == [[0, 1]] * envs


@pytest.mark.parametrize("envs", [1, 2])
def test_a_closed_buffer_refuses_values_the_fast_path_would_store(envs: int) -> None:
    buf = make(4, num_envs=envs)
    buf._writer._countdown[0] = 1
    buf.add(**exact_step(buf, 0))
    buf.close()
    with pytest.raises(rr.ReplayClosed):
        buf.add(**exact_step(buf, 1))
