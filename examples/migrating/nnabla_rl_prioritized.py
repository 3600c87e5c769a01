"""Prioritized replay as an nnabla-rl user writes it, on rlreplay: only the imports change.

A linear Q-function learns on CartPole from a ``ProportionalPrioritizedReplayBuffer``
(``normalization_method="batch_max"``, as nnabla-rl's Rainbow builds it): experiences are
nnabla-rl tuples ``(s, a, r, non_terminal, s_next, info)``, every ``sample`` is followed by
``update_priorities(td_errors)``, and the importance weights ``info["weights"]`` scale the
update. Then nnabla-rl's documented ``PrioritizedReplayBuffer(variant="rank_based")``, a
``BufferIterator`` over an on-policy rollout and a ``ReplacementSamplingReplayBuffer``.
"""

import gymnasium as gym
import numpy as np

# from nnabla_rl.replay_buffers import BufferIterator, PrioritizedReplayBuffer
# from nnabla_rl.replay_buffers import ReplacementSamplingReplayBuffer
# from nnabla_rl.replay_buffers.prioritized_replay_buffer import (
#     ProportionalPrioritizedReplayBuffer,
# )
from rlreplay.compat.nnabla_rl.replay_buffers import (
    BufferIterator,
    PrioritizedReplayBuffer,
    ReplacementSamplingReplayBuffer,
)
from rlreplay.compat.nnabla_rl.replay_buffers.prioritized_replay_buffer import (
    ProportionalPrioritizedReplayBuffer,
)

GAMMA = 0.99
BATCH_SIZE = 32
rng = np.random.default_rng(0)


def q_values(weights, states):
    return states @ weights  # (B, 4) @ (4, 2)


def run_episode(env, weights, epsilon, seed):
    """One episode as nnabla-rl experiences."""
    experiences = []
    s, _ = env.reset(seed=seed)
    done = False
    while not done:
        if rng.random() < epsilon:
            a = int(rng.integers(2))
        else:
            a = int(np.argmax(q_values(weights, s[None])[0]))
        s_next, r, terminated, truncated, _ = env.step(a)
        non_terminal = 0.0 if terminated else 1.0
        info = {"TimeLimit.truncated": truncated}
        experiences.append((s, np.array([a]), float(r), non_terminal, s_next, info))
        s, done = s_next, terminated or truncated
    return experiences


def train_step(buffer, weights, lr=1e-3):
    experiences, info = buffer.sample(num_samples=BATCH_SIZE)
    s = np.stack([e[0] for e in experiences])
    a = np.array([e[1][0] for e in experiences])
    r = np.array([e[2] for e in experiences])
    non_terminal = np.array([e[3] for e in experiences])
    s_next = np.stack([e[4] for e in experiences])
    target = r + GAMMA * non_terminal * q_values(weights, s_next).max(axis=1)
    td_error = target - q_values(weights, s)[np.arange(BATCH_SIZE), a]
    is_weights = info["weights"]  # (BATCH_SIZE, 1), float64, as nnabla-rl returns them
    assert is_weights.shape == (BATCH_SIZE, 1) and is_weights.dtype == np.float64
    assert np.all(is_weights > 0) and np.isclose(is_weights.max(), 1.0)  # batch_max
    grad = np.zeros_like(weights)
    np.add.at(grad.T, a, (is_weights[:, 0] * td_error)[:, None] * s)
    weights += lr * grad / BATCH_SIZE
    buffer.update_priorities(td_error[:, None])  # (B, 1) TD errors, as nnabla-rl's DQN passes
    return np.abs(td_error)


env = gym.make("CartPole-v1")
buffer = ProportionalPrioritizedReplayBuffer(
    capacity=5000, alpha=0.6, beta=0.4, betasteps=2000, error_clip=(-100, 100),
    normalization_method="batch_max",
)  # fmt: skip
weights = np.zeros((4, 2))
for episode in range(40):
    buffer.append_all(run_episode(env, weights, epsilon=0.5, seed=episode))
    if len(buffer) >= BATCH_SIZE:
        for _ in range(10):
            train_step(buffer, weights)
print(f"proportional: {len(buffer)} experiences, Q weights norm {np.linalg.norm(weights):.3f}")
assert 400 < len(buffer) <= buffer.capacity

# nnabla-rl's protocol: update_priorities must come between two samples.
buffer.sample(num_samples=BATCH_SIZE)
try:
    buffer.sample(num_samples=BATCH_SIZE)
    raise AssertionError("a second sample before update_priorities must fail")
except RuntimeError as e:
    assert "without updating priority" in str(e)
buffer.update_priorities(np.zeros(BATCH_SIZE))

# nnabla-rl's documented wrapper, rank-based: P(i) ~ rank(i) ** -alpha, rank 1 = largest |TD error|,
# drawn as nnabla-rl draws: one heap position per segment of equal rank mass.
ranked = PrioritizedReplayBuffer(capacity=1000, variant="rank_based", sort_interval=1)
ranked.append_all(run_episode(env, weights, epsilon=1.0, seed=100))
n = len(ranked)
position_of = {id(ranked[i][5]): i for i in range(n)}  # info dicts come back as appended
priorities = np.linspace(0.0, 0.9, n)  # the newest experience ranks first
ranked.sample_indices(list(range(n)))
ranked.update_priorities(priorities)
counts = np.zeros(n)
for _ in range(100):
    experiences, info = ranked.sample(num_samples=8)
    drawn = [position_of[id(e[5])] for e in experiences]
    np.add.at(counts, drawn, 1)
    ranked.update_priorities(priorities[drawn])  # unchanged priorities, unchanged law
print(
    f"rank_based: {n} experiences, draws of rank 1 / last rank: {counts[-1]:.0f} / {counts[0]:.0f}"
)
# rank 1 fills the first segment alone: it is in every batch; the last rank shares one
assert counts[-1] == 100 and counts[0] < 100 and info["weights"].max() <= 1.0

# PPO-style epochs over an on-policy rollout.
rollout = ReplacementSamplingReplayBuffer(capacity=None)
rollout.append_all(run_episode(env, weights, epsilon=1.0, seed=200))
seen = 0
for experiences, _info in BufferIterator(rollout, batch_size=16, shuffle=True, repeat=False):
    seen += len(experiences)
assert seen == len(rollout)
experiences, _ = rollout.sample(num_samples=4 * len(rollout))  # with replacement
assert len(experiences) == 4 * len(rollout)
print(f"iterator: one epoch of {seen} experiences; replacement sample of {len(experiences)}")
env.close()
