"""n-step DQN on CartPole-v1 with keras-gym's ExperienceReplayBuffer, on rlreplay.

Written as keras-gym's users write it (its DQN example: a value function carrying ``env``,
``gamma`` and ``bootstrap_n``, ``ExperienceReplayBuffer.from_value_function``, ``add(s, a, r,
done, episode_id)`` every step, ``batch_update(*buffer.sample())``), with a small linear
Q-function in NumPy in place of keras-gym's Keras model. The only change for rlreplay is the
import line. The script checks what the buffer returns and exits 0.
"""

import gymnasium as gym
import numpy as np

# from keras_gym.caching import ExperienceReplayBuffer
from rlreplay.compat.keras_gym.caching import ExperienceReplayBuffer


class LinearQ:
    """A type-II Q-function ``Q(s) = s @ W + b`` with keras-gym's attributes."""

    def __init__(self, env, gamma=0.9, bootstrap_n=3, lr=0.01, random_seed=0):
        self.env = env
        self.gamma = gamma
        self.bootstrap_n = bootstrap_n
        self.lr = lr
        rng = np.random.RandomState(random_seed)
        n_in, n_out = env.observation_space.shape[0], env.action_space.n
        self.W = rng.normal(scale=0.1, size=(n_in, n_out))
        self.b = np.zeros(n_out)

    def __call__(self, s):
        return s @ self.W + self.b

    def batch_update(self, S, A, Rn, In, S_next, A_next):
        # keras-gym's Q-learning target: Rn + In * max_a Q(S_next, a)
        G = Rn + In * self(S_next).max(axis=1)
        td = G - (self(S) * A).sum(axis=1)
        self.W += self.lr * S.T @ (td[:, None] * A) / len(S)
        self.b += self.lr * (td[:, None] * A).mean(axis=0)
        return float(np.mean(td**2))


env = gym.make("CartPole-v1")
q = LinearQ(env, gamma=0.9, bootstrap_n=3)
buffer = ExperienceReplayBuffer.from_value_function(q, capacity=2000, batch_size=32)
buffer.random_seed = 13  # keras-gym's RandomStateMixin
assert (buffer.bootstrap_n, buffer.gamma, buffer.num_frames) == (3, 0.9, 1)
assert buffer.action_space_is_discrete and buffer.num_actions == 2

rng = np.random.RandomState(0)
adds, losses = 0, []
for ep in range(40):
    s, info = env.reset(seed=ep)
    for _ in range(500):
        a = int(rng.randint(2)) if rng.rand() < 0.3 else int(np.argmax(q(s)))
        s_next, r, terminated, truncated, info = env.step(a)
        done = terminated or truncated
        buffer.add(s, a, r, done, ep)
        adds += 1
        # keras-gym's len: transitions whose n-step window is in the buffer
        assert len(buffer) == max(0, min(adds, 2000 + 3) - 3)
        if len(buffer) >= buffer.batch_size:
            losses.append(q.batch_update(*buffer.sample()))
        if done:
            break
        s = s_next

S, A, Rn, In, S_next, A_next = buffer.sample()
# shapes and dtypes as keras-gym returns them
assert S.shape == S_next.shape == (32, 4) and S.dtype == np.float32
assert A.shape == A_next.shape == (32, 2) and A.dtype == np.float64
assert Rn.shape == In.shape == (32,) and Rn.dtype == In.dtype == np.float64
np.testing.assert_array_equal(A.sum(axis=1), 1.0)  # one-hot actions
# CartPole pays 1 per step: Rn = 1 + 0.9 + 0.81 over a full window (In = 0.9 ** 3), fewer
# terms when the episode ends inside it (In = 0)
full = In > 0
np.testing.assert_allclose(In[full], 0.9**3)
np.testing.assert_allclose(Rn[full], 1 + 0.9 + 0.81)
assert set(np.round(Rn[~full], 6)) <= {1.0, 1.9, 2.71}
# S_next is three steps after S within an episode: CartPole's state moves, so they differ
assert (np.abs(S_next[full] - S[full]).sum(axis=1) > 0).all()
assert np.isfinite(losses).all() and len(losses) == adds - 3 - 31

# the same seed gives the same batch again
buffer.random_seed = 7
first = buffer.sample()
buffer.random_seed = 7
again = buffer.sample()
for x, y in zip(first, again, strict=True):
    np.testing.assert_array_equal(x, y)

buffer.clear()
assert len(buffer) == 0 and not buffer


# Atari style: keras-gym's frame stacker gives (H, W, num_frames) states; the buffer stores the
# last frame of each. The first state is uint8, later ones arrive as floats and are cast as
# keras-gym's own array assignment casts them.
class FramesEnv:
    action_space = gym.spaces.Discrete(3)
    num_frames = 4  # keras-gym reads it from the env


frames = ExperienceReplayBuffer(FramesEnv(), capacity=100, batch_size=8, bootstrap_n=2)
frames.random_seed = 1
for t in range(30):
    stack = np.zeros((6, 6, 4), np.uint8 if t == 0 else np.float64)
    stack[..., -1] = t + 0.7  # the newest frame; float 5.7 is stored as uint8 5
    frames.add(stack, t % 3, 1.0, t % 10 == 9, t // 10)
S, A, Rn, In, S_next, A_next = frames.sample()
assert S.shape == S_next.shape == (8, 6, 6, 4) and S.dtype == np.uint8
for b in range(8):
    t = int(S[b, 0, 0, -1])
    start = t - t % 10  # the episode's first step: earlier frames repeat it (keras-gym)
    np.testing.assert_array_equal(S[b, 0, 0], np.maximum(np.arange(t - 3, t + 1), start))
    if In[b] > 0:  # S_next is the stack two steps later
        np.testing.assert_array_equal(S_next[b, 0, 0], np.maximum(np.arange(t - 1, t + 3), start))
print(f"{adds} steps in 40 episodes, {len(losses)} updates, last TD loss {losses[-1]:.3f}")
