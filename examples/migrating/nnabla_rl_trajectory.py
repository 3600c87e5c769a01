"""nnabla-rl's TrajectoryReplayBuffer fed with CartPole-v1 trajectories, on rlreplay.

Written as nnabla-rl's users write it (its trajectory-based algorithms, e.g. Decision
Transformer, collect whole episodes as lists of ``(s, a, r, non_terminal, s_next, info)``
experiences, store them with ``append_trajectory`` and train on trajectory portions): a random
policy plays gymnasium's CartPole-v1, each episode (cut at 60 steps, so some trajectories end
without a terminal flag) is appended as one trajectory, and the buffer is sampled by
trajectory and by portion. The only change for rlreplay is the import line. The script checks
what the buffer returns and exits 0.
"""

import gymnasium as gym
import numpy as np

# from nnabla_rl.replay_buffers import TrajectoryReplayBuffer
from rlreplay.compat.nnabla_rl.replay_buffers import TrajectoryReplayBuffer

MAX_STEPS = 60


def collect_trajectory(env, rng, seed):
    """One episode of a random policy, as a list of experiences."""
    trajectory = []
    s, _ = env.reset(seed=seed)
    for t in range(MAX_STEPS):
        a = np.array([rng.integers(2)], dtype=np.int64)
        s_next, r, terminated, truncated, _ = env.step(int(a[0]))
        truncated = truncated or t == MAX_STEPS - 1
        non_terminal = 0.0 if terminated else 1.0
        trajectory.append((s, a, float(r), non_terminal, s_next, {"t": t}))
        if terminated or truncated:
            break
        s = s_next
    return trajectory


def main():
    env = gym.make("CartPole-v1")
    rng = np.random.default_rng(0)
    buffer = TrajectoryReplayBuffer(num_trajectories=20)
    trajectories = [collect_trajectory(env, rng, seed) for seed in range(30)]
    for trajectory in trajectories:
        buffer.append_trajectory(trajectory)
    kept = trajectories[-20:]
    assert buffer.trajectory_num == 20 and buffer.capacity == 20
    assert len(buffer) == sum(len(t) for t in kept)

    # experiences by position: the first experience of the oldest kept trajectory first
    s, a, r, non_terminal, s_next, info = buffer[0]
    assert np.array_equal(s, kept[0][0][0]) and s.dtype == np.float32 and info["t"] == 0
    assert a.dtype == np.int64 and r == 1.0 and non_terminal == 1.0
    assert np.array_equal(s_next, kept[0][0][4])

    # whole trajectories, grouped as appended
    trajectory, info = buffer.sample_trajectories()
    assert isinstance(trajectory, list) and info["weights"].shape == (1, 1)
    assert any(len(trajectory) == len(t) for t in kept)
    assert [e[5]["t"] for e in trajectory] == list(range(len(trajectory)))
    many, info = buffer.sample_trajectories(num_samples=5)
    assert len(many) == 5 and info["weights"].shape == (5, 1)

    # portions: consecutive experiences inside one trajectory
    portion_length = 8
    portions, info = buffer.sample_trajectories_portion(
        num_samples=16, portion_length=portion_length
    )
    assert len(portions) == 16 and info["weights"].shape == (16, 1)
    for portion in portions:
        steps = [e[5]["t"] for e in portion]
        assert steps == list(range(steps[0], steps[0] + portion_length))
        states = np.stack([e[0] for e in portion])
        next_states = np.stack([e[4] for e in portion])
        assert states.shape == (portion_length, 4)
        assert np.array_equal(states[1:], next_states[:-1])  # one episode, in order

    # sample_indices_portion: past a trajectory's end, its last portion_length experiences
    last = len(kept[0]) - 1
    (portion,), _ = buffer.sample_indices_portion([last], portion_length=portion_length)
    assert [e[5]["t"] for e in portion] == list(range(last - portion_length + 1, last + 1))

    # episodes that hit the 60-step cut end without a terminal flag, and stay whole
    cut = [t for t in kept if len(t) == MAX_STEPS]
    ended = [t for t in kept if t[-1][3] == 0.0]
    assert len(cut) + len(ended) == len(kept)

    # trajectories as given: fixed 16-step chunks of the experience stream, across episodes
    stream = [e for t in trajectories for e in t]
    chunks = TrajectoryReplayBuffer()
    for start in range(0, 160, 16):
        chunks.append_trajectory(stream[start : start + 16])
    assert chunks.trajectory_num == 10 and len(chunks) == 160
    chunk = chunks.get_trajectory(0)
    assert len(chunk) == 16 and chunk[-1][5]["t"] == stream[15][5]["t"]
    inner_ends = [k for k in range(10) if any(e[3] == 0.0 for e in chunks.get_trajectory(k)[:-1])]
    assert inner_ends  # episodes end inside chunks: kept whole, as appended
    portions, _ = chunks.sample_indices_portion([0, 12, 40], portion_length=6)
    assert [[e[5]["t"] for e in p] for p in portions] == [
        [e[5]["t"] for e in stream[a : a + 6]]
        for a in (0, 10, 40)  # clamped to chunk 0
    ]
    env.close()
    print("nnabla_rl_trajectory: ok", buffer.trajectory_num, len(buffer))


if __name__ == "__main__":
    main()
