"""Rate limiters on the device buffers: the core's counters (inserts, samples, waits, timeouts)
for the same calls, the size counted on the host (rlreplay.torch.pacing), refused calls that
raise at once and change nothing, and limiters carried through conversions and checkpoints."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlreplay as rr
import rlreplay.torch as rrt
from tests.torch_buffer.helpers import make, on, random_step

Array = np.ndarray[Any, Any]


def counters(lim: rr.RateLimiter) -> dict[str, Any]:
    """The limiter's stats but the seconds blocked (a wall-clock measure)."""
    stats = dataclasses.asdict(lim.stats)
    return {k: v for k, v in stats.items() if not k.endswith("_blocked_s")}


def outcome(call: Any) -> str:
    """What a call did: ``"ok"`` or the name of the rlreplay error it raised."""
    try:
        call()
    except rr.ReplayError as exc:
        return type(exc).__name__
    return "ok"


def host_size(buf: rrt.DeviceReplayBuffer) -> int:
    """The size the module docstring defines, from what the buffer stores."""
    first, end = buf.stored_range()
    held = end - first
    return int(np.maximum(held - buf.n_step, 0).sum())


limiters = st.one_of(
    st.builds(lambda m: rr.MinSize(m), st.integers(1, 12)),
    st.builds(
        lambda spi, m, eb: rr.SampleToInsertRatio(spi, m, eb),
        st.sampled_from([0.5, 1.0, 2.0, 4.0]),
        st.integers(1, 10),
        st.sampled_from([8.0, 16.0, 40.0]),
    ),
)
op = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 3)),
    st.tuples(st.just("add"), st.integers(0, 3)),
    st.tuples(st.just("subset"), st.integers(0, 2**16)),
    st.tuples(st.just("sample"), st.integers(1, 6)),
    st.tuples(st.just("sequences"), st.integers(1, 4)),
    st.tuples(st.just("dequeue"), st.integers(1, 3)),
    st.tuples(st.just("clear"), st.just(0)),
)


@settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(
    limiter=limiters,
    script=st.lists(op, min_size=1, max_size=40),
    n_step=st.integers(1, 3),
    prioritized=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_the_counters_are_the_cores_for_the_same_calls(
    limiter: rr.RateLimiter, script: list[tuple[str, int]], n_step: int, prioritized: bool,
    seed: int,
) -> None:  # fmt: skip
    """No episode ends (the host count is then the core's sampleable count): after every call
    both buffers' limiters hold the same counters, and each call succeeds or is refused alike
    (the core with ``timeout=0``)."""
    E = 2
    buf = make("cpu", capacity=16, num_envs=E, n_step=n_step, prioritized=prioritized,
               rate_limiter=limiter.clone(), seed=seed)  # fmt: skip
    core = rr.ReplayBuffer if not prioritized else rr.PrioritizedReplayBuffer
    np_buf = core(buf.capacity, dict(buf.config.schema.fields), rate_limiter=limiter.clone(),
                  **buf.config.core_kwargs())  # fmt: skip
    dev_lim, np_lim = buf.rate_limiter, np_buf.rate_limiter
    assert dev_lim is not None and np_lim is not None
    rng = np.random.default_rng(seed)
    for name, arg in script:
        got, want = both(buf, np_buf, name, arg, rng)
        assert got == want, (name, arg)
        assert counters(dev_lim) == counters(np_lim), (name, arg)
        assert int(buf.num_sampleable) == np_buf.num_sampleable


def both(
    buf: rrt.DeviceReplayBuffer, np_buf: rr.ReplayBuffer, name: str, arg: int,
    rng: np.random.Generator,
) -> tuple[str, str]:  # fmt: skip
    """One call on both buffers (the core's with ``timeout=0``): what each did."""
    E = buf.num_envs
    if name in ("add", "subset"):
        step = random_step(rng, E, p_end=0.0, p_trunc=0.0)
        if name == "subset":
            envs = np.random.default_rng(arg).permutation(E)[: 1 + arg % E]
            step = {k: v[envs] for k, v in step.items()}
            return (
                outcome(lambda: buf.add(env_ids=envs, **step)),
                outcome(lambda: np_buf.add(env_ids=envs, timeout=0, **step)),
            )
        return (
            outcome(lambda: buf.add(**on(step, "cpu"))),
            outcome(lambda: np_buf.add(timeout=0, **step)),
        )
    if name == "sample":
        return outcome(lambda: buf.sample(arg)), outcome(lambda: np_buf.sample(arg, timeout=0))
    if name == "sequences":
        return (
            outcome(lambda: buf.sample_sequences(arg, 2)),
            outcome(lambda: np_buf.sample_sequences(arg, 2, timeout=0)),
        )
    if name == "dequeue":
        return outcome(lambda: buf.dequeue(arg, [0])), outcome(lambda: np_buf.dequeue(arg, [0]))
    buf.clear()
    np_buf.clear()
    return "ok", "ok"


@settings(deadline=None, max_examples=30, suppress_health_check=[HealthCheck.too_slow])
@given(
    n_step=st.integers(1, 3),
    script=st.lists(
        st.sampled_from(["add", "add", "add", "subset", "dequeue", "clear"]), max_size=40
    ),
    seed=st.integers(0, 2**16),
)
def test_with_episode_ends_the_size_counts_the_windows_known_by_count(
    n_step: int, script: list[str], seed: int
) -> None:
    """With episode ends the size is ``sum_e max(0, held_e - n_step)``: at most the sampleable
    count, and at most ``n_step`` per env below it (no frame stack, no episode dropped)."""
    E = 3
    buf = make("cpu", capacity=24, num_envs=E, n_step=n_step, finals_per_env=8,
               rate_limiter=rr.MinSize(1), seed=seed)  # fmt: skip
    lim = buf.rate_limiter
    assert lim is not None
    rng = np.random.default_rng(seed)
    for name in script:
        if name == "add":
            buf.add(**on(random_step(rng, E, p_end=0.3), "cpu"))
        elif name == "subset":
            envs = rng.permutation(E)[: rng.integers(1, E + 1)]
            step = {k: v[envs] for k, v in random_step(rng, E, p_end=0.3).items()}
            buf.add(env_ids=envs, **on(step, "cpu"))
        elif name == "dequeue":
            outcome(lambda: buf.dequeue(1, [int(rng.integers(E))]))
        else:
            buf.clear()
        size = lim.stats.size
        assert size == host_size(buf)
        assert size <= int(buf.num_sampleable) <= size + E * n_step


def test_device_env_ids_count_the_envs_together() -> None:
    """An add naming its envs by a device tensor inserts ``len(env_ids)`` (a shape); from then
    on the envs are counted together, until a dequeue reads them again."""
    E, n = 4, 2
    buf = make("cpu", capacity=32, num_envs=E, n_step=n, rate_limiter=rr.MinSize(1))
    lim = buf.rate_limiter
    assert lim is not None
    rng = np.random.default_rng(0)
    envs = torch.tensor([2, 0])
    for _ in range(3):
        step = {k: v[:2] for k, v in random_step(rng, E, p_end=0.0, p_trunc=0.0).items()}
        buf.add(env_ids=envs, **on(step, "cpu"))
    assert lim.stats.inserts == 6
    assert lim.stats.size == max(0, 6 - E * n)  # rows held, less n_step per env
    for _ in range(4):
        buf.add(**on(random_step(rng, E, p_end=0.0, p_trunc=0.0), "cpu"))
    assert lim.stats.size == 22 - E * n
    buf.dequeue(1, [1])  # reads each env's count: per env again
    assert lim.stats.size == host_size(buf) == int(buf.num_sampleable)


def test_refused_calls_raise_at_once_and_change_nothing() -> None:
    E = 2
    lim = rr.SampleToInsertRatio(samples_per_insert=1.0, min_size_to_sample=2, error_buffer=4.0)
    buf = make("cpu", capacity=16, num_envs=E, rate_limiter=lim)
    rng = np.random.default_rng(0)
    step = on(random_step(rng, E, p_end=0.0, p_trunc=0.0), "cpu")
    with pytest.raises(rr.ReplayTimeout, match="does not wait"):
        buf.sample(1, timeout=30.0)  # nothing inserted: refused at once, not after 30 s
    assert lim.stats.sample_timeouts == 1 and lim.stats.samples == 0
    before = buf.steps_added
    inserted = 0
    while True:
        try:
            buf.add(**step)
        except rr.ReplayTimeout as exc:
            assert "add: the rate limiter does not allow 2 inserts now" in str(exc)
            break
        inserted += E
    assert lim.stats.inserts == inserted and lim.stats.insert_timeouts == 1
    assert buf.steps_added == before + inserted // E
    assert lim.stats.pending_inserts == 0
    buf.sample(2)  # pays for more inserts
    buf.add(**step)
    with pytest.raises(rr.ConfigError, match="timeout"):
        buf.add(timeout=-1.0, **step)
    with pytest.raises(rr.ConfigError, match="timeout"):
        buf.sample(1, timeout=float("nan"))
    with pytest.raises(rr.ConfigError, match="batch of 100"):
        buf.sample(100)  # wider than the limiter's band, as the core refuses it
    assert lim.stats.samples == 2


def test_a_rejected_add_asks_the_limiter_for_nothing() -> None:
    lim = rr.MinSize(1)
    buf = make("cpu", capacity=16, num_envs=2, rate_limiter=lim)
    step = on(random_step(np.random.default_rng(0), 2), "cpu")
    with pytest.raises(rr.ShapeError):
        buf.add(**{**step, "reward": torch.zeros(3)})
    with pytest.raises(rr.FieldError):
        buf.add(**{k: v for k, v in step.items() if k != "reward"})
    assert lim.stats.inserts == 0 and lim.stats.pending_inserts == 0


def test_an_empty_check_hands_the_sample_back() -> None:
    lim = rr.RateLimiter(1.0, 0, -100.0, 100.0)  # min_size 0: samples allowed at once
    buf = make("cpu", capacity=16, num_envs=2, rate_limiter=lim)
    with pytest.raises(rr.EmptyBufferError):
        buf.sample(4, check=True)
    assert lim.stats.samples == 0


def test_bad_limiters_are_refused_by_name() -> None:
    with pytest.raises(rr.ConfigError, match=r"rate_limiter: expected None or an rr\.RateLimiter"):
        make("cpu", capacity=16, num_envs=2, rate_limiter="fast")  # type: ignore[arg-type]
    narrow = rr.SampleToInsertRatio(samples_per_insert=1.0, min_size_to_sample=2, error_buffer=2)
    with pytest.raises(rr.ConfigError, match="a step of all 8 envs"):
        make("cpu", capacity=32, num_envs=8, rate_limiter=narrow)
    lim = rr.MinSize(2)
    kept = make("cpu", capacity=16, num_envs=2, rate_limiter=lim)
    with pytest.raises(rr.ConfigError, match="already limits"):
        rr.ReplayBuffer(16, {"obs": rr.Field((), np.float32)}, rate_limiter=lim)
    assert kept.rate_limiter is lim


def test_the_core_constructor_routes_a_limiter() -> None:
    lim = rr.MinSize(3)
    buf = rr.PrioritizedReplayBuffer(
        16, {"obs": rr.Field((), np.float32)}, storage="torch", rate_limiter=lim
    )
    assert isinstance(buf, rrt.DevicePrioritizedReplayBuffer) and buf.rate_limiter is lim


@pytest.mark.parametrize("prioritized", [False, True])
def test_conversions_and_checkpoints_carry_the_limiter(tmp_path: Path, prioritized: bool) -> None:
    lim = rr.SampleToInsertRatio(samples_per_insert=2.0, min_size_to_sample=4, error_buffer=20.0)
    buf = make("cpu", capacity=16, num_envs=2, prioritized=prioritized, rate_limiter=lim)
    rng = np.random.default_rng(0)
    for _ in range(5):
        buf.add(**on(random_step(rng, 2, p_end=0.0, p_trunc=0.0), "cpu"))
    buf.sample(3)
    np_buf = buf.to_replay_buffer()
    assert np_buf.rate_limiter is not None and np_buf.rate_limiter is not lim
    assert np_buf.rate_limiter.config() == lim.config()
    assert counters(np_buf.rate_limiter) == counters(lim)
    back = rrt.from_replay_buffer(np_buf)
    assert back.rate_limiter is not None and counters(back.rate_limiter) == counters(lim)
    buf.save(tmp_path / "b.rr")
    loaded = rrt.load(tmp_path / "b.rr")
    assert loaded.rate_limiter is not None and counters(loaded.rate_limiter) == counters(lim)
    assert type(loaded.rate_limiter) is type(lim)
    step = random_step(rng, 2, p_end=0.0, p_trunc=0.0)
    assert outcome(lambda: loaded.add(**on(step, "cpu"))) == outcome(
        lambda: numpy_add_limited(rr.load(tmp_path / "b.rr"), step)
    )


def numpy_add_limited(np_buf: rr.ReplayBuffer, step: dict[str, Array]) -> None:
    np_buf.add(timeout=0, **step)


def test_no_limiter_is_the_plain_buffer() -> None:
    buf = make("cpu", capacity=16, num_envs=2)
    assert buf.rate_limiter is None
    buf.add(**on(random_step(np.random.default_rng(0), 2), "cpu"), timeout=0.5)
    with pytest.raises(rr.ConfigError, match="timeout"):
        buf.sample(1, timeout=-1)
