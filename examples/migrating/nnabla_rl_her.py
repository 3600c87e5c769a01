"""nnabla-rl's HindsightReplayBuffer and marshal_experiences, as nnabla-rl's HER users write them.

A goal-reaching toy environment (a point on a line that must reach a goal) returns
goal-conditioned states ``(observation, desired_goal, achieved_goal)``; an explorer appends
``(s, a, r, non_terminal, s_next, info)`` with a fresh ``info`` dict per step; a trainer seeds
nnabla-rl's global generator with ``set_global_seed``, samples relabelled experiences and
marshals them into batch arrays with ``nnabla_rl.utils.data.marshal_experiences``. Only the
import lines change for rlreplay. The script checks what it gets and exits 0.
"""

import numpy as np

# from nnabla_rl.replay_buffers import HindsightReplayBuffer
# from nnabla_rl.utils.data import marshal_experiences
# from nnabla_rl.utils.reproductions import set_global_seed
from rlreplay.compat.nnabla_rl.replay_buffers import HindsightReplayBuffer
from rlreplay.compat.nnabla_rl.utils.data import marshal_experiences
from rlreplay.compat.nnabla_rl.utils.reproductions import set_global_seed

EPISODE_LENGTH = 10


def reward_function(achieved_goal, desired_goal, info):
    """nnabla-rl's HER reward signature: 0 on success, -1 otherwise (as a float32)."""
    return np.float32(-1.0 if np.abs(achieved_goal - desired_goal).max() > 0.5 else 0.0)


def rollout(rng, num_episodes):
    """Episodes of a random policy on a line; the goal is a random point (never reached)."""
    experiences = []
    for _ in range(num_episodes):
        position = np.zeros(1)
        goal = rng.uniform(20.0, 30.0, size=1)
        for t in range(EPISODE_LENGTH):
            action = rng.uniform(-1.0, 1.0, size=1)
            s = (position.copy(), goal, position.copy())
            position = position + action
            s_next = (position.copy(), goal, position.copy())
            r = reward_function(s_next[2], goal, {})
            non_terminal = 0.0 if t == EPISODE_LENGTH - 1 else 1.0
            experiences.append((s, action, r, non_terminal, s_next, {}))
    return experiences


def main():
    set_global_seed(0)
    rng = np.random.default_rng(1)
    buffer = HindsightReplayBuffer(reward_function=reward_function, hindsight_prob=0.8)
    experiences = rollout(rng, 20)
    for experience in experiences:
        buffer.append(experience)
    assert len(buffer) == 20 * EPISODE_LENGTH and buffer.capacity is None

    # nnabla-rl writes the episode bookkeeping into each info dict
    info = experiences[13][5]
    assert info["index_in_episode"] == 3 and info["episode_end_index"] == EPISODE_LENGTH - 1

    successes = 0
    for _ in range(50):
        batch, batch_info = buffer.sample(num_samples=32)
        s, a, r, non_terminal, s_next, info = marshal_experiences(batch)
        observation, desired_goal, achieved_goal = s
        assert observation.shape == desired_goal.shape == achieved_goal.shape == (32, 1)
        assert a.shape == (32, 1) and r.shape == (32, 1) and non_terminal.shape == (32, 1)
        assert batch_info["weights"].shape == (32, 1)
        assert info["index_in_episode"].shape == (32, 1)
        # s and s_next share the (possibly relabelled) goal; the reward is the function's
        assert np.array_equal(desired_goal, s_next[1])
        want = [reward_function(ag, g, {}) for ag, g in zip(s_next[2], s_next[1], strict=True)]
        assert np.array_equal(r[:, 0], np.asarray(want))
        successes += int((r == 0).sum())
    # the real goals are never reached, so every success is a relabelled goal from the future
    assert successes > 0

    # the same global seed gives the same relabelled batches
    set_global_seed(7)
    first, _ = buffer.sample(num_samples=8)
    set_global_seed(7)
    again, _ = buffer.sample(num_samples=8)
    assert all(np.array_equal(x[0][1], y[0][1]) for x, y in zip(first, again, strict=True))
    print(f"HER: {successes} successful relabelled experiences in 50 batches of 32")


if __name__ == "__main__":
    main()
