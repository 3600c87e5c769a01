"""Side by side with Stable-Baselines3's own buffers: the same steps in, the same samples out.

Random trajectories (terminations, time-limit truncations, vector envs, a ring that wraps)
go into SB3's ``ReplayBuffer`` (one-step) or ``NStepReplayBuffer`` and into
:class:`rlreplay.integrations.sb3.ReplayBuffer`. For every SB3 position whose transition
this buffer can sample, SB3's ``_get_samples`` and this buffer give the same observations,
actions, next observations, dones, rewards and discounts, with and without a
``VecNormalize`` (rewards normalized, and clipped, step by step before the n-step sum).
Positions this buffer does not sample are those whose window is not known yet: SB3 samples
them with a window cut at the newest step (its ``NStepReplayBuffer``) or with the next
observation it was given.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import NStepReplayBuffer
from stable_baselines3.common.buffers import ReplayBuffer as SB3ReplayBuffer
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize

from rlreplay.integrations.sb3 import ReplayBuffer
from tests.integrations.test_sb3_buffer import DummyEnv

OBS = spaces.Box(1, 5, (1,))  # DummyEnv's space, so that its VecNormalize applies
ACT = spaces.Discrete(3)


def trajectory(rng: np.random.Generator, steps: int, n_envs: int) -> list[tuple[Any, ...]]:
    """``steps`` SB3 ``add`` argument tuples: episodes of random length per env, ending
    terminated or by a time limit, ``next_obs`` chained within an episode."""
    obs = rng.uniform(1, 5, (n_envs, 1)).astype(np.float32)
    out = []
    for _ in range(steps):
        nxt = rng.uniform(1, 5, (n_envs, 1)).astype(np.float32)
        done = rng.random(n_envs) < 0.15
        timeout = done & (rng.random(n_envs) < 0.5)
        infos = [{"TimeLimit.truncated": bool(x)} for x in timeout]
        action = rng.integers(0, 3, n_envs)
        reward = rng.normal(0, 2, n_envs).astype(np.float32)
        out.append((obs, nxt, action, reward, done.astype(np.float32), infos))
        obs = np.where(done[:, None], rng.uniform(1, 5, (n_envs, 1)), nxt).astype(np.float32)
    return out


def normalizer(n_envs: int) -> VecNormalize:
    """A VecNormalize whose reward clip cuts some rewards (scale 1, clip 1.5; rewards have a
    standard deviation of 2), so that per-step and summed normalization differ."""
    env = VecNormalize(make_vec_env(DummyEnv, n_envs=n_envs, seed=0), clip_reward=1.5)
    env.obs_rms.mean, env.obs_rms.var = np.array([3.0]), np.array([2.0])
    env.ret_rms.var = np.array(1.0 - env.epsilon)
    env.training = False
    return env


@pytest.mark.parametrize("n_steps", [1, 3])
@pytest.mark.parametrize("n_envs", [1, 2])
@pytest.mark.parametrize("handle_timeout", [True, False])
@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_same_samples_as_sb3(
    n_steps: int, n_envs: int, handle_timeout: bool, normalize: bool, seed: int
) -> None:
    buffer_size = 40 * n_envs
    steps = 70  # the ring wraps
    common: dict[str, Any] = {"device": "cpu", "n_envs": n_envs,
                              "handle_timeout_termination": handle_timeout}  # fmt: skip
    theirs: SB3ReplayBuffer
    if n_steps == 1:
        theirs = SB3ReplayBuffer(buffer_size, OBS, ACT, **common)
    else:
        theirs = NStepReplayBuffer(buffer_size, OBS, ACT, n_steps=n_steps, gamma=0.9, **common)
    ours = ReplayBuffer(buffer_size, OBS, ACT, n_steps=n_steps, gamma=0.9, seed=seed, **common)
    for args in trajectory(np.random.default_rng(seed), steps, n_envs):
        theirs.add(*args)
        ours.add(*args)
    assert (ours.pos, ours.full, ours.size()) == (theirs.pos, theirs.full, theirs.size())
    env = normalizer(n_envs) if normalize else None

    # Every stored position, several times: SB3 draws each one's env from NumPy's global
    # generator, so draw them here first, from the same state.
    positions = np.tile(np.arange(theirs.size()), 3)
    np.random.seed(seed)  # noqa: NPY002 (SB3 draws from the legacy global generator)
    state = np.random.get_state()  # noqa: NPY002
    envs = np.random.randint(0, n_envs, size=positions.shape)  # noqa: NPY002
    np.random.set_state(state)  # noqa: NPY002
    expected = theirs._get_samples(positions, env=env)
    ids = ours._ids[positions, envs]
    keep = np.isin(ids, ours.core.sampleable_ids())
    assert keep.mean() > 0.6  # most positions compared
    got = ours._convert(ours.core.get_transitions(ids[keep]), env)
    expected = type(expected)(*(None if x is None else x[keep] for x in expected))
    for name in ("observations", "actions", "next_observations", "dones"):
        a, b = getattr(expected, name), getattr(got, name)
        assert th.equal(a.to(b.dtype), b), name
    th.testing.assert_close(got.rewards, expected.rewards, rtol=1e-5, atol=1e-5)
    if n_steps == 1:
        assert expected.discounts is None and got.discounts is None
    else:
        th.testing.assert_close(got.discounts, expected.discounts)
