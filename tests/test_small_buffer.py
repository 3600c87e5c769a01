"""The small-buffer regime (issue 17): one-kernel uniform sampling, ``sample(out=...)``, and
the per-step fast path for NumPy scalars.

The one-kernel sampler must give exactly the general path's batch for the same generator
state (the general path itself is tested against slow references elsewhere); here twin
buffers with one seed are compared, one of them forced onto the general path, over random
schemas and fills (Hypothesis), plus a direct slow reference for the plain case.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlreplay as rr
from rlreplay.errors import DTypeError, EmptyBufferError
from rlreplay.sampling.onecall import FastSampler

Array = np.ndarray[Any, Any]


def _general_only(buf: rr.ReplayBuffer) -> rr.ReplayBuffer:
    """Make ``buf`` answer every sample through the general path (before its first sample)."""
    fs = FastSampler(
        buf._cols, buf._index, frame_stack=buf.frame_stack, zero_pad=buf.stack_pad == "zero",
        next_fields=buf.next_fields, n_step=buf.n_step, gamma=buf.gamma,
    )  # fmt: skip
    fs.eligible = False
    buf._draws.fast_uniform = fs
    return buf


def _fill(buf: rr.ReplayBuffer, steps: int, seed: int, end_p: float, trunc_p: float) -> None:
    rng = np.random.default_rng(seed)
    E = buf.num_envs
    lead = () if E == 1 else (E,)
    f = buf.schema.fields["obs"]
    for _ in range(steps):

        def obs() -> Array:
            return (rng.random(lead + f.shape) * 200).astype(f.dtype)

        term = rng.random(lead) < end_p
        trunc = rng.random(lead) < trunc_p
        extra: dict[str, Any] = {}
        if "extra" in buf.schema.fields:
            extra["extra"] = rng.random((*lead, 2))
        if "action" in buf.schema.fields:
            extra["action"] = rng.integers(0, 6, lead)
        reward = rng.random(lead) * 4 - 2
        reward = np.where(rng.random(lead) < 0.1, -0.0, reward)  # signed zeros stay as stored
        buf.add(
            obs=obs(), reward=reward.astype(buf.schema.fields["reward"].dtype), terminated=term,
            truncated=trunc, next_obs=obs(), **extra,
        )  # fmt: skip


def _equal(a: rr.Batch, b: rr.Batch) -> None:
    assert list(a) == list(b)
    for key in a:
        assert a[key].dtype == b[key].dtype, key
        assert a[key].shape == b[key].shape, key
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
        if a[key].dtype.kind == "f":  # bit for bit: -0.0 and 0.0 too
            np.testing.assert_array_equal(np.signbit(a[key]), np.signbit(b[key]), err_msg=key)


def _twins(**kw: Any) -> tuple[rr.ReplayBuffer, rr.ReplayBuffer]:
    return rr.ReplayBuffer(seed=7, **kw), _general_only(rr.ReplayBuffer(seed=7, **kw))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    capacity=st.integers(8, 80),
    num_envs=st.sampled_from([1, 1, 2, 3]),
    n_step=st.integers(1, 4),
    gamma=st.floats(0.5, 1.0),
    frame_stack=st.sampled_from([1, 1, 2, 4]),
    stack_pad=st.sampled_from(["zero", "first"]),
    # Each layout compiles the kernel once (Numba caches it on disk): a few, not all combos.
    layout=st.sampled_from(
        [
            ((4,), np.float32, False, False),
            ((3, 5), np.uint8, False, False),
            ((), np.float32, True, True),
            ((4,), np.float32, True, False),
        ]
    ),
    steps=st.integers(0, 150),
    end_p=st.sampled_from([0.0, 0.05, 0.3]),
    trunc_p=st.sampled_from([0.0, 0.1]),
    batch=st.sampled_from([1, 7, 32]),
    seed=st.integers(0, 2**16),
    reward_dtype=st.sampled_from([np.float32, np.float64]),
)
def test_one_kernel_batches_equal_the_general_paths(
    capacity: int, num_envs: int, n_step: int, gamma: float, frame_stack: int, stack_pad: str,
    layout: tuple[tuple[int, ...], Any, bool, bool], steps: int, end_p: float, trunc_p: float,
    batch: int, seed: int, reward_dtype: Any,
) -> None:  # fmt: skip
    obs_shape, obs_dtype, extra, next_action = layout
    fields: dict[str, Any] = {
        "obs": rr.Field(obs_shape, obs_dtype),
        "action": rr.Field((), np.int64),
        "reward": rr.Field((), reward_dtype),
    }
    if extra:
        fields["extra"] = rr.Field((2,), np.float64)
    kw = dict(
        capacity=capacity * num_envs, fields=fields, num_envs=num_envs, n_step=n_step,
        gamma=gamma, frame_stack=frame_stack, stack_pad=stack_pad,
        next_fields=("action",) if next_action else (),
    )  # fmt: skip
    fast, general = _twins(**kw)
    _fill(fast, steps, seed, end_p, trunc_p)
    _fill(general, steps, seed, end_p, trunc_p)
    for _ in range(3):
        try:
            expected = general.sample(batch)
        except EmptyBufferError:
            with pytest.raises(EmptyBufferError):
                fast.sample(batch)
            continue
        got = fast.sample(batch)
        _equal(got, expected)
    assert fast._draws.fast_uniform.eligible


def test_the_plain_case_against_a_slow_reference() -> None:
    buf = rr.ReplayBuffer(50, {"obs": rr.Field((4,), np.float32), "action": rr.Field((), np.int64)},
                          seed=3, gamma=0.9)  # fmt: skip
    _fill(buf, 120, seed=1, end_p=0.1, trunc_p=0.05)
    # The reference: every stored transition, by id, through get_transitions (general path).
    b = buf.sample(64)
    ref = buf.get_transitions(b.ids)
    for key in ref:
        if key != "env_ids":
            np.testing.assert_array_equal(b[key], ref[key], err_msg=key)
    assert np.all(b.weights == 1.0)
    # Uniform: the draw is the same rng.random stream the general path maps to positions.
    rng = np.random.default_rng(3)
    lo = int(buf._index.env[0, 3])
    total = buf.num_sampleable
    pos = np.minimum((rng.random(64) * total).astype(np.int64), total - 1)
    np.testing.assert_array_equal(b.ids, pos + lo)


def test_memmap_storage_and_growing_final_records(tmp_path: Any) -> None:
    kw = dict(capacity=60, fields={"obs": rr.Field((3,), np.float32)}, storage="memmap")
    fast = rr.ReplayBuffer(seed=2, path=tmp_path / "a", **kw)
    general = _general_only(rr.ReplayBuffer(seed=2, path=tmp_path / "b", **kw))
    for rounds in range(3):  # many episode ends: the final records grow between samples
        _fill(fast, 40, seed=rounds, end_p=0.5, trunc_p=0.0)
        _fill(general, 40, seed=rounds, end_p=0.5, trunc_p=0.0)
        _equal(fast.sample(16), general.sample(16))


def test_an_empty_buffer_raises_and_draws_nothing() -> None:
    fast, general = _twins(capacity=10, fields={"obs": rr.Field((2,), np.float32)})
    for buf in (fast, general):
        with pytest.raises(EmptyBufferError):
            buf.sample(4)
        _fill(buf, 5, seed=0, end_p=0.0, trunc_p=0.0)
    _equal(fast.sample(8), general.sample(8))


def test_batches_without_out_share_nothing() -> None:
    buf = rr.ReplayBuffer(100, {"obs": rr.Field((4,), np.float32)}, seed=0)
    _fill(buf, 50, seed=0, end_p=0.1, trunc_p=0.0)
    first = buf.sample(16)
    kept = {k: v.copy() for k, v in first.items()}
    second = buf.sample(16)
    for key in first:
        np.testing.assert_array_equal(first[key], kept[key])  # untouched by the later call
        for other in second.values():
            assert not np.shares_memory(first[key], other)
    for key, arr in first.items():
        for col in (*buf._cols.steps.values(), *buf._cols.finals.values()):
            assert not np.shares_memory(arr, col), key


def test_out_fills_the_given_batch_in_place() -> None:
    kw = dict(capacity=100, fields={"obs": rr.Field((4,), np.float32)}, n_step=2)
    buf, twin = rr.ReplayBuffer(seed=5, **kw), rr.ReplayBuffer(seed=5, **kw)
    for b in (buf, twin):
        _fill(b, 80, seed=0, end_p=0.1, trunc_p=0.05)
    out = buf.sample(32)
    _equal(out, twin.sample(32))
    arrays = {k: v for k, v in out.items()}
    for _ in range(3):
        got = buf.sample(32, out=out)
        assert got is out
        assert all(got[k] is arrays[k] for k in arrays)  # the same arrays, overwritten
        _equal(got, twin.sample(32))
    kept = {k: v.copy() for k, v in out.items()}
    fresh = buf.sample(32)  # without out=: the reused batch is left alone
    assert all(not np.shares_memory(fresh[k], arrays[k]) for k in arrays)
    for key in kept:
        np.testing.assert_array_equal(out[key], kept[key])


def test_out_also_works_on_the_general_path() -> None:
    kw = dict(capacity=100, fields={"obs": rr.Field((4,), np.float32)})
    buf, twin = rr.ReplayBuffer(seed=5, **kw), rr.ReplayBuffer(seed=5, **kw)
    for b in (buf, twin):
        _fill(b, 80, seed=0, end_p=0.1, trunc_p=0.0)
    out = buf.sample(8)
    twin.sample(8)
    got = buf.sample(8, out=out, recent_ratio=0.5)  # a recency mix: the general path
    assert got is out
    _equal(got, twin.sample(8, recent_ratio=0.5))


def test_a_wrong_out_batch_is_refused_before_anything_is_written() -> None:
    buf = rr.ReplayBuffer(100, {"obs": rr.Field((4,), np.float32)}, seed=0)
    _fill(buf, 50, seed=0, end_p=0.1, trunc_p=0.0)
    good = buf.sample(8)
    with pytest.raises(ValueError, match="keys"):
        buf.sample(8, out=rr.Batch(obs=good.obs))
    with pytest.raises(ValueError, match="obs must be"):
        buf.sample(4, out=good)  # another batch size
    with pytest.raises(ValueError, match="reward must be"):
        buf.sample(8, out=good.replace(reward=np.zeros(8, np.float64)))
    readonly = good.obs.copy()
    readonly.flags.writeable = False
    with pytest.raises(ValueError, match="writable"):
        buf.sample(8, out=good.replace(obs=readonly))
    with pytest.raises(ValueError, match="shares memory"):
        buf.sample(8, out=good.replace(next_obs=good.obs))
    with pytest.raises(ValueError, match="shares memory"):
        buf.sample(8, out=good.replace(obs=buf._cols.steps["obs"][:8]))
    assert buf.sample(8, out=good) is good


def test_a_checked_out_batch_whose_array_changed_shape_is_refused() -> None:
    buf = rr.ReplayBuffer(100, {"obs": rr.Field((4,), np.float32)}, seed=0)
    _fill(buf, 50, seed=0, end_p=0.1, trunc_p=0.0)
    out = buf.sample(8)
    buf.sample(8, out=out)
    # In place, behind the check's back (same number of axes; resize, as NumPy 2.5 deprecates
    # setting .shape).
    out.next_obs.resize((4, 8), refcheck=False)
    with pytest.raises(ValueError, match="shape changed"):
        buf.sample(8, out=out)


def test_prioritized_buffers_keep_their_own_draw() -> None:
    buf = rr.PrioritizedReplayBuffer(64, {"obs": rr.Field((2,), np.float32)}, seed=0)
    _fill(buf, 40, seed=0, end_p=0.1, trunc_p=0.0)
    batch = buf.sample(16)
    # the uniform kernel never draws for it: only the prioritized one was planned
    assert buf._draws.fast_uniform is None and buf._draws.fast_prio is not None
    assert batch.weights.dtype == np.float32 and "probabilities" in batch


# ---------------------------------------------------------------------- add, NumPy scalars
def _no_general_path(buf: rr.ReplayBuffer, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the general path was taken")

    monkeypatch.setattr(buf._writer, "prepare_step", refuse)


@pytest.mark.parametrize(
    ("action", "reward", "flag"),
    [
        (np.int64(3), np.float32(0.5), np.bool_(False)),
        (np.int32(3), np.float64(0.5), np.bool_(False)),
        (np.uint8(3), np.float16(0.5), False),
        (np.int16(3), np.int64(2), np.bool_(False)),
    ],
)
def test_numpy_scalars_take_the_fast_path(
    action: Any, reward: Any, flag: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    buf = rr.ReplayBuffer(10, {"obs": rr.Field((2,), np.float32), "action": rr.Field((), np.int64)})
    ref = rr.ReplayBuffer(10, {"obs": rr.Field((2,), np.float32), "action": rr.Field((), np.int64)})
    o = np.ones(2, np.float32)
    _no_general_path(buf, monkeypatch)
    buf.add(obs=o, action=action, reward=reward, terminated=flag, truncated=flag, next_obs=o)
    ref.add(obs=o, action=int(action), reward=float(reward), terminated=bool(flag),
            truncated=bool(flag), next_obs=o)  # fmt: skip
    for name, col in buf._cols.steps.items():
        np.testing.assert_array_equal(col[0], ref._cols.steps[name][0], err_msg=name)


def test_numpy_scalars_that_do_not_fit_get_the_general_paths_errors() -> None:
    buf = rr.ReplayBuffer(10, {"obs": rr.Field((2,), np.float32), "action": rr.Field((), np.int8)})
    o = np.ones(2, np.float32)
    with pytest.raises(DTypeError):
        buf.add(obs=o, action=np.int64(300), reward=0.0, terminated=False, truncated=False)
    with pytest.raises(DTypeError):
        buf.add(obs=o, action=np.float64(1.0), reward=0.0, terminated=False, truncated=False)
    with pytest.raises(DTypeError):
        buf.add(obs=o, action=1, reward=np.float64(1e300), terminated=False, truncated=False)
    assert len(buf) == 0
    buf.add(obs=o, action=np.int64(-128), reward=np.float64(np.nan), terminated=np.bool_(False),
            truncated=False)  # fmt: skip
    assert buf._cols.steps["action"][0] == -128 and np.isnan(buf._cols.steps["reward"][0])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    num_envs=st.sampled_from([1, 2]),
    n_step=st.integers(1, 4),
    gamma=st.floats(0.5, 1.0),
    frame_stack=st.sampled_from([1, 3]),
    reward_dtype=st.sampled_from([np.float32, np.float64]),
    steps=st.integers(1, 120),
    end_p=st.sampled_from([0.0, 0.05, 0.3]),
    seed=st.integers(0, 2**16),
)
def test_get_transitions_window_kernel_equals_the_numpy_windows(
    num_envs: int, n_step: int, gamma: float, frame_stack: int, reward_dtype: Any, steps: int,
    end_p: float, seed: int,
) -> None:  # fmt: skip
    """``get_transitions``' one-kernel n-step windows (float32 and float64 rewards) against
    :func:`rlreplay.assemble.transitions.nstep_window`, bit for bit."""
    import rlreplay.assemble.transitions as assemble

    buf = rr.ReplayBuffer(
        40 * num_envs, {"obs": rr.Field((3,), np.float32), "reward": rr.Field((), reward_dtype)},
        num_envs=num_envs, n_step=n_step, gamma=gamma, frame_stack=frame_stack,
    )  # fmt: skip
    _fill(buf, steps, seed, end_p, 0.1)
    ids = buf.sampleable_ids()
    if not ids.size:
        return
    ids = np.random.default_rng(seed).permutation(ids)
    fast = buf.get_transitions(ids)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(assemble, "_fast_windows", lambda *args: None)
        slow = buf.get_transitions(ids)
    _equal(fast, slow)
    assert fast.reward.dtype == reward_dtype
