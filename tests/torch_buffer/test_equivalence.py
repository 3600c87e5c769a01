"""The device buffer holds what the NumPy core holds for the same stream of steps: the same
sampleable ids and, for every one, the same transition bit for bit (n-step rewards and
discounts, next and final observations, terminated vs truncated, frame stacks with either
padding, next_fields), through episode ends, truncations, wraparound, several envs, dropped
episodes and clear()."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import rlreplay as rr
import rlreplay.torch as rrt
from tests.torch_buffer.helpers import (
    Twins,
    assert_bit_identical,
    assert_same_contents,
    host,
    make,
    random_step,
)

CONFIGS: dict[str, dict[str, Any]] = {
    "3-step, 2 envs": dict(capacity=16, num_envs=2, n_step=3, finals_per_env=8),
    "2-step, 3 envs, stack 3 zero": dict(
        capacity=18, num_envs=3, n_step=2, frame_stack=3, finals_per_env=6
    ),
    "1-step, 1 env, stack 2 first": dict(
        capacity=12, num_envs=1, frame_stack=2, stack_pad="first", finals_per_env=12
    ),
    "3-step, 2 envs, stack 2 first, next_fields": dict(
        capacity=20,
        num_envs=2,
        n_step=3,
        frame_stack=2,
        stack_pad="first",
        next_fields=("action",),
        finals_per_env=10,
    ),
    "prioritized, 3-step, stack 2": dict(
        capacity=20, num_envs=2, n_step=3, frame_stack=2, prioritized=True
    ),
}


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("p_end", [0.05, 0.35])
def test_same_stream_same_transitions(device: str, name: str, p_end: float) -> None:
    buf = make(device, **CONFIGS[name])
    rng = np.random.default_rng(len(name) + int(100 * p_end))
    tw = Twins(buf, tensors=p_end < 0.1)  # device tensors in, or NumPy arrays in
    for i in range(40):  # past two wraparounds of every ring
        tw.add(random_step(rng, buf.num_envs, p_end=p_end, p_trunc=0.1))
        if i % 3 == 2:
            assert_same_contents(tw)
        if i == 25:
            tw.clear()
            assert_same_contents(tw)
    assert tw.dropped == 0  # finals_per_env = C: nothing dropped


@pytest.mark.parametrize("frame_stack", [1, 3])
def test_dropped_episodes_match_a_dequeued_core_buffer(device: str, frame_stack: int) -> None:
    """With few final records per env, short episodes push the oldest ones out whole, as
    ``dequeue`` drops them from the NumPy buffer; everything else stays identical."""
    buf = make(device, capacity=24, num_envs=2, n_step=2, frame_stack=frame_stack,
               finals_per_env=2)  # fmt: skip
    rng = np.random.default_rng(frame_stack)
    tw = Twins(buf)
    for i in range(50):
        tw.add(random_step(rng, 2, p_end=0.3, p_trunc=0.1))
        if i % 2:
            assert_same_contents(tw)
    assert tw.dropped > 0


def test_golden_three_step_windows(device: str) -> None:
    """One env, episodes [0..3] terminated and [4..6] truncated; values by hand."""
    buf = make(device, capacity=16, num_envs=1, n_step=3)
    ends = {3: "terminated", 6: "truncated"}
    for t in range(9):
        buf.add(
            obs=np.full(2, t, np.float32), action=t, reward=2.0**t,
            terminated=ends.get(t) == "terminated", truncated=ends.get(t) == "truncated",
            next_obs=np.full(2, 100 + t, np.float32),
        )  # fmt: skip
    assert buf.sampleable(np.arange(9)).tolist() == [True] * 7 + [False] * 2
    b = host(buf.get_transitions(np.arange(7)))
    g = np.float32(0.9)
    assert b["steps"].tolist() == [3, 3, 2, 1, 3, 2, 1]
    np.testing.assert_allclose(b["reward"][0], 1 + 2 * g + 4 * g * g, rtol=1e-6)
    np.testing.assert_allclose(b["reward"][3], 8.0)
    assert b["terminated"].tolist() == [False, True, True, True, False, False, False]
    assert b["truncated"].tolist() == [False, False, False, False, True, True, True]
    assert b["next_obs"][:, 0].tolist() == [3, 103, 103, 103, 106, 106, 106]
    want = np.array([g**3, 0, 0, 0, g**3, g**2, g], np.float32)
    np.testing.assert_allclose(b["discount"], want, rtol=1e-6)
    assert b["ids"].tolist() == list(range(7))


def test_vector_float64_reward_sums_like_the_core(device: str) -> None:
    """A float64 reward of shape (2,) takes the core's general path."""
    fields = {"obs": rr.Field((1,), np.float32), "reward": rr.Field((2,), np.float64)}
    buf = rrt.DeviceReplayBuffer(
        24, fields, num_envs=2, n_step=3, gamma=0.97, device=device, finals_per_env=12
    )
    np_buf = rr.ReplayBuffer(24, fields, num_envs=2, n_step=3, gamma=0.97)
    rng = np.random.default_rng(5)
    for _ in range(30):
        step = {
            "obs": rng.standard_normal((2, 1)).astype(np.float32),
            "reward": rng.standard_normal((2, 2)),
            "terminated": rng.random(2) < 0.2,
            "truncated": rng.random(2) < 0.1,
            "next_obs": rng.standard_normal((2, 1)).astype(np.float32),
        }
        buf.add(**step)
        np_buf.add(**step)
    ids = np_buf.sampleable_ids()
    assert_bit_identical(host(buf.get_transitions(ids)), dict(np_buf.get_transitions(ids)))


def test_sampled_batches_are_their_transitions(device: str) -> None:
    buf = make(device, **CONFIGS["2-step, 3 envs, stack 3 zero"])
    rng = np.random.default_rng(3)
    tw = Twins(buf)
    for _ in range(30):
        tw.add(random_step(rng, 3, p_end=0.2))
    batch = host(buf.sample(64))
    assert buf.sampleable(batch["ids"]).all()
    assert (batch["weights"] == 1).all()
    theirs = {k: np.asarray(v) for k, v in tw.np_buf.get_transitions(batch["ids"]).items()}
    assert_bit_identical(batch, {**theirs, "weights": np.ones(64, np.float32)})


def test_empty_buffer_samples_weight_zero_or_raises_when_checked(device: str) -> None:
    buf = make(device, capacity=16, num_envs=2, n_step=3)
    assert not bool(buf.can_sample())
    batch = buf.sample(8)
    assert batch["weights"].tolist() == [0.0] * 8
    with pytest.raises(rr.EmptyBufferError):
        buf.sample(8, check=True)


def test_bad_arguments_name_the_field_and_change_nothing(device: str) -> None:
    buf = make(device, capacity=16, num_envs=2)
    rng = np.random.default_rng(0)
    good = random_step(rng, 2)
    with pytest.raises(rr.FieldError, match="missing"):
        buf.add(**{k: v for k, v in good.items() if k != "action"})
    with pytest.raises(rr.ShapeError, match="obs"):
        buf.add(**{**good, "obs": np.zeros((2, 3), np.float32)})
    with pytest.raises(rr.DTypeError, match="action"):
        buf.add(**{**good, "action": torch.zeros(2, dtype=torch.float32)})
    assert buf.steps_added == 0 and int(buf._ring.head.sum()) == 0
    with pytest.raises(rr.ConfigError, match="capacity"):
        make(device, capacity=3, num_envs=2, n_step=3)
    with pytest.raises(rr.ConfigError, match="reward"):
        rrt.DeviceReplayBuffer(
            8, {"obs": rr.Field((), np.float32), "reward": rr.Field((), np.int32)}
        )
    with pytest.raises(rr.ConfigError, match="batch_size"):
        buf.sample(0)
    with pytest.raises(rr.ConfigError, match="device"):
        make("nonsense", capacity=16)


def test_unsigned_big_endian_and_extra_observation_fields(device: str) -> None:
    """uint8/uint16/uint32 fields (torch has no where/masked_fill for the wider ones: done on
    their signed twins), a big-endian float64 next_field and a second observation field:
    transitions and sequences bit for bit the core's."""
    fields = {
        "obs": rr.Field((3, 3), np.uint8),
        "extra": rr.Field((2,), np.uint16),
        "big": rr.Field((), ">f8"),
        "goal": rr.Field((2,), np.uint32, observation=True),
    }
    kw: dict[str, Any] = dict(num_envs=2, n_step=2, frame_stack=3, next_fields=("extra", "big"))
    buf = rrt.DeviceReplayBuffer(24, fields, finals_per_env=12, device=device, **kw)
    core = rr.ReplayBuffer(24, fields, **kw)
    rng = np.random.default_rng(0)
    for _ in range(30):
        step = {
            "obs": rng.integers(0, 255, (2, 3, 3)).astype(np.uint8),
            "extra": rng.integers(0, 60000, (2, 2)).astype(np.uint16),
            "big": rng.standard_normal(2).astype(">f8"),
            "goal": rng.integers(0, 2**32 - 1, (2, 2)).astype(np.uint32),
            "reward": rng.standard_normal(2).astype(np.float32),
            "terminated": rng.random(2) < 0.2,
            "truncated": rng.random(2) < 0.1,
            "next_obs": rng.integers(0, 255, (2, 3, 3)).astype(np.uint8),
            "next_goal": rng.integers(0, 2**32 - 1, (2, 2)).astype(np.uint32),
        }
        buf.add(**step)
        core.add(**step)
    ids = core.sampleable_ids()
    assert_bit_identical(host(buf.get_transitions(ids)), dict(core.get_transitions(ids)))
    stored = np.arange(36, 60)
    for within in (True, False):
        ours = host(buf.get_sequences(stored, 4, within_episode=within))
        assert_bit_identical(ours, dict(core.get_sequences(stored, 4, within_episode=within)))
