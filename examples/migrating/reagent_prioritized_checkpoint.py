"""ReAgent prioritized replay with checkpoints, unchanged apart from the import line.

A ReAgent training loop that keeps its replay memory across restarts: it fills a
``PrioritizedReplayBuffer`` from a toy environment, trains on prioritized batches (updating
priorities with TD errors given as a torch tensor), saves the buffer every iteration with
``save(checkpoint_dir, iteration)`` as ReAgent's checkpointing does, then "restarts": a fresh
buffer ``load``\\ s the last iteration and training goes on. The sum tree file is ReAgent's
pickled ``SumTree``, so ReAgent itself could read these checkpoints back. Every check is an
``assert`` on what ReAgent documents.
"""

from __future__ import annotations

import gzip
import os
import pickletools
import tempfile

import numpy as np
import torch

# from reagent.replay_memory import PrioritizedReplayBuffer
from rlreplay.compat.reagent import PrioritizedReplayBuffer

STATE_DIM, NUM_ACTIONS, CAPACITY, BATCH = 4, 2, 500, 32


def make_buffer() -> PrioritizedReplayBuffer:
    return PrioritizedReplayBuffer(
        observation_shape=(STATE_DIM,),
        stack_size=1,
        replay_capacity=CAPACITY,
        batch_size=BATCH,
        update_horizon=3,
        gamma=0.99,
        observation_dtype=np.float32,
    )


def play(buffer: PrioritizedReplayBuffer, steps: int, rng: np.random.Generator) -> None:
    """A random walk; an episode ends when it leaves [-2, 2]."""
    obs = np.zeros(STATE_DIM)
    for _ in range(steps):
        action = int(rng.integers(NUM_ACTIONS))
        next_obs = obs + rng.normal(0.0, 0.3, STATE_DIM) + (action - 0.5) * 0.1
        done = bool(np.abs(next_obs).max() > 2.0)
        # New transitions get the largest priority seen so far, as ReAgent's agents do.
        buffer.add(obs, action, float(-np.abs(next_obs).sum()), done, None)
        obs = np.zeros(STATE_DIM) if done else next_obs


def train_step(buffer: PrioritizedReplayBuffer, q: torch.nn.Module) -> float:
    batch = buffer.sample_transition_batch(batch_size=BATCH)
    state, action = batch.state.float(), batch.action.long()
    target = (
        batch.reward
        + (0.99**batch.step)
        * (~batch.terminal)
        * q(batch.next_state.float()).max(dim=1, keepdim=True).values.detach()
    )
    td = q(state).gather(1, action) - target
    # Importance weights from sampling_probabilities (priorities, as ReAgent returns them).
    weights = (1.0 / batch.sampling_probabilities) ** 0.5
    loss = (weights / weights.max() * td**2).mean()
    loss.backward()
    buffer.set_priority(batch.indices, td.detach().abs() + 1e-3)  # a (B, 1) tensor of TD errors
    return float(loss.detach())


def main() -> None:
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    np.random.seed(0)  # noqa: NPY002 (seeds the buffers' draws, as ReAgent users seed a run)
    q = torch.nn.Linear(STATE_DIM, NUM_ACTIONS)
    with tempfile.TemporaryDirectory() as checkpoint_dir:
        buffer = make_buffer()
        for iteration in range(6):
            play(buffer, 150, rng)
            for _ in range(5):
                train_step(buffer, q)
            buffer.save(checkpoint_dir, iteration)
        # Dopamine's rotation: only the last four iterations are kept.
        kept = {name.split(".")[-2] for name in os.listdir(checkpoint_dir)}
        assert kept == {"2", "3", "4", "5"}, kept

        # The sum tree file is ReAgent's pickled SumTree (read here without unpickling it).
        with gzip.open(os.path.join(checkpoint_dir, "sum_tree_ckpt.5.gz")) as f:
            names = [a for _, a, _ in pickletools.genops(f.read()) if isinstance(a, str)]
        assert "reagent.replay_memory.sum_tree" in names and "SumTree" in names

        # "Restart": a fresh buffer loads the last iteration and carries on.
        restored = make_buffer()
        restored.load(checkpoint_dir, 5)
        slots = np.arange(CAPACITY, dtype=np.int32)
        assert int(restored.add_count) == int(buffer.add_count)
        assert restored.size == buffer.size > 0
        assert np.array_equal(restored.get_priority(slots), buffer.get_priority(slots))
        assert restored.sum_tree.max_recorded_priority == buffer.sum_tree.max_recorded_priority
        before = restored.sample_all_valid_transitions()
        after = buffer.sample_all_valid_transitions()
        assert all(torch.equal(x, y) for x, y in zip(before, after, strict=True))
        losses = [train_step(restored, q) for _ in range(5)]
        play(restored, 100, rng)
        assert all(np.isfinite(losses))
        print(
            f"restored {int(restored.add_count)} rows, {restored.size} valid transitions; "
            f"max priority {restored.sum_tree.max_recorded_priority:.3f}"
        )


if __name__ == "__main__":
    main()
