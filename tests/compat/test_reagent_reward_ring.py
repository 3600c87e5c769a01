"""The ReAgent front-end's ring of rewards by core id against the core's own rewards.

``_slots.write_step`` keeps each step's reward at ``id % capacity`` and the n-step sum reads
its windows there; these tests compare every window with the core's ``get_field`` reads
(``_assembly.window_rewards``), for scalar and vector rewards, windows cut by terminals,
wrapped rings, and after a checkpoint's load.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from rlreplay.compat.reagent import ReplayBuffer, _assembly, _slots


def _buffer(reward_shape: tuple[int, ...], capacity: int, horizon: int) -> Any:
    return ReplayBuffer(
        observation_shape=(3,),
        stack_size=2,
        replay_capacity=capacity,
        batch_size=16,
        update_horizon=horizon,
        gamma=0.7,
        observation_dtype=np.float32,
        reward_shape=reward_shape,
        seed=5,
    )


def _add(buffer: Any, steps: int, rng: np.random.Generator, shape: tuple[int, ...]) -> None:
    for t in range(steps):
        reward = rng.standard_normal(shape).astype(np.float32) if shape else float(t % 9)
        terminal = int(rng.random() < 0.15)
        buffer.add(rng.standard_normal(3).astype(np.float32), t % 3, reward, terminal)


@pytest.mark.parametrize("shape", [(), (2,)])
@pytest.mark.parametrize("steps", [30, 157])
def test_ring_windows_are_the_cores(shape: tuple[int, ...], steps: int) -> None:
    rng = np.random.default_rng(steps)
    buffer = _buffer(shape, 50, 3)
    _add(buffer, steps, rng, shape)
    assert buffer._id_reward is not None
    for _ in range(20):
        slots = _slots.sample_slots(buffer, 16)
        batch = _slots.gather(buffer, slots, check=False)
        assert batch.core is not None
        ids, m = batch.ids, batch.core.steps
        want = _assembly.window_rewards(buffer._core, ids, m, 3)
        got = _assembly.ring_rewards(buffer._id_reward, ids, m, 3)
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


def test_ring_follows_a_checkpoint_load(tmp_path: Any) -> None:
    rng = np.random.default_rng(1)
    buffer = _buffer((), 40, 3)
    _add(buffer, 95, rng, ())
    buffer.save(str(tmp_path), 0)
    loaded = _buffer((), 40, 3)
    loaded.load(str(tmp_path), 0)
    assert loaded._id_reward is not None
    slots = np.flatnonzero(loaded._is_valid)[:16]
    batch = _slots.gather(loaded, slots, check=False)
    assert batch.core is not None
    want = _assembly.window_rewards(loaded._core, batch.ids, batch.core.steps, 3)
    got = _assembly.ring_rewards(loaded._id_reward, batch.ids, batch.core.steps, 3)
    assert got.tobytes() == want.tobytes()
    a = loaded.sample_transition_batch(indices=slots)
    b = buffer.sample_transition_batch(indices=slots)
    assert np.array_equal(a.reward.numpy(), b.reward.numpy())
