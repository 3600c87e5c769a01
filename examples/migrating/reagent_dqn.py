"""A ReAgent-style DQN replay loop, moved to rlreplay by changing only the import line.

The buffer is declared as ReAgent's documented constructor declares it (``observation_shape``,
the default ``uint8`` frames), the environment hands out float64 frames as NumPy does, and the
buffer casts them on ``add`` exactly as ReAgent's preallocated arrays do. A small Q-network
trains on uniform samples, then on prioritized samples whose priorities it updates with
``set_priority``. Every check is an ``assert`` on what ReAgent documents.
"""

import numpy as np
import torch

# from reagent.replay_memory import PrioritizedReplayBuffer, ReplayBuffer
from rlreplay.compat.reagent import PrioritizedReplayBuffer, ReplayBuffer

FRAME = (4, 4)
NUM_ACTIONS = 2


class Corridor:
    """Walk right to the goal (cell 5); frames are float64 images with the agent at 255."""

    def reset(self):
        self.pos = 0
        return self._frame()

    def step(self, action):
        self.pos = max(0, self.pos + (1 if action == 1 else -1))
        done = self.pos == 5
        return self._frame(), (1.0 if done else -0.1), done

    def _frame(self):
        frame = np.zeros(FRAME)  # float64, as NumPy makes it
        frame.flat[self.pos] = 255.0
        return frame


def fill(buffer, env, steps, rng, prioritized=False):
    obs = env.reset()
    for t in range(steps):
        action = int(rng.integers(NUM_ACTIONS))
        next_obs, reward, done = env.step(action)
        done = done or t % 50 == 49
        if prioritized:
            buffer.add(obs, action, reward, done, buffer.sum_tree.max_recorded_priority)
        else:
            buffer.add(obs, action, reward, done)
        obs = env.reset() if done else next_obs


def q_values(net, states):
    # states: (B, 4, 4, stack) uint8 -> floats in [0, 1]
    return net(states.float().flatten(1) / 255.0)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    env = Corridor()
    gamma, horizon, stack = 0.9, 3, 2

    buffer = ReplayBuffer(
        observation_shape=FRAME,
        stack_size=stack,
        replay_capacity=2000,
        batch_size=32,
        update_horizon=horizon,
        gamma=gamma,
    )
    fill(buffer, env, 1500, rng)
    assert buffer.get_storage_signature()[0].type == np.uint8
    assert int(buffer.add_count) >= 1500 and buffer.size > 0

    batch = buffer.sample_transition_batch()
    assert batch.state.shape == (32, *FRAME, stack) and batch.state.dtype == torch.uint8
    assert set(batch.state.unique().tolist()) <= {0, 255}  # float64 frames stored as uint8
    assert batch.action.shape == (32, 1) and batch.action.dtype == torch.int32
    assert batch.reward.shape == (32, 1) and batch.terminal.shape == (32, 1)
    assert ((batch.step >= 1) & (batch.step <= horizon)).all()

    net = torch.nn.Sequential(
        torch.nn.Linear(16 * stack, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2)
    )
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)

    def td_errors(batch):
        q = q_values(net, batch.state).gather(1, batch.action.long())
        with torch.no_grad():
            best_next = q_values(net, batch.next_state).max(1, keepdim=True).values
        not_terminal = 1.0 - batch.terminal.float()
        target = batch.reward + not_terminal * gamma ** batch.step.float() * best_next
        return target - q

    for _ in range(150):
        loss = td_errors(buffer.sample_transition_batch()).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    final_loss = td_errors(buffer.sample_transition_batch(batch_size=256)).pow(2).mean().item()
    print(f"uniform replay: TD loss {final_loss:.4f}")
    assert final_loss < 0.5

    # Prioritized replay: same arguments, plus a priority per add and set_priority updates.
    per = PrioritizedReplayBuffer(
        observation_shape=FRAME,
        stack_size=stack,
        replay_capacity=2000,
        batch_size=32,
        update_horizon=horizon,
        gamma=gamma,
    )
    fill(per, env, 1500, rng, prioritized=True)
    for _ in range(50):
        batch = per.sample_transition_batch()
        errors = td_errors(batch)
        weights = 1.0 / batch.sampling_probabilities  # ReAgent returns the priorities
        loss = (weights / weights.max() * errors.pow(2)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        new_priorities = errors.detach().abs().reshape(-1) + 1e-3
        per.set_priority(batch.indices, new_priorities)
        np.testing.assert_allclose(
            per.get_priority(batch.indices.reshape(-1).numpy().astype(np.int32))[-1],
            new_priorities[-1].item(),
            rtol=1e-6,
        )
    draws = per.sample_index_batch(2000).numpy()
    priorities = per.get_priority(draws.astype(np.int32))
    assert (priorities > 0).all()
    print(f"prioritized replay: mean priority of draws {priorities.mean():.4f}")


if __name__ == "__main__":
    main()
