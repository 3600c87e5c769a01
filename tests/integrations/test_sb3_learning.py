"""Stable-Baselines3's DQN solves CartPole-v1 with rlreplay's buffer (3-step returns).

The full task, not a reduced one: RL Zoo's DQN hyperparameters for CartPole-v1, the buffer
passed as ``replay_buffer_class`` with ``n_steps=3``, seeded. Every 2,560 steps the greedy
policy plays 10 evaluation episodes; the test passes once their mean return reaches
CartPole-v1's reward threshold, 475, and fails if that has not happened within 30,720
steps. With seed 0 it happens at 5,120 steps (about 5 s on a 2-core VM); over seeds 0 to 7
the first such evaluation came between 5,120 and 25,600 steps, so a machine whose float
arithmetic takes another trajectory still passes (at most about 45 s on that VM).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("stable_baselines3")

import gymnasium as gym
import torch as th
from stable_baselines3 import DQN
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.monitor import Monitor

from rlreplay.integrations.sb3 import ReplayBuffer

THRESHOLD = 475.0  # CartPole-v1's reward threshold
EVAL_EVERY = 2_560  # ten rounds of train_freq=256
BUDGET = 30_720


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One torch thread: the run is reproducible and leaves the other core to others."""
    before = th.get_num_threads()
    th.set_num_threads(1)
    yield
    th.set_num_threads(before)


def test_dqn_solves_cartpole(one_thread: None) -> None:
    model = DQN(
        "MlpPolicy", "CartPole-v1",
        replay_buffer_class=ReplayBuffer, replay_buffer_kwargs={"n_steps": 3, "gamma": 0.99},
        learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1_000,
        gamma=0.99, target_update_interval=10, train_freq=256, gradient_steps=128,
        exploration_fraction=0.16, exploration_final_eps=0.04,
        policy_kwargs={"net_arch": [256, 256]}, seed=0, device="cpu",
    )  # fmt: skip
    eval_env = Monitor(gym.make("CartPole-v1"))
    eval_env.reset(seed=1)
    history = []
    while model.num_timesteps < BUDGET:
        model.learn(EVAL_EVERY, reset_num_timesteps=False)
        mean, _ = evaluate_policy(model, eval_env, n_eval_episodes=10, deterministic=True)
        history.append((model.num_timesteps, float(mean)))
        if mean >= THRESHOLD:
            break
    assert isinstance(model.replay_buffer, ReplayBuffer)
    assert history[-1][1] >= THRESHOLD, f"no evaluation reached {THRESHOLD}: {history}"
