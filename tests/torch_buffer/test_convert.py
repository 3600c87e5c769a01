"""A device buffer moves to the NumPy core and back (to_replay_buffer / from_replay_buffer)
keeping its ids, transitions, priorities and bookkeeping, and checkpoints are the core's
format (save / rr.load / rrt.load)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import rlreplay as rr
import rlreplay.torch as rrt
from tests.torch_buffer.helpers import (
    FIELDS,
    Twins,
    assert_bit_identical,
    assert_same_contents,
    host,
    make,
    numpy_add,
    random_step,
)

CONFIGS: dict[str, dict[str, Any]] = {
    "uniform, stack 3, next_fields, few finals": dict(
        capacity=24,
        num_envs=2,
        n_step=2,
        frame_stack=3,
        next_fields=("action",),
        finals_per_env=2,
        recent_ratio=0.25,
        recent_steps=3,
    ),
    "prioritized, 3-step, stack 2": dict(
        capacity=20,
        num_envs=2,
        n_step=3,
        frame_stack=2,
        prioritized=True,
        priority_clip=(0.0, 5.0),
        beta_steps=10,
    ),
}

RING = ("head", "lo", "hi", "last_end", "f_count", "f_head")


def fed(device: str, name: str, steps: int = 33) -> Twins:
    tw = Twins(make(device, **CONFIGS[name]))
    rng = np.random.default_rng(11)
    for _ in range(steps):
        tw.add(random_step(rng, 2, p_end=0.3))
    if tw.buf.config.prioritized:
        ids = tw.buf.sample(8)["ids"]
        tw.buf.update_priorities(ids, torch.linspace(0.5, 3.0, 8, dtype=torch.float64))  # type: ignore[attr-defined]
    return tw


def assert_same_buffers(a: rrt.DeviceReplayBuffer, b: rrt.DeviceReplayBuffer) -> None:
    assert a.steps_added == b.steps_added
    for name in RING:
        torch.testing.assert_close(getattr(a._ring, name), getattr(b._ring, name), rtol=0, atol=0)
    # Per-row arrays and columns: the rows of stored steps (others are never read, and the
    # core resets them); final records: the live ones.
    C, F = a.env_capacity, a.finals_per_env
    for e in range(a.num_envs):
        t = np.arange(int(a._ring.head[e]), a.steps_added)
        rows = torch.from_numpy(e * C + t % C).to(a.device)
        for name in ("ep_start", "final_fid"):
            torch.testing.assert_close(getattr(a._ring, name)[rows], getattr(b._ring, name)[rows])
        for name in a.storage.steps:
            torch.testing.assert_close(a.storage.take(name, rows), b.storage.take(name, rows))
        fids = np.arange(int(a._ring.f_head[e]), int(a._ring.f_count[e]))
        rows = torch.from_numpy(e * F + fids % F).to(a.device)
        for name in a.config.observation_names:
            torch.testing.assert_close(
                a.storage.take_finals(name, rows), b.storage.take_finals(name, rows)
            )
        torch.testing.assert_close(a._ring.final_owner[rows], b._ring.final_owner[rows])
    ids = a.sampleable_ids()
    torch.testing.assert_close(ids, b.sampleable_ids())
    assert_bit_identical(host(a.get_transitions(ids)), host(b.get_transitions(ids)))
    if a._prio is not None:
        assert b._prio is not None
        for name in ("prio", "max_priority"):
            torch.testing.assert_close(getattr(a._prio, name), getattr(b._prio, name))
        la, lb = a._prio.sums.state_dict()["leaves"], b._prio.sums.state_dict()["leaves"]
        assert la.tobytes() == lb.tobytes()
        assert a._prio.beta_step == b._prio.beta_step


@pytest.mark.parametrize("name", list(CONFIGS))
def test_round_trip_through_the_core_keeps_everything(device: str, name: str) -> None:
    tw = fed(device, name)
    np_buf = tw.buf.to_replay_buffer()
    cls = rr.PrioritizedReplayBuffer if tw.buf.config.prioritized else rr.ReplayBuffer
    assert type(np_buf) is cls
    live = tw.np_buf.sampleable_ids()
    np.testing.assert_array_equal(np_buf.sampleable_ids(), live)
    ours = {k: np.asarray(v) for k, v in np_buf.get_transitions(live).items()}
    theirs = {k: np.asarray(v) for k, v in tw.np_buf.get_transitions(live).items()}
    assert_bit_identical(ours, theirs)
    back = rrt.from_replay_buffer(np_buf, device=device, finals_per_env=tw.buf.finals_per_env)
    assert back.config.core_kwargs() == tw.buf.config.core_kwargs()
    assert_same_buffers(back, tw.buf)


def test_a_core_buffer_goes_on_as_a_device_buffer(device: str) -> None:
    """A core buffer converted mid-stream, then both fed the same steps: the same contents."""
    np_buf = rr.ReplayBuffer(24, FIELDS, num_envs=2, n_step=3, frame_stack=2, gamma=0.9)
    rng = np.random.default_rng(4)
    for _ in range(30):
        numpy_add(np_buf, random_step(rng, 2, p_end=0.3))
    buf = rrt.from_replay_buffer(np_buf, device=device, finals_per_env=12)
    tw = Twins(buf)
    tw.np_buf, tw.count = np_buf, 30
    tw.np_head[:] = 30 - buf.env_capacity
    assert_same_contents(tw)
    for _ in range(20):
        tw.add(random_step(rng, 2, p_end=0.3))
    assert_same_contents(tw)


def test_save_and_load_in_the_core_format(device: str, tmp_path: Path) -> None:
    tw = fed(device, "prioritized, 3-step, stack 2")
    path = tmp_path / "buffer.rrb"
    tw.buf.save(path)
    as_core = rr.load(path)
    assert isinstance(as_core, rr.PrioritizedReplayBuffer)
    np.testing.assert_array_equal(as_core.sampleable_ids(), tw.np_buf.sampleable_ids())
    loaded = rrt.load(path, device=device, seed=1)
    assert isinstance(loaded, rrt.DevicePrioritizedReplayBuffer)
    assert_same_buffers(loaded, tw.buf)
    # Both go on alike.
    rng = np.random.default_rng(9)
    for _ in range(5):
        step = random_step(rng, 2, p_end=0.3)
        tw.buf.add(**step)
        loaded.add(**step)
    assert_same_buffers(loaded, tw.buf)


@pytest.mark.parametrize("prioritized", [False, True])
def test_envs_at_different_steps_convert_both_ways(device: str, prioritized: bool) -> None:
    """A core buffer fed subsets of its envs becomes a device buffer holding the same, which
    goes on as the core does, and converts back to the same."""
    cls = rr.PrioritizedReplayBuffer if prioritized else rr.ReplayBuffer
    np_buf = cls(24, FIELDS, num_envs=3, n_step=2, frame_stack=2, gamma=0.9)
    rng = np.random.default_rng(11)

    def both(bufs: list[Any], step: dict[str, Any], env_ids: list[int]) -> None:
        for b in bufs:
            ids = np.asarray(env_ids) if isinstance(b, rr.ReplayBuffer) else env_ids
            b.add(env_ids=ids, **step)

    for _ in range(25):
        env_ids = sorted(rng.choice(3, size=int(rng.integers(1, 4)), replace=False).tolist())
        both([np_buf], random_step(rng, len(env_ids), p_end=0.3), env_ids)
    buf = rrt.from_replay_buffer(np_buf, device=device, finals_per_env=8)
    np.testing.assert_array_equal(
        buf._ring.env_counts(), np_buf.state_dict()["arrays"]["index/env"][:, 0]
    )

    def same(a: rr.ReplayBuffer, b: rrt.DeviceReplayBuffer) -> None:
        ids = a.sampleable_ids()
        np.testing.assert_array_equal(b.sampleable_ids().cpu().numpy(), ids)
        theirs = {k: np.asarray(v) for k, v in a.get_transitions(ids).items()}
        ours = host(b.get_transitions(torch.from_numpy(ids).to(b.device)))
        assert_bit_identical(ours, theirs)

    same(np_buf, buf)
    for _ in range(10):  # both go on alike
        env_ids = sorted(rng.choice(3, size=int(rng.integers(1, 4)), replace=False).tolist())
        both([np_buf, buf], random_step(rng, len(env_ids), p_end=0.3), env_ids)
    same(np_buf, buf)
    back = buf.to_replay_buffer()
    np.testing.assert_array_equal(
        back.state_dict()["arrays"]["index/env"], np_buf.state_dict()["arrays"]["index/env"]
    )
    same(back, buf)


def test_what_the_device_buffer_cannot_hold_is_refused() -> None:
    many = rr.ReplayBuffer(16, FIELDS)
    for _ in range(10):
        numpy_add(many, random_step(np.random.default_rng(0), 1, p_end=1.0))
    with pytest.raises(rr.ConfigError, match="finals_per_env"):
        rrt.from_replay_buffer(many, finals_per_env=2)
