"""rlreplay.integrations.sb3.ReplayBuffer behaves as Stable-Baselines3's replay buffers.

Stable-Baselines3's own buffer tests (``tests/test_buffers.py`` of its repository, MIT) are
not in its PyPI wheel. These are written from SB3's documented buffer behaviour and its
``ReplayBuffer`` / ``DictReplayBuffer`` source (2.9), the same cases as that suite where they
apply: normalization through ``VecNormalize``, samples on the requested device, dtypes kept
(float64 actions stored as float32), then what SB3 documents for every replay buffer:
sample shapes, ``size()``, ``pos``, ``full``, ``reset()``, ``extend``, vector envs, timeouts,
and the pickled round trip of ``save_replay_buffer`` / ``load_replay_buffer``. Where the
class deliberately differs (documented in ``docs/migrating/sb3.md``) the test says so.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

import gymnasium as gym
import torch as th
from gymnasium import spaces
from stable_baselines3 import DQN, SAC, TD3
from stable_baselines3.common.buffers import ReplayBuffer as SB3ReplayBuffer
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.type_aliases import (
    DictReplayBufferSamples,
    ReplayBufferSamples,
)
from stable_baselines3.common.utils import get_device
from stable_baselines3.common.vec_env import VecNormalize

import rlreplay as rr
from rlreplay.integrations.sb3 import DictSamples, ReplayBuffer, Samples

EP_LENGTH = 100


class DummyEnv(gym.Env[np.ndarray, np.ndarray]):
    """SB3's test env: observations and rewards cycle through 1..5, truncated at 100 steps."""

    def __init__(self) -> None:
        self.action_space = spaces.Box(1, 5, (1,))
        self.observation_space = spaces.Box(1, 5, (1,))
        self._observations = np.array([[1.0], [2.0], [3.0], [4.0], [5.0]], dtype=np.float32)
        self._rewards = [1, 2, 3, 4, 5]
        self._t = 0
        self._ep_length = EP_LENGTH

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict]:  # type: ignore[type-arg]
        super().reset(seed=seed)
        self._t = 0
        return self._observations[0], {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:  # type: ignore[type-arg]
        self._t += 1
        index = self._t % len(self._observations)
        truncated = self._t >= self._ep_length
        return self._observations[index], self._rewards[index], False, truncated, {}


class DummyDictEnv(gym.Env[dict, np.ndarray]):  # type: ignore[type-arg]
    """SB3's dict test env: the same cycle in two keys."""

    def __init__(self) -> None:
        self.action_space = spaces.Box(1, 5, shape=(10, 7))
        space = spaces.Box(1, 5, (1,))
        self.observation_space = spaces.Dict({"observation": space, "achieved_goal": space})
        self._observations = np.array([[1.0], [2.0], [3.0], [4.0], [5.0]], dtype=np.float32)
        self._rewards = [1, 2, 3, 4, 5]
        self._t = 0
        self._ep_length = EP_LENGTH

    def _obs(self, i: int) -> dict[str, np.ndarray]:
        return {key: self._observations[i] for key in ("observation", "achieved_goal")}

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict]:  # type: ignore[type-arg]
        super().reset(seed=seed)
        self._t = 0
        return self._obs(0), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:  # type: ignore[type-arg]
        self._t += 1
        index = self._t % len(self._observations)
        truncated = self._t >= self._ep_length
        return self._obs(index), self._rewards[index], False, truncated, {}


def fill(buffer: ReplayBuffer, env: Any, steps: int, *, original: bool = False) -> None:
    """Step ``env`` (a VecEnv) with random actions and add every step (SB3's tests' loop)."""
    obs = env.reset()
    if original:  # VecNormalize: store the unnormalized values, as SB3's algorithms do
        obs = env.get_original_obs()
    for _ in range(steps):
        action = np.array([env.action_space.sample() for _ in range(env.num_envs)])
        next_obs, reward, done, info = env.step(action)
        if original:
            next_obs, reward = env.get_original_obs(), env.get_original_reward()
        buffer.add(obs, next_obs, action, reward, done, info)
        obs = next_obs


# ---------------------------------------------------------------------- SB3's suite, equivalents
@pytest.mark.parametrize("env_cls", [DummyEnv, DummyDictEnv])
def test_replay_buffer_normalization(env_cls: type[gym.Env]) -> None:  # type: ignore[type-arg]
    env = VecNormalize(make_vec_env(env_cls))
    buffer = ReplayBuffer(100, env.observation_space, env.action_space, device="cpu")
    fill(buffer, env, 100, original=True)
    sample = buffer.sample(50, env)
    for observations in (sample.observations, sample.next_observations):
        if isinstance(sample, DictReplayBufferSamples):
            for key in observations:
                assert th.allclose(observations[key].mean(0), th.zeros(1), atol=1)
        else:
            assert th.allclose(observations.mean(0), th.zeros(1), atol=1)
    assert np.allclose(sample.rewards.mean(0), np.zeros(1), atol=1)


@pytest.mark.parametrize("env_cls", [DummyEnv, DummyDictEnv])
@pytest.mark.parametrize("device", ["cpu", "cuda", "auto"])
def test_device_buffer(env_cls: type[gym.Env], device: str) -> None:  # type: ignore[type-arg]
    if device == "cuda" and not th.cuda.is_available():
        pytest.skip("CUDA not available")
    env = make_vec_env(env_cls)
    buffer = ReplayBuffer(EP_LENGTH, env.observation_space, env.action_space, device=device)
    fill(buffer, env, EP_LENGTH)
    desired = get_device(device).type
    for value in buffer.sample(50):
        if isinstance(value, dict):
            assert all(v.device.type == desired for v in value.values())
        elif isinstance(value, th.Tensor):
            assert value.device.type == desired
        else:
            assert value is None  # discounts of one-step samples
    assert buffer.sample(50).weights.device.type == desired


@pytest.mark.parametrize("obs_dtype", [np.uint8, np.float32, np.float64, np.int32])
@pytest.mark.parametrize("use_dict", [False, True])
@pytest.mark.parametrize(
    "action_space",
    [
        spaces.Discrete(10),
        spaces.Box(low=-1.0, high=1.0, dtype=np.float32),
        spaces.Box(low=-1.0, high=1.0, dtype=np.float64),
    ],
)
def test_buffer_dtypes(obs_dtype: type, use_dict: bool, action_space: spaces.Space) -> None:  # type: ignore[type-arg]
    obs_space = spaces.Box(0, 100, dtype=obs_dtype)
    expected_action = SB3ReplayBuffer._maybe_cast_dtype(action_space.dtype)
    if use_dict:
        space = spaces.Dict({"obs": obs_space, "obs_2": obs_space})
        buffer = ReplayBuffer(1, space, action_space)
        assert buffer.observations["obs"].dtype == obs_dtype
        assert buffer.observations["obs_2"].dtype == obs_dtype
    else:
        buffer = ReplayBuffer(1, obs_space, action_space)
        assert buffer.observations.dtype == obs_dtype
    assert buffer.actions.dtype == expected_action
    # ... and so do the stored steps (samples: test_sample_shapes_and_dtypes, whose few
    # dtype combinations keep the Numba kernels compiled for them few)
    obs = {k: np.full((1, 1), 7, obs_dtype) for k in ("obs", "obs_2")} if use_dict else (
        np.full((1, 1), 7, obs_dtype)
    )  # fmt: skip
    buffer.add(obs, obs, np.array([action_space.sample()]), np.ones(1), np.ones(1), [{}])
    stored = buffer.observations["obs_2"] if use_dict else buffer.observations
    assert stored.dtype == obs_dtype and stored[0, 0].tolist() == [7]
    assert buffer.actions.dtype == expected_action


# ---------------------------------------------------------------------- documented behaviour
SPACES = {
    "box": (spaces.Box(-1, 1, (3, 2), np.float32), (3, 2), th.float32),
    "discrete": (spaces.Discrete(5), (1,), th.int64),
    "multidiscrete": (spaces.MultiDiscrete([2, 3]), (2,), th.int64),
    "multibinary": (spaces.MultiBinary(4), (4,), th.int8),
}
ACTIONS = {
    "box": (spaces.Box(-1, 1, (2,), np.float32), 2, th.float32),
    "discrete": (spaces.Discrete(3), 1, th.int64),
    "multidiscrete": (spaces.MultiDiscrete([2, 2, 2]), 3, th.int64),
    "multibinary": (spaces.MultiBinary(2), 2, th.int8),
}


def random_steps(buffer: ReplayBuffer, steps: int, *, done_every: int = 7, seed: int = 0) -> None:
    """``steps`` adds of random values from the buffer's spaces, an episode ending every
    ``done_every`` steps (odd episodes truncated by a time limit), next_obs chained."""
    n = buffer.n_envs
    buffer.observation_space.seed(seed)
    buffer.action_space.seed(seed)

    def draw() -> Any:
        values = [buffer.observation_space.sample() for _ in range(n)]
        if isinstance(values[0], dict):
            return {k: np.stack([v[k] for v in values]) for k in values[0]}
        return np.stack([np.asarray(v) for v in values])

    obs = draw()
    for t in range(steps):
        nxt = draw()
        done = np.full(n, (t + 1) % done_every == 0)
        infos = [{"TimeLimit.truncated": bool(done[0]) and (t // done_every) % 2 == 1}] * n
        action = np.stack([np.asarray(buffer.action_space.sample()) for _ in range(n)])
        buffer.add(obs, nxt, action, np.full(n, float(t)), done, infos)
        obs = draw() if done[0] else nxt


@pytest.mark.parametrize(("obs_kind", "act_kind"), [(k, k) for k in sorted(SPACES)])
def test_sample_shapes_and_dtypes(obs_kind: str, act_kind: str) -> None:
    obs_space, obs_shape, obs_dtype = SPACES[obs_kind]
    act_space, action_dim, act_dtype = ACTIONS[act_kind]
    buffer = ReplayBuffer(64, obs_space, act_space, device="cpu", seed=0)
    random_steps(buffer, 40)
    s = buffer.sample(16)
    assert isinstance(s, ReplayBufferSamples) and isinstance(s, Samples)
    assert s.observations.shape == (16, *obs_shape) and s.observations.dtype == obs_dtype
    assert s.next_observations.shape == (16, *obs_shape)
    assert s.next_observations.dtype == obs_dtype
    assert s.actions.shape == (16, action_dim) and s.actions.dtype == act_dtype
    for flat in (s.rewards, s.dones, s.weights):
        assert flat.shape == (16, 1) and flat.dtype == th.float32
    assert s.discounts is None
    assert s.ids.shape == (16,) and s.ids.dtype == np.int64
    assert len(tuple(s)) == 6  # unpacks as SB3's six fields


def test_dict_samples() -> None:
    space = spaces.Dict(
        {"image": spaces.Box(0, 255, (2, 3), np.uint8), "vec": spaces.Box(-1, 1, (4,))}
    )
    buffer = ReplayBuffer(50, space, spaces.Discrete(2), device="cpu", n_steps=2, gamma=0.9)
    random_steps(buffer, 30)
    s = buffer.sample(8)
    assert isinstance(s, DictReplayBufferSamples) and isinstance(s, DictSamples)
    assert set(s.observations) == set(s.next_observations) == {"image", "vec"}
    assert s.observations["image"].shape == (8, 2, 3)
    assert s.observations["image"].dtype == th.uint8
    assert s.next_observations["vec"].shape == (8, 4)
    assert s.discounts is not None and s.discounts.shape == (8, 1)
    assert set(buffer.observations) == {"image", "vec"}


def test_size_pos_full_and_reset() -> None:
    """``size()`` counts adds up to ``buffer_size // n_envs``; ``pos`` wraps and sets ``full``;
    ``reset()`` empties the buffer (SB3's BaseBuffer)."""
    buffer = ReplayBuffer(20, spaces.Box(-1, 1, (2,)), spaces.Discrete(2), n_envs=2, seed=0)
    assert buffer.buffer_size == 10 and buffer.size() == 0 and not buffer.full
    random_steps(buffer, 7)
    assert (buffer.size(), buffer.pos, buffer.full) == (7, 7, False)
    random_steps(buffer, 5)
    assert (buffer.size(), buffer.pos, buffer.full) == (10, 2, True)
    buffer.reset()
    assert (buffer.size(), buffer.pos, buffer.full) == (0, 0, False)
    assert len(buffer.core) == 0
    with pytest.raises(rr.EmptyBufferError):
        buffer.sample(4)
    with pytest.raises(ValueError):  # EmptyBufferError is a ValueError, as SB3's empty draw
        buffer.sample(4)
    random_steps(buffer, 3)
    assert buffer.size() == 3 and buffer.sample(4).observations.shape == (4, 2)


def test_samples_after_the_first_add() -> None:
    """SB3 samples from the first stored transition on; so does this buffer: while the core
    has no complete transition, it draws among each env's newest step."""
    buffer = ReplayBuffer(10, spaces.Box(-1, 1, (1,)), spaces.Discrete(2), n_envs=2, seed=0)
    obs, nxt = np.array([[0.125], [0.25]], np.float32), np.array([[0.5], [0.75]], np.float32)
    buffer.add(obs, nxt, np.array([0, 1]), np.array([1.0, 2.0]), np.zeros(2), [{}, {}])
    s = buffer.sample(32)
    columns = (s.observations[:, 0], s.next_observations[:, 0], s.rewards[:, 0])
    pairs = set(zip(*(c.tolist() for c in columns), strict=True))
    assert pairs == {(0.125, 0.5, 1.0), (0.25, 0.75, 2.0)}
    assert s.dones.sum() == 0


def test_vector_envs_keep_their_own_transitions() -> None:
    """Each env's transitions pair its own observations (env e's values are e + t / 100)."""
    n, steps = 3, 30
    buffer = ReplayBuffer(300, spaces.Box(-10, 10, (1,)), spaces.Discrete(2), n_envs=n, seed=0)
    value = lambda t: np.arange(n, dtype=np.float32)[:, None] + t / 100  # noqa: E731
    for t in range(steps):
        done = np.full(n, t % 10 == 9)
        buffer.add(value(t), value(t + 1), np.zeros(n), np.arange(n, dtype=np.float32), done,
                   [{}] * n)  # fmt: skip
    s = buffer.sample(500)
    env = th.floor(s.observations[:, 0]).numpy()
    assert set(env.tolist()) == {0.0, 1.0, 2.0}
    np.testing.assert_allclose(s.rewards[:, 0].numpy(), env)
    np.testing.assert_allclose((s.next_observations - s.observations)[:, 0].numpy(), 0.01,
                               atol=1e-5)  # fmt: skip


@pytest.mark.parametrize("handle", [True, False])
def test_timeouts(handle: bool) -> None:
    """A done with ``TimeLimit.truncated`` bootstraps (``dones`` 0) only when
    ``handle_timeout_termination``; a plain done is always terminal."""
    buffer = ReplayBuffer(10, spaces.Box(-1, 1, (1,)), spaces.Discrete(2),
                          handle_timeout_termination=handle, seed=0)  # fmt: skip
    o = lambda x: np.array([[x]], np.float32)  # noqa: E731
    buffer.add(o(0.0), o(0.5), np.zeros(1), np.ones(1), np.ones(1), [{"TimeLimit.truncated": True}])
    buffer.add(o(0.25), o(0.75), np.zeros(1), np.ones(1), np.ones(1), [{}])
    s = buffer.sample(64)
    dones = dict(zip(s.observations[:, 0].tolist(), s.dones[:, 0].tolist(), strict=True))
    assert dones == {0.0: 0.0 if handle else 1.0, 0.25: 1.0}
    np.testing.assert_array_equal(buffer.timeouts[:2, 0], [1.0 if handle else 0.0, 0.0])
    np.testing.assert_array_equal(buffer.dones[:2, 0], [1.0, 1.0])


def test_extend() -> None:
    """``extend`` adds a batch of steps along the first axis, as repeated ``add`` calls."""
    a = ReplayBuffer(20, spaces.Box(-1, 1, (2,)), spaces.Discrete(2), n_envs=2, seed=3)
    b = ReplayBuffer(20, spaces.Box(-1, 1, (2,)), spaces.Discrete(2), n_envs=2, seed=3)
    rng = np.random.default_rng(0)
    T = 6
    obs = rng.normal(size=(T + 1, 2, 2)).astype(np.float32)
    action, reward = rng.integers(0, 2, (T, 2)), rng.normal(size=(T, 2))
    done = np.zeros((T, 2))
    done[3] = 1
    infos = [[{}, {}] for _ in range(T)]
    a.extend(obs[:-1], obs[1:], action, reward, done, infos)
    for t in range(T):
        b.add(obs[t], obs[t + 1], action[t], reward[t], done[t], infos[t])
    assert a.size() == b.size() == T
    for name in ("observations", "actions", "rewards", "dones"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    for x, y in zip(a.sample(16), b.sample(16), strict=True):
        assert (x is None and y is None) or th.equal(x, y)


def test_snapshots_follow_sb3_positions() -> None:
    buffer = ReplayBuffer(4, spaces.Box(-9, 9, (1,)), spaces.Discrete(2), seed=0)
    for t in range(6):  # positions 0, 1 rewritten by steps 4, 5
        buffer.add(np.array([[t]], np.float32), np.array([[t + 1]], np.float32), np.zeros(1),
                   np.array([10.0 * t]), np.zeros(1), [{}])  # fmt: skip
    np.testing.assert_array_equal(buffer.observations[:, 0, 0], [4, 5, 2, 3])
    np.testing.assert_array_equal(buffer.rewards[:, 0], [40, 50, 20, 30])
    snapshot = buffer.dones
    snapshot[1] = 1.0  # a copy: SB3's "truncate the last trajectory" write changes nothing here
    assert buffer.dones.sum() == 0


def test_a_new_reset_cuts_the_running_episode() -> None:
    """An ``obs`` that is not the previous ``next_obs`` (the env was reset without a done, as
    a second ``learn()`` does) ends the episode there, truncated at the stored ``next_obs``:
    no n-step window joins the two episodes."""
    buffer = ReplayBuffer(50, spaces.Box(-99, 99, (1,)), spaces.Discrete(2), n_steps=3,
                          gamma=0.5, seed=0)  # fmt: skip
    o = lambda x: np.array([[x]], np.float32)  # noqa: E731
    for t in range(3):  # episode A: 0, 1, 2 -> next 3 (never seen as an obs)
        buffer.add(o(t), o(t + 1), np.zeros(1), np.ones(1), np.zeros(1), [{}])
    for t in range(10, 16):  # episode B after a reset
        buffer.add(o(t), o(t + 1), np.zeros(1), np.ones(1), np.zeros(1), [{}])
    s = buffer.sample(256)
    rows = {(a, b, r, d) for a, b, r, d in zip(s.observations[:, 0].tolist(),
            s.next_observations[:, 0].tolist(), s.rewards[:, 0].tolist(),
            s.discounts[:, 0].tolist(), strict=True)}  # fmt: skip
    assert rows == {
        (0.0, 3.0, 1.75, 0.125),
        (1.0, 3.0, 1.5, 0.25),
        (2.0, 3.0, 1.0, 0.5),  # cut at 3
        (10.0, 13.0, 1.75, 0.125),
        (11.0, 14.0, 1.75, 0.125),
        (12.0, 15.0, 1.75, 0.125),
    }
    assert s.dones.sum() == 0  # a cut bootstraps


def test_n_steps_needs_gamma_and_one_name() -> None:
    box, act = spaces.Box(-1, 1, (1,)), spaces.Discrete(2)
    with pytest.raises(ValueError, match="gamma"):
        ReplayBuffer(10, box, act, n_steps=3)
    with pytest.raises(ValueError, match="n_steps=3 and n_step=2"):
        ReplayBuffer(10, box, act, n_steps=3, n_step=2, gamma=0.9)
    assert ReplayBuffer(10, box, act, n_step=3, gamma=0.9).n_steps == 3
    assert ReplayBuffer(10, box, act, optimize_memory_usage=True).optimize_memory_usage


def test_seeded_by_numpy_global_generator() -> None:
    """Without ``seed``, the core's generator comes from NumPy's global one, which SB3's
    ``set_random_seed`` seeds: same seed, same samples."""

    def samples() -> th.Tensor:
        np.random.seed(5)  # noqa: NPY002 (what SB3's set_random_seed seeds)
        buffer = ReplayBuffer(40, spaces.Box(-1, 1, (2,)), spaces.Discrete(2))
        random_steps(buffer, 30)
        return buffer.sample(8).observations

    assert th.equal(samples(), samples())


# ---------------------------------------------------------------------- pickling, algorithms
def test_pickle_round_trip_continues_the_same_samples() -> None:
    import pickle

    buffer = ReplayBuffer(40, spaces.Box(-1, 1, (2,)), spaces.Discrete(2), n_envs=2,
                          n_steps=2, gamma=0.9, seed=1)  # fmt: skip
    random_steps(buffer, 25)
    copy = pickle.loads(pickle.dumps(buffer))
    assert (copy.size(), copy.pos, copy.full) == (buffer.size(), buffer.pos, buffer.full)
    for x, y in zip(buffer.sample(16), copy.sample(16), strict=True):
        assert th.equal(x, y)
    np.testing.assert_array_equal(copy.observations, buffer.observations)


@pytest.mark.parametrize("algo", [DQN, SAC, TD3])
def test_algorithms_learn_save_and_load_the_buffer(algo: type, tmp_path: Any) -> None:
    """SB3's off-policy algorithms train with the class (SB3's ``test_custom_replay_buffer``
    style) and ``save_replay_buffer`` / ``load_replay_buffer`` round-trip it."""
    env_id = "CartPole-v1" if algo is DQN else "Pendulum-v1"
    kwargs: dict[str, Any] = {"n_steps": 2, "gamma": 0.99}
    if algo is DQN:
        kwargs = {"n_steps": 3, "gamma": 0.99, "prioritized": True}
    model = algo("MlpPolicy", env_id, replay_buffer_class=ReplayBuffer, learning_starts=50,
                 buffer_size=500, replay_buffer_kwargs=kwargs, seed=0,
                 policy_kwargs={"net_arch": [16]}, device="cpu")  # fmt: skip
    model.learn(150)
    assert isinstance(model.replay_buffer, ReplayBuffer)
    path = tmp_path / "buffer.pkl"
    model.save_replay_buffer(path)
    before = model.replay_buffer
    model.replay_buffer = None
    model.load_replay_buffer(path)
    loaded = model.replay_buffer
    assert isinstance(loaded, ReplayBuffer) and loaded is not before
    stored = model.num_timesteps  # (DQN collects 4 steps per train_freq)
    assert loaded.size() == before.size() == stored and loaded.n_steps == before.n_steps
    np.testing.assert_array_equal(loaded.observations, before.observations)
    model.learn(60, reset_num_timesteps=False)  # keeps training on the loaded buffer
    assert model.replay_buffer.size() == model.num_timesteps >= stored + 60
    stream = io.BytesIO()
    model.save_replay_buffer(stream)
    assert stream.getbuffer().nbytes > 0


def test_optimize_memory_usage_and_a_second_learn() -> None:
    """SB3 accepts ``optimize_memory_usage=True`` only without timeout handling and marks the
    last stored step done at a second ``learn()``; this buffer accepts both settings and cuts
    the running episode itself when the env is reset."""
    model = DQN("MlpPolicy", "CartPole-v1", replay_buffer_class=ReplayBuffer,
                optimize_memory_usage=True, learning_starts=20, buffer_size=300, seed=0,
                policy_kwargs={"net_arch": [8]}, device="cpu")  # fmt: skip
    model.learn(40)
    with pytest.warns(UserWarning, match="will be truncated"):  # SB3's, for its own buffer
        model.learn(40)  # reset_num_timesteps=True: the env is reset mid-episode
    assert model.replay_buffer.size() == 80


def test_samples_copy_pickle_and_replace() -> None:
    import copy
    import pickle

    buffer = ReplayBuffer(40, spaces.Box(-1, 1, (2,)), spaces.Discrete(2), seed=0)
    random_steps(buffer, 20)
    s = buffer.sample(4)
    for other in (pickle.loads(pickle.dumps(s)), copy.copy(s), copy.deepcopy(s)):
        assert type(other) is Samples and np.array_equal(other.ids, s.ids)
        assert th.equal(other.weights, s.weights) and th.equal(other.rewards, s.rewards)
    changed = s._replace(rewards=s.rewards * 2)
    assert th.equal(changed.rewards, s.rewards * 2) and changed.ids is s.ids
    with pytest.raises(ValueError, match="unexpected"):
        s._replace(nope=1)
