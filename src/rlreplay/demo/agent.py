"""The learner of ``rlreplay demo``: the Q-network, the Double DQN agent and its evaluator.

This module holds what touches torch and the evaluation environments: torch's seeding and
thread set-up (:func:`_configure_torch`), the Q-network MLP, :class:`_Agent` (Double DQN with a
Polyak target and a Huber loss) and :class:`_Evaluator` (greedy episodes in lockstep). torch
and gymnasium are optional extras, imported inside the functions that use them; the run loop
lives in :mod:`rlreplay.demo.trainer`, the entry points in :mod:`rlreplay.demo`.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import numpy as np

from rlreplay.demo.config import ENV_ID, DemoConfig

if TYPE_CHECKING:
    import torch

    import rlreplay as rr


def _configure_torch(cfg: DemoConfig) -> None:
    """Seed torch and size its thread pools.

    One intra-op thread by default: a 4-256-256-2 MLP on batches of 128 is small, so on 2 cores
    a second thread saved only ~20% of a gradient step on an idle machine, while with anything
    else running the threads spin-wait on each other (measured end to end, seed 0: 25 s to
    pass with one thread, 119 s with two).
    """
    import torch

    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.torch_threads)
    # Only allowed before torch first runs parallel work; a second run in the same process
    # (tests) raises, and keeps the first setting, which is the same.
    with contextlib.suppress(RuntimeError):
        torch.set_num_interop_threads(1)


def _mlp(obs_dim: int, n_actions: int, hidden: int) -> torch.nn.Sequential:
    """Build the Q-network: obs -> Q-value per action."""
    from torch import nn

    return nn.Sequential(
        nn.Linear(obs_dim, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, n_actions),
    )


class _Agent:
    """Double DQN with a Polyak-averaged target network and a Huber loss.

    Invariant: ``target`` has the architecture of ``q`` and is never trained directly.
    Cost: one gradient step is three forwards of ``batch_size`` rows and one backward.
    """

    def __init__(self, obs_dim: int, n_actions: int, cfg: DemoConfig) -> None:
        import torch

        self._cfg = cfg
        self.q = _mlp(obs_dim, n_actions, cfg.hidden)
        self.target = _mlp(obs_dim, n_actions, cfg.hidden)
        self.target.load_state_dict(self.q.state_dict())
        self.target.requires_grad_(False)
        # foreach: one fused call per Adam op instead of one per tensor; with six small
        # tensors the per-call overhead is most of the optimiser's cost.
        self._opt = torch.optim.Adam(self.q.parameters(), lr=cfg.lr, foreach=True)
        self._q_params = list(self.q.parameters())
        self._target_params = list(self.target.parameters())

    def greedy(self, obs: np.ndarray[Any, Any]) -> np.ndarray[Any, np.dtype[np.int64]]:
        """Return the greedy action for each row of ``obs`` (shape ``(B, obs_dim)``)."""
        import torch

        with torch.no_grad():
            q_values = self.q(torch.as_tensor(obs, dtype=torch.float32))
        actions: np.ndarray[Any, np.dtype[np.int64]] = q_values.argmax(dim=1).numpy()
        return actions

    def update(self, batch: rr.Batch) -> float:
        """Take one gradient step on a sampled batch; return the loss."""
        import torch

        obs = torch.from_numpy(batch.obs)
        next_obs = torch.from_numpy(batch.next_obs)
        action = torch.from_numpy(batch.action).unsqueeze(1)
        with torch.no_grad():
            # Double DQN: the online net picks the next action, the target net values it,
            # which curbs max-operator overestimation.
            next_action = self.q(next_obs).argmax(dim=1, keepdim=True)
            next_q = self.target(next_obs).gather(1, next_action).squeeze(1)
            # The buffer already folds termination (0) versus truncation and n-step length
            # (gamma**m) into ``discount``, so truncated episodes bootstrap as they should.
            target = torch.from_numpy(batch.reward) + torch.from_numpy(batch.discount) * next_q
        q_taken = self.q(obs).gather(1, action).squeeze(1)
        loss = torch.nn.functional.smooth_l1_loss(q_taken, target)
        self._opt.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(self._q_params, self._cfg.max_grad_norm)
        self._opt.step()
        with torch.no_grad():
            for target_param, param in zip(self._target_params, self._q_params, strict=True):
                target_param.lerp_(param, self._cfg.tau)
        return float(loss.item())


class _Evaluator:
    """Plays ``episodes`` greedy episodes in lockstep, one batched forward per time step.

    The environments are built once and re-seeded per evaluation so each evaluation sees fresh
    but reproducible start states.
    """

    def __init__(self, episodes: int, seed: int) -> None:
        import gymnasium

        self._envs = [gymnasium.make(ENV_ID) for _ in range(episodes)]
        self._seed = seed
        self._calls = 0

    def evaluate(self, agent: _Agent) -> float:
        """Return the mean undiscounted return of the greedy policy."""
        n = len(self._envs)
        # Distinct seeds per evaluation and per episode, disjoint from the training env's.
        base = self._seed + 1_000_003 * (self._calls + 1)
        self._calls += 1
        obs = np.stack([env.reset(seed=base + i)[0] for i, env in enumerate(self._envs)])
        returns = np.zeros(n)
        alive = np.ones(n, dtype=bool)
        while alive.any():
            idx = np.flatnonzero(alive)
            actions = agent.greedy(obs[idx])
            for i, action in zip(idx, actions, strict=True):
                obs[i], reward, terminated, truncated, _ = self._envs[i].step(int(action))
                returns[i] += float(reward)
                alive[i] = not (terminated or truncated)
        return float(returns.mean())

    def close(self) -> None:
        """Close every environment."""
        for env in self._envs:
            env.close()
