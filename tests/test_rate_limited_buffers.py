"""Rate limiters on the core buffers: ``rate_limiter=`` paces ``add``/``extend`` against
``sample``/``sample_sequences`` exactly as Reverb's limiter defines it (see ``test_limits``)."""

from __future__ import annotations

import json
import pickle
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlreplay as rr
from rlreplay.distributed.shard import Shard
from rlreplay.distributed.wire import unpack_columns
from tests.test_limits import ReverbTable

FIELDS = {"obs": rr.Field((2,), np.float32), "action": rr.Field((), np.int64)}


def step(t: int, *, done: bool = True, envs: int | None = None) -> dict[str, object]:
    """One step; ``done`` by default so that it is sampleable as soon as it is stored."""
    lead = () if envs is None else (envs,)
    return {
        "obs": np.full((*lead, 2), t, np.float32),
        "action": np.full(lead, t % 3, np.int64),
        "reward": np.full(lead, 1.0, np.float32),
        "next_obs": np.full((*lead, 2), t + 1, np.float32),
        "terminated": np.full(lead, done),
        "truncated": np.zeros(lead, bool),
    }


def run(t: int, n: int) -> dict[str, object]:
    """``n`` consecutive one-step episodes for ``extend``."""
    return {
        "obs": np.repeat(np.arange(t, t + n, dtype=np.float32)[:, None], 2, axis=1),
        "action": np.arange(t, t + n) % 3,
        "reward": np.ones(n, np.float32),
        "next_obs": np.zeros((n, 2), np.float32),
        "terminated": np.ones(n, bool),
        "truncated": np.zeros(n, bool),
    }


def waiter(fn, out: list[object]) -> threading.Thread:
    """A started thread that appends ``fn()``'s result (or its exception) to ``out``."""

    def body() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # the test inspects it
            out.append(exc)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread


def test_limiter_leaves_the_fast_path_and_changes_no_result():
    plain = rr.ReplayBuffer(64, FIELDS, seed=3)
    limited = rr.ReplayBuffer(64, FIELDS, seed=3, rate_limiter=rr.MinSize(1))
    assert "add" in plain.__dict__ and "add" not in limited.__dict__  # generated add: plain only
    assert plain.rate_limiter is None and isinstance(limited.rate_limiter, rr.MinSize)
    for t in range(40):
        s = step(t, done=t % 5 == 4)
        np.testing.assert_array_equal(plain.add(**s), limited.add(**s))
    np.testing.assert_array_equal(
        plain.extend(**run(40, 7)), limited.extend(**run(40, 7), timeout=1.0)
    )
    a, b = plain.sample(16), limited.sample(16, timeout=1.0)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
    sa, sb = plain.sample_sequences(4, 3), limited.sample_sequences(4, 3)
    np.testing.assert_array_equal(sa.obs, sb.obs)
    stats = limited.rate_limiter.stats
    assert (stats.inserts, stats.samples, stats.size) == (47, 20, limited.num_sampleable)
    assert stats.pending_inserts == 0


@settings(max_examples=60, deadline=None)
@given(
    spi=st.sampled_from([0.5, 1.0, 2.0, 3.0]),
    min_size=st.integers(1, 5),
    half=st.floats(6.0, 16.0),
    cap=st.integers(6, 20),
    ops=st.lists(
        st.tuples(st.sampled_from(["add", "extend", "sample", "sequences"]), st.integers(1, 4)),
        max_size=60,
    ),
)
def test_random_calls_match_reverbs_table(spi, min_size, half, cap, ops):
    """Every call with ``timeout=0`` succeeds exactly when Reverb's predicates allow it, against
    a model table of ``cap`` items (one-step episodes: the sampleable count is the size), and a
    refused call leaves buffer, limiter and generator as they were."""
    lim = rr.SampleToInsertRatio(spi, min_size, half)
    buf = rr.ReplayBuffer(cap, FIELDS, seed=1, rate_limiter=lim)
    ref = ReverbTable(spi, min_size, lim.min_diff, lim.max_diff, cap)

    def call(op: str, n: int, t: int) -> object:
        if op == "add":
            return buf.add(**step(t), timeout=0)
        if op == "extend":
            return buf.extend(**run(t, n), timeout=0)
        if op == "sample":
            return buf.sample(n, timeout=0)
        return buf.sample_sequences(n, 2, timeout=0)

    t = 0
    for op, k in ops:
        before = (len(buf), lim.stats, buf.rng.bit_generator.state)
        n = 1 if op == "add" else k
        allowed = ref.can_insert(n) if op in ("add", "extend") else ref.can_sample(n)
        if n > lim.max_diff - lim.min_diff - spi and op in ("sample", "sequences"):
            with pytest.raises(rr.ConfigError):  # a batch wider than the band: refused
                call(op, n, t)
            allowed = False
        elif allowed:
            out = call(op, n, t)
            if op in ("add", "extend"):
                assert out.shape == (n,)
                ref.insert(n)
                t += n
            else:
                assert out.ids.shape == (n,)
                ref.samples += n
        else:
            with pytest.raises(rr.ReplayTimeout):
                call(op, n, t)
        if not allowed:
            assert (len(buf), lim.stats.inserts, lim.stats.samples) == (
                before[0],
                before[1].inserts,
                before[1].samples,
            )
            assert buf.rng.bit_generator.state == before[2]
        s = lim.stats
        assert (s.inserts, s.samples, s.size) == (ref.inserts, ref.samples, buf.num_sampleable)
        assert s.size == ref.inserts - ref.deletes and s.pending_inserts == 0


def test_sampler_blocks_until_adds_release_it():
    buf = rr.ReplayBuffer(32, FIELDS, seed=0, rate_limiter=rr.MinSize(3))
    out: list[object] = []
    thread = waiter(lambda: buf.sample(2, timeout=10), out)
    for t in range(2):
        buf.add(**step(t))
        time.sleep(0.05)
        assert not out  # 1, then 2 sampleable < 3: still waiting
    buf.add(**step(2))
    thread.join(5)
    assert len(out) == 1 and isinstance(out[0], rr.Batch) and out[0].ids.shape == (2,)
    stats = buf.rate_limiter.stats
    assert stats.sample_waits == 1 and stats.samples == 2 and stats.sample_blocked_s >= 0.09


def test_sequences_and_prioritized_samples_wait_too():
    buf = rr.PrioritizedReplayBuffer(32, FIELDS, seed=0, rate_limiter=rr.MinSize(2))
    out: list[object] = []
    threads = [
        waiter(lambda: buf.sample(3, timeout=10), out),
        waiter(lambda: buf.sample_sequences(2, 4, timeout=10), out),
    ]
    time.sleep(0.1)
    assert not out
    buf.extend(**run(0, 2))
    for thread in threads:
        thread.join(5)
    assert sorted(len(b.ids) for b in out) == [2, 3]
    assert all("probabilities" in b for b in out)
    assert buf.rate_limiter.stats.samples == 5


def test_writer_blocks_until_samples_release_it():
    # spi 2, band [0, 4] past a minimum of 1: the third insert would take diff to 6 > 4.
    buf = rr.ReplayBuffer(32, FIELDS, seed=0, rate_limiter=rr.SampleToInsertRatio(2.0, 1, (0, 4)))
    buf.add(**step(0))
    buf.add(**step(1))
    out: list[object] = []
    thread = waiter(lambda: buf.add(**step(2), timeout=10), out)
    time.sleep(0.1)
    assert not out and len(buf) == 2
    buf.sample(1, timeout=0)  # diff 3: an insert would make it 5, still too much
    time.sleep(0.1)
    assert not out and len(buf) == 2
    buf.sample(1, timeout=0)  # diff 2: the insert brings it to 4
    thread.join(5)
    assert len(out) == 1 and isinstance(out[0], np.ndarray) and len(buf) == 3
    stats = buf.rate_limiter.stats
    assert stats.insert_waits == 1 and stats.inserts == 3 and stats.size == 3


def test_timeouts_raise_with_nothing_stored_or_counted():
    lim = rr.SampleToInsertRatio(1.0, 2, (0, 4))
    buf = rr.ReplayBuffer(32, FIELDS, num_envs=2, seed=0, rate_limiter=lim)
    with pytest.raises(rr.ReplayTimeout):
        buf.sample(1, timeout=0.1)  # nothing stored yet
    buf.add(**step(0, envs=2))  # free: size 0 + 2 <= 2
    buf.add(**step(1, envs=1), env_ids=[0])  # diff 3 <= 4
    buf.add(**step(1, envs=1), env_ids=[1])  # diff 4 <= 4: the band is full
    assert len(buf) == 4
    state = buf.rng.bit_generator.state
    for call in (
        lambda: buf.add(**step(2, envs=2), timeout=0.1),
        lambda: buf.add(**step(2, envs=1), env_ids=[1], timeout=0),
        lambda: buf.extend(**run(2, 2), env_id=1, timeout=0.05),
        lambda: buf.add(**step(2, envs=2), block=True, timeout=0.05),
    ):
        t0 = time.monotonic()
        with pytest.raises(rr.ReplayTimeout) as info:
            call()
        assert time.monotonic() - t0 < 2.0 and isinstance(info.value, TimeoutError)
        assert len(buf) == 4 and lim.stats.inserts == 4 and lim.stats.pending_inserts == 0
    buf.sample(3, timeout=0)  # diff 1
    with pytest.raises(rr.ReplayTimeout):
        buf.sample_sequences(2, 2, timeout=0.05)  # would leave diff -1 < 0
    assert lim.stats.samples == 3 and lim.stats.insert_timeouts == 4
    assert lim.stats.sample_timeouts == 2
    assert buf.rng.bit_generator.state != state  # the one granted sample drew
    np.testing.assert_array_equal(buf.add(**step(2, envs=2), timeout=0), [4, 5])


def test_block_and_limiter_share_one_timeout():
    # The limiter grants at once, the ring is full: add(block=True) then waits for room for
    # what is left of its timeout, and hands the grant back when that runs out.
    lim = rr.MinSize(1)
    buf = rr.ReplayBuffer(4, FIELDS, seed=0, rate_limiter=lim)
    buf.extend(**run(0, 4))
    t0 = time.monotonic()
    with pytest.raises(rr.ReplayTimeout):
        buf.add(**step(4), block=True, timeout=0.2)
    assert 0.15 < time.monotonic() - t0 < 2.0
    assert lim.stats.inserts == 4 and lim.stats.pending_inserts == 0
    buf.dequeue(2)
    assert lim.stats.size == 2 == buf.num_sampleable  # dequeue tells the limiter
    buf.add(**step(4), block=True, timeout=0)
    buf.clear()
    assert lim.stats.size == 0
    with pytest.raises(rr.ReplayTimeout):
        buf.sample(1, timeout=0)


def test_rejected_calls_are_never_granted():
    lim = rr.SampleToInsertRatio(1.0, 1, (0, 4))
    buf = rr.ReplayBuffer(32, FIELDS, seed=0, rate_limiter=lim)
    with pytest.raises(rr.FieldError):
        buf.add(obs=np.zeros(2, np.float32), reward=0.0, terminated=False, truncated=False)
    with pytest.raises(rr.ShapeError):
        buf.add(**{**step(0), "obs": np.zeros(3, np.float32)}, timeout=0)
    with pytest.raises(rr.InvalidIdError):
        buf.extend(**run(0, 2), env_id=5)
    assert lim.stats.inserts == 0 and lim.stats.pending_inserts == 0 and len(buf) == 0
    buf.add(**step(0))
    with pytest.raises(rr.ConfigError):
        buf.sample(0)  # an invalid batch size asks the limiter for nothing
    assert lim.stats.samples == 0


def test_a_failed_draw_hands_its_samples_back():
    # min_size_to_sample 0: samples are allowed before anything is sampleable.
    lim = rr.RateLimiter(1.0, 0, -1e9, 1e9)
    buf = rr.PrioritizedReplayBuffer(16, FIELDS, eps=0.0, seed=0, rate_limiter=lim)
    with pytest.raises(rr.EmptyBufferError):
        buf.sample(4, timeout=0)
    buf.add(**step(0, done=False))  # stored, not sampleable (its next step is unknown)
    with pytest.raises(rr.EmptyBufferError):
        buf.sample_sequences(2, 3, pad=False, timeout=0)
    assert lim.stats.samples == 0
    buf.add(**step(1))
    buf.update_priorities(np.arange(2), np.zeros(2))
    with pytest.raises(rr.EmptyBufferError, match="priority 0"):
        buf.sample(2)
    assert lim.stats.samples == 0 and lim.stats.inserts == 2


def test_close_wakes_waiting_adds_and_samples():
    lim = rr.SampleToInsertRatio(1.0, 3, (0, 3))
    buf = rr.ReplayBuffer(32, FIELDS, seed=0, rate_limiter=lim)
    sampled: list[object] = []
    samplers = [waiter(lambda: buf.sample(1, timeout=30), sampled) for _ in range(2)]
    buf.extend(**run(0, 3))  # free stage, diff 3: samples may go now, inserts may not
    for thread in samplers:
        thread.join(5)
    assert all(isinstance(b, rr.Batch) for b in sampled)  # diff 1
    buf.add(**step(3))  # diff 2
    buf.add(**step(4))  # diff 3
    added: list[object] = []
    writers = [waiter(lambda: buf.add(**step(9), timeout=30), added) for _ in range(2)]
    time.sleep(0.1)
    assert not added
    buf.close()
    for thread in writers:
        thread.join(5)
    assert len(added) == 2 and all(isinstance(e, rr.ReplayClosed) for e in added)
    assert lim.closed and lim.stats.pending_inserts == 0
    for call in (lambda: buf.sample(1, timeout=0), lambda: buf.add(**step(0), timeout=0)):
        with pytest.raises(rr.ReplayClosed):
            call()


def test_close_wakes_a_sampler_waiting_for_data():
    buf = rr.PrioritizedReplayBuffer(32, FIELDS, seed=0, rate_limiter=rr.MinSize(5))
    out: list[object] = []
    threads = [
        waiter(lambda: buf.sample(4, timeout=30), out),
        waiter(lambda: buf.sample_sequences(2, 3, timeout=None), out),
    ]
    time.sleep(0.1)
    buf.close()
    for thread in threads:
        thread.join(5)
    assert len(out) == 2 and all(isinstance(e, rr.ReplayClosed) for e in out)


@pytest.mark.parametrize("prioritized", [False, True])
def test_ratio_holds_over_a_long_random_run(prioritized):
    """A writer (vector steps, env subsets, runs) and a sampler (batches, sequences) race
    for 2 s; every snapshot either thread takes keeps ``diff = inserts * spi - samples`` in
    the band, once sampling started (below it) and once the free stage is over (above)."""
    spi, min_size, half, E, n_step = 2.0, 40, 24.0, 3, 2
    lim = rr.SampleToInsertRatio(spi, min_size, half)
    cls = rr.PrioritizedReplayBuffer if prioritized else rr.ReplayBuffer
    buf = cls(300, FIELDS, num_envs=E, n_step=n_step, seed=0, rate_limiter=lim)
    # Inserts are free while the sampleable count (which lags what is stored by at most
    # n_step steps per env) is below min_size: diff may then reach (min_size + lag) * spi.
    top = max(lim.max_diff, (min_size + E * n_step) * spi)
    inserted: list[int] = []
    sampled: list[int] = []
    bad: list[str] = []
    stop = time.monotonic() + 2.0

    def check(who: str) -> None:
        s = lim.stats
        diff = s.inserts * spi - s.samples
        if s.samples and diff < lim.min_diff:
            bad.append(f"{who}: diff {diff} < {lim.min_diff} ({s})")
        if diff > top:
            bad.append(f"{who}: diff {diff} > {top} ({s})")

    def writer() -> None:
        rng = np.random.default_rng(1)
        t = 0
        while time.monotonic() < stop:
            kind = rng.integers(3)
            try:
                if kind == 0:
                    ids = buf.add(**step(t, done=rng.random() < 0.1, envs=E), timeout=0.05)
                elif kind == 1:
                    envs = np.sort(rng.choice(E, size=rng.integers(1, E + 1), replace=False))
                    values = step(t, done=rng.random() < 0.1, envs=len(envs))
                    ids = buf.add(**values, env_ids=envs, timeout=0.05)
                else:
                    n = int(rng.integers(1, 5))
                    values = run(t, n)
                    values["terminated"] = rng.random(n) < 0.2
                    ids = buf.extend(**values, env_id=int(rng.integers(E)), timeout=0.05)
            except rr.ReplayTimeout:
                check("writer")
                continue
            inserted.append(len(ids))
            t += 1
            check("writer")

    def sampler() -> None:
        rng = np.random.default_rng(2)
        while time.monotonic() < stop:
            n = int(rng.integers(1, 9))
            try:
                if rng.random() < 0.7:
                    batch = buf.sample(n, timeout=0.05)
                else:
                    batch = buf.sample_sequences(n, 3, timeout=0.05)
            except rr.ReplayTimeout:
                check("sampler")
                continue
            assert batch.ids.shape == (n,)
            if prioritized:
                buf.update_priorities(batch.ids, rng.random(n) + 0.1)
            sampled.append(n)
            check("sampler")

    threads = [threading.Thread(target=writer), threading.Thread(target=sampler)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not bad, bad[:3]
    s = lim.stats
    assert (s.inserts, s.samples) == (sum(inserted), sum(sampled))
    assert s.pending_inserts == 0 and s.size == buf.num_sampleable
    assert s.inserts > 4 * min_size and s.samples > 4 * min_size  # both sides made progress
    assert s.insert_waits > 0 and s.sample_waits > 0  # and both were held back
    # The long-run ratio: samples / inserts = spi - diff / inserts, diff in [min_diff, top].
    ratio = s.samples / s.inserts
    assert spi - top / s.inserts - 1e-12 <= ratio <= spi - lim.min_diff / s.inserts + 1e-12


def test_checkpoints_keep_the_limiter(tmp_path):
    lim = rr.SampleToInsertRatio(2.0, 3, 8.0)
    buf = rr.PrioritizedReplayBuffer(32, FIELDS, seed=0, rate_limiter=lim)
    buf.extend(**run(0, 6))
    buf.sample(5)
    buf.save(tmp_path / "a.ckpt")
    same = rr.load(tmp_path / "a.ckpt")
    assert type(same.rate_limiter) is rr.SampleToInsertRatio
    assert same.rate_limiter.config() == lim.config() and same.rate_limiter is not lim
    assert (same.rate_limiter.stats.inserts, same.rate_limiter.stats.samples) == (6, 5)
    assert same.rate_limiter.stats.size == same.num_sampleable == 6
    assert same.rate_limiter.can_sample(1) == lim.can_sample(1)
    assert same.rate_limiter.can_insert(4) == lim.can_insert(4)
    assert "add" not in same.__dict__
    np.testing.assert_array_equal(same.sample(2).ids, buf.sample(2).ids)
    # The same parameters given again: the counters go on; others start afresh at the size.
    again = rr.load(tmp_path / "a.ckpt", rate_limiter=rr.SampleToInsertRatio(2.0, 3, 8.0))
    assert again.rate_limiter.stats.inserts == 6
    other = rr.load(tmp_path / "a.ckpt", rate_limiter=rr.MinSize(10))
    s = other.rate_limiter.stats
    assert (s.inserts, s.samples, s.size) == (0, 0, 6) and not other.rate_limiter.can_sample(1)
    free = rr.load(tmp_path / "a.ckpt", rate_limiter=None)
    assert free.rate_limiter is None and "add" in free.__dict__
    # A buffer without a limiter writes no limiter keys: its files are as before.
    plain = rr.ReplayBuffer(32, FIELDS, seed=0)
    assert "rate_limiter" not in plain.state_dict()["config"]
    assert "rate_limiter" not in plain.state_dict()["meta"]


def test_state_dict_round_trip_and_hostile_headers(tmp_path):
    buf = rr.ReplayBuffer(32, FIELDS, seed=0, rate_limiter=rr.MinSize(2))
    buf.extend(**run(0, 5))
    buf.sample(3)
    copy = rr.ReplayBuffer(32, FIELDS, seed=0, rate_limiter=rr.MinSize(2))
    copy.load_state_dict(buf.state_dict())
    assert copy.rate_limiter.stats == buf.rate_limiter.stats
    with pytest.raises(rr.CheckpointError):  # another limiter: another configuration
        rr.ReplayBuffer(32, FIELDS, seed=0, rate_limiter=rr.MinSize(3)).load_state_dict(
            buf.state_dict()
        )
    state = buf.state_dict()
    state["config"]["rate_limiter"] = {"class": "os.system", "min_size_to_sample": 1}
    with pytest.raises(rr.ConfigError):
        rr.RateLimiter.from_json(state["config"]["rate_limiter"])
    path = tmp_path / "b.ckpt"
    buf.save(path)
    raw = path.read_bytes()
    bad = raw.replace(b'"class": "MinSize"', b'"class": "Nonsense"', 1)
    assert bad != raw
    (tmp_path / "bad.ckpt").write_bytes(bad)
    with pytest.raises(rr.CheckpointError):
        rr.load(tmp_path / "bad.ckpt")


def test_one_limiter_per_buffer_and_argument_checks(tmp_path):
    lim = rr.MinSize(1)
    buf = rr.ReplayBuffer(16, FIELDS, rate_limiter=lim)
    with pytest.raises(rr.ConfigError, match="clone"):
        rr.ReplayBuffer(16, FIELDS, rate_limiter=lim)
    rr.ReplayBuffer(16, FIELDS, rate_limiter=lim.clone())  # its own counters: fine
    with pytest.raises(rr.ConfigError, match="RateLimiter"):
        rr.ReplayBuffer(16, FIELDS, rate_limiter=3)
    with pytest.raises(rr.ConfigError, match="num_envs \\* samples_per_insert = 12"):
        # 4 envs x spi 3 = 12 inserts' worth, in a band of 10: never granted past min size.
        rr.ReplayBuffer(16, FIELDS, num_envs=4, rate_limiter=rr.SampleToInsertRatio(3, 2, 5))
    rr.ReplayBuffer(16, FIELDS, num_envs=4, rate_limiter=rr.SampleToInsertRatio(3, 2, 6))
    with pytest.raises(rr.ConfigError, match="shared"):
        rr.ReplayBuffer(16, FIELDS, storage="shared", rate_limiter=rr.MinSize(1))
    del buf  # the limiter is free again once its buffer is gone
    import gc

    gc.collect()
    rr.ReplayBuffer(16, FIELDS, rate_limiter=lim)
    copy = pickle.loads(pickle.dumps(lim))  # a limiter travels without its owner
    rr.ReplayBuffer(16, FIELDS, rate_limiter=copy)
    with pytest.raises(rr.ConfigError):
        lim.cancel_sample(1)  # nothing sampled: nothing to hand back


def test_priority_mass_is_the_trees_and_the_shard_reads_it():
    alpha = 0.7
    buf = rr.PrioritizedReplayBuffer(64, FIELDS, num_envs=2, alpha=alpha, eps=0.0, seed=0)
    for t in range(20):
        buf.add(**step(t, done=t % 4 == 3, envs=2))
    rng = np.random.default_rng(0)
    ids = buf.sample(16).ids
    prios = rng.random(16) * 3
    prios[:2] = 0.0
    buf.update_priorities(ids, prios)
    first, end = buf.stored_range()
    every = np.concatenate(
        [np.arange(first[e], end[e]) * 2 + e for e in range(2)]
    )  # stored ids; the sampleable ones are those get_transitions accepts
    sampleable = []
    for i in every:
        try:
            buf.get_transitions([i])
            sampleable.append(i)
        except rr.InvalidIdError:
            pass
    masses = buf.get_priorities(sampleable) ** alpha
    got = buf.priority_mass()
    assert got.sampleable == len(sampleable) == buf.num_sampleable
    assert got.total == pytest.approx(masses.sum(), rel=1e-12)
    assert got.smallest == pytest.approx(masses[masses > 0].min(), rel=1e-12)
    empty = rr.PrioritizedReplayBuffer(8, FIELDS).priority_mass()
    assert empty == (0.0, float("inf"), 0)
    # The shard (plain Python: no Ray needed) answers with the same numbers.
    shard = Shard(64, FIELDS, 2, True, 0, {"alpha": alpha})
    shard.extend([(0, run(0, 5)), (1, run(5, 3))])
    count, total, smallest, error = shard.info()
    assert (count, total, smallest) == tuple(shard.buffer.priority_mass()[i] for i in (2, 0, 1))
    assert error is None
    layout, payload, total2, smallest2, error2 = shard.sample(4)
    assert (total2, smallest2, error2) == (total, smallest, None)
    assert unpack_columns(layout, payload)["ids"].shape == (4,)
    uniform = Shard(64, FIELDS, 2, False, 0, {})
    uniform.extend([(0, run(0, 5))])
    assert uniform.info() == (5, 5.0, 1.0, None)
    buf.close()
    with pytest.raises(rr.ReplayClosed):
        buf.priority_mass()


def test_limiter_json_round_trip_and_cancel_sample():
    for lim in (rr.MinSize(3), rr.SampleToInsertRatio(2.0, 4, 6.0), rr.RateLimiter(1.5, 0, -2, 9)):
        back = rr.RateLimiter.from_json(json.loads(json.dumps(lim.to_json())))
        assert type(back) is type(lim) and back.config() == lim.config()
    for bad in (
        {"class": "MinSize", "samples_per_insert": 1.0},  # parameters missing
        {**rr.MinSize(2).to_json(), "min_size_to_sample": "2"},  # not an int
        {**rr.MinSize(2).to_json(), "extra": 1},
        [("class", "MinSize")],
    ):
        with pytest.raises(rr.ConfigError):
            rr.RateLimiter.from_json(bad)
    lim = rr.SampleToInsertRatio(1.0, 1, (0, 4))
    lim.await_insert(2, timeout=0)
    lim.commit_insert(2, 2)
    lim.await_sample(2, timeout=0)
    assert not lim.can_sample(1)
    lim.cancel_sample(1)
    assert lim.can_sample(1) and lim.stats.samples == 1
