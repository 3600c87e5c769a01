"""Today's ReAgent replay buffer (no ``observation_shape``), moved by changing the import line.

ReAgent's later ``ReplayBuffer`` takes no shapes or dtypes: the first ``add`` (keyword
arguments ``observation``, ``action``, ``reward``, ``terminal`` and any extras, here
``log_prob``) fixes them, float64 stored as float32. This script feeds it CartPole episodes
from a random policy, samples n-step batches (with their ``step`` lengths), and saves and
reloads the buffer with ``save``/``load`` in a temporary directory.
"""

import tempfile

import gymnasium as gym
import numpy as np
import torch

# from reagent.replay_memory.circular_replay_buffer import ReplayBuffer
from rlreplay.compat.reagent.circular_replay_buffer import ReplayBuffer


def collect(env, replay_buffer, num_steps, rng):
    obs, _ = env.reset(seed=0)
    for _ in range(num_steps):
        action = int(rng.integers(env.action_space.n))
        next_obs, reward, terminated, truncated, _ = env.step(action)
        replay_buffer.add(
            observation=obs.astype(np.float64),  # float64 in, float32 stored
            action=action,
            reward=reward,
            terminal=bool(terminated or truncated),
            log_prob=np.log(0.5),
        )
        obs = env.reset()[0] if terminated or truncated else next_obs


def main():
    rng = np.random.default_rng(0)
    env = gym.make("CartPole-v1")
    replay_buffer = ReplayBuffer(
        stack_size=1, replay_capacity=5000, batch_size=64, update_horizon=3
    )
    assert replay_buffer.get_storage_signature() == []  # nothing known before the first add

    collect(env, replay_buffer, 2000, rng)
    signature = {e.name: (e.shape, np.dtype(e.type)) for e in replay_buffer.get_storage_signature()}
    assert signature["observation"] == ((4,), np.float32)
    assert signature["action"] == ((), np.int64)
    assert signature["reward"] == ((), np.float32)
    assert signature["log_prob"] == ((), np.float32)
    assert "next_log_prob" in replay_buffer.get_transition_elements()

    batch = replay_buffer.sample_transition_batch(batch_size=64)
    assert batch.state.shape == (64, 4) and batch.state.dtype == torch.float32
    assert batch.next_state.shape == (64, 4)
    assert batch.action.shape == (64, 1) and batch.log_prob.shape == (64, 1)
    # step: the n-step window length, shorter where an episode ended inside it.
    assert ((batch.step >= 1) & (batch.step <= 3)).all()
    full = batch.step == 3
    assert torch.allclose(batch.reward[full], torch.tensor(1 + 0.99 + 0.99**2))
    assert batch.terminal[batch.step < 3].all()

    # A value of another shape than the first add's is refused as ReAgent asserts.
    try:
        replay_buffer.add(
            observation=np.zeros(5), action=0, reward=1.0, terminal=False, log_prob=0.0
        )
    except AssertionError as error:
        print("refused:", error)
    else:
        raise SystemExit("a (5,) observation should have been refused")

    with tempfile.TemporaryDirectory() as checkpoint_dir:
        replay_buffer.save(checkpoint_dir, 1)
        restored = ReplayBuffer(stack_size=1, replay_capacity=5000, batch_size=64, update_horizon=3)
        restored.load(checkpoint_dir, 1)
    assert int(restored.add_count) == int(replay_buffer.add_count)
    assert restored.size == replay_buffer.size
    indices = replay_buffer.sample_index_batch(128)
    before = replay_buffer.sample_transition_batch(batch_size=128, indices=indices)
    after = restored.sample_transition_batch(batch_size=128, indices=indices)
    for name, x, y in zip(before._fields, before, after, strict=True):
        assert torch.equal(x, y), name
    collect(env, restored, 100, rng)  # adding goes on after the load
    print(f"{int(restored.add_count)} rows, {restored.size} valid transitions after reload")


if __name__ == "__main__":
    main()
