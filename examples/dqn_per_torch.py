"""DQN with prioritized replay in PyTorch on CartPole-v1, fed by rlreplay.

A double DQN with 3-step returns learns from a proportional prioritized buffer: each batch
comes out of the buffer as torch tensors that share the batch's memory
(``rlreplay.io.convert(batch, "torch")``, no copy), the importance weights scale the Huber
loss, and the new |TD errors| go back with ``update_priorities``. It runs in well under a
minute on one idle CPU core (it stops once an evaluation reaches 450) and checks that the
greedy policy learned (a mean evaluation return of at least 200 of the 500 possible; a random
policy gets about 20).

    pip install -c constraints.txt -e ".[torch,gym]" && python examples/dqn_per_torch.py
"""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import torch
from torch import nn

import rlreplay as rr
from rlreplay.io import convert

SEED, STEPS, BATCH, GAMMA, N_STEP = 0, 10_000, 64, 0.99, 3
torch.manual_seed(SEED)
torch.set_num_threads(1)


def q_network() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                         nn.Linear(128, 2))  # fmt: skip


def evaluate(q: nn.Module, episodes: int = 10) -> float:
    env = gym.make("CartPole-v1")
    total = 0.0
    for k in range(episodes):
        obs, _ = env.reset(seed=10_000 + k)
        done = False
        while not done:
            with torch.no_grad():
                action = int(q(torch.as_tensor(obs)).argmax())
            obs, reward, term, trunc, _ = env.step(action)
            total += float(reward)
            done = term or trunc
    return total / episodes


def main() -> None:
    env = gym.make("CartPole-v1")
    buf = rr.PrioritizedReplayBuffer.from_spaces(
        env.observation_space, env.action_space, capacity=50_000, n_step=N_STEP, gamma=GAMMA,
        alpha=0.6, beta=0.4, beta_final=1.0, beta_steps=STEPS, seed=SEED,
    )  # fmt: skip
    q, target = q_network(), q_network()
    target.load_state_dict(q.state_dict())
    opt = torch.optim.Adam(q.parameters(), lr=1e-3)
    rng = np.random.default_rng(SEED)
    obs, _ = env.reset(seed=SEED)
    history: list[tuple[int, float]] = []
    started = time.monotonic()
    for step in range(1, STEPS + 1):
        eps = max(0.05, 1.0 - step / 8_000)
        if rng.random() < eps:
            action = int(rng.integers(2))
        else:
            with torch.no_grad():
                action = int(q(torch.as_tensor(obs)).argmax())
        nxt, reward, term, trunc, _ = env.step(action)
        buf.add(obs=obs, action=action, reward=reward, terminated=term, truncated=trunc,
                next_obs=nxt)  # fmt: skip
        obs = nxt if not (term or trunc) else env.reset()[0]
        if step < 1_000:
            continue

        batch = buf.sample(BATCH)
        b = convert(batch, "torch")  # tensors over the batch's own arrays: no copy
        with torch.no_grad():
            best = q(b.next_obs).argmax(dim=1, keepdim=True)  # double DQN
            bootstrap = target(b.next_obs).gather(1, best).squeeze(1)
            td_target = b.reward + b.discount * bootstrap  # discount: 0 if terminated, else g^n
        prediction = q(b.obs).gather(1, b.action.unsqueeze(1)).squeeze(1)
        td = td_target - prediction
        loss = (b.weights * nn.functional.smooth_l1_loss(prediction, td_target,
                                                          reduction="none")).mean()  # fmt: skip
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(q.parameters(), 10.0)
        opt.step()
        buf.update_priorities(batch.ids, td.detach().abs().numpy() + 1e-3)
        with torch.no_grad():  # Polyak-averaged target network
            for p, tp in zip(q.parameters(), target.parameters(), strict=True):
                tp.mul_(0.995).add_(p, alpha=0.005)
        if step % 2_000 == 0:
            history.append((step, evaluate(q)))
            print(f"step {step:6d}  eval return {history[-1][1]:6.1f}  beta {buf.beta:.2f}  "
                  f"{time.monotonic() - started:5.1f} s", flush=True)  # fmt: skip
            if history[-1][1] >= 450.0:  # solved: stop early
                break
    best = max(r for _, r in history)
    print(f"best evaluation return: {best:.1f}")
    assert best >= 200.0, f"DQN with PER did not learn CartPole: {history}"


if __name__ == "__main__":
    main()
