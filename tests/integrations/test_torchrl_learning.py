"""TorchRL's DQN (its DQNLoss, a Collector over gymnasium's CartPole-v1) learns with the
adapter as its replay buffer: plain with n-step returns, and prioritized."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchrl")
pytest.importorskip("gymnasium")

from tensordict.nn import TensorDictSequential  # noqa: E402

with warnings.catch_warnings():
    # torchrl 0.14.1 warns, on importing its collectors, about classes of its own.
    warnings.filterwarnings(
        "ignore", "Creating .* which inherits from WeightUpdaterBase", DeprecationWarning
    )
    from torchrl.collectors import Collector
from torchrl.envs import GymEnv, StepCounter, TransformedEnv  # noqa: E402
from torchrl.modules import MLP, EGreedyModule, QValueActor  # noqa: E402
from torchrl.objectives import DQNLoss, SoftUpdate  # noqa: E402

from rlreplay.integrations.torchrl import (  # noqa: E402
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One torch thread (small networks; the machine is shared), restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def train_dqn(rb: TensorDictReplayBuffer, *, frames: int, seed: int = 0) -> tuple[list[int], float]:
    """Train a DQN on CartPole-v1 for ``frames`` steps with TorchRL's own parts and ``rb``.

    Returns the length (= return) of every finished training episode, in order, and the mean
    return of three greedy evaluation episodes (of at most 300 steps) at the end.
    """
    torch.manual_seed(seed)
    env = TransformedEnv(GymEnv("CartPole-v1"), StepCounter())
    env.set_seed(seed)
    net = MLP(out_features=2, num_cells=[64, 64])
    actor = QValueActor(net, in_keys=["observation"], spec=env.action_spec)
    explore = EGreedyModule(
        env.action_spec, eps_init=1.0, eps_end=0.05, annealing_num_steps=frames // 2
    )
    policy = TensorDictSequential(actor, explore)
    loss = DQNLoss(actor, action_space=env.action_spec, delay_value=True, loss_function="l2")
    loss.make_value_estimator(gamma=0.99)
    target = SoftUpdate(loss, eps=0.99)
    optim = torch.optim.Adam(loss.parameters(), lr=2e-3)
    collector = Collector(
        env, policy, frames_per_batch=8, total_frames=frames, init_random_frames=256,
        auto_register_policy_transforms=False,
    )  # fmt: skip
    lengths: list[int] = []
    for data in collector:
        done = data["next", "done"].squeeze(-1)
        lengths += data["next", "step_count"][done].squeeze(-1).tolist()
        rb.extend(data)
        explore.step(data.numel())
        if rb.write_count < 256:
            continue
        for _ in range(4):
            sample = rb.sample()
            out = loss(sample)
            optim.zero_grad()
            out["loss"].backward()
            optim.step()
            target.step()
            rb.update_tensordict_priority(sample)
        collector.update_policy_weights_()
    collector.shutdown()
    returns = []
    with torch.no_grad():
        for _ in range(3):
            rollout = env.rollout(300, actor)
            returns.append(float(rollout["next", "reward"].sum()))
    env.close()
    return lengths, float(np.mean(returns))


def report(lengths: list[int]) -> dict[str, Any]:
    return {"episodes": len(lengths), "last10": float(np.mean(lengths[-10:]))}


def test_dqn_learns_cartpole_with_n_step_returns(one_thread: None) -> None:
    rb = TensorDictReplayBuffer(10_000, batch_size=64, n_step=3, gamma=0.99, seed=0)
    lengths, greedy = train_dqn(rb, frames=3_000)
    # A random policy lasts about 22 steps; a DQN that learned holds the pole far longer.
    assert np.mean(lengths[-10:]) >= 100, report(lengths)
    assert greedy >= 150, (greedy, report(lengths))


@pytest.mark.slow
def test_dqn_learns_cartpole_with_prioritized_replay(one_thread: None) -> None:
    rb = TensorDictPrioritizedReplayBuffer(
        10_000, alpha=0.6, beta=0.4, batch_size=64, n_step=3, gamma=0.99, seed=0
    )
    lengths, greedy = train_dqn(rb, frames=3_000)
    assert np.mean(lengths[-10:]) >= 100, report(lengths)
    assert greedy >= 150, (greedy, report(lengths))
