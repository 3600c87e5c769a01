"""The parts combine: every sampler with every host storage, one or several envs, frame stacks,
hindsight relabelling, sequences and checkpoints, by composition (each combination is a
constructor call, never a class of its own)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rlreplay as rr
from rlreplay.sampling import PrioritizedSampler, UniformSampler

GOAL = rr.Field((2,), np.float32, observation=True)
FIELDS = {
    "obs": rr.Field((3,), np.float32),
    "action": rr.Field((), np.int64),
    "achieved_goal": GOAL,
    "desired_goal": GOAL,
}
SAMPLERS = {
    "uniform": lambda: UniformSampler(),
    "proportional": lambda: PrioritizedSampler(alpha=0.7),
    "rank_based": lambda: PrioritizedSampler(variant="rank_based", sort_interval=1),
}


def goal_reward(ag: np.ndarray, g: np.ndarray, info: dict[str, Any]) -> np.ndarray:
    return -np.abs(ag - g).sum(-1).astype(np.float32)


def build(sampler: str, storage: str, num_envs: int, frame_stack: int, her: bool,
          tmp: Path) -> rr.ReplayBuffer:  # fmt: skip
    kw: dict[str, Any] = dict(
        num_envs=num_envs, n_step=2, frame_stack=frame_stack, seed=3, storage=storage,
        sampler=SAMPLERS[sampler](),
    )  # fmt: skip
    if storage == "memmap":
        kw["path"] = tmp / "columns"
    if her:
        kw["transforms"] = [rr.HindsightRelabel(goal_reward, strategy="future")]
    return rr.ReplayBuffer(48, FIELDS, **kw)


def fill(buf: rr.ReplayBuffer, steps: int) -> None:
    E = buf.num_envs
    lead = (E,) if E > 1 else ()  # one env: no env axis
    rng = np.random.default_rng(7)
    for t in range(steps):
        end = rng.random(lead) < 0.15
        terminated = end & (rng.random(lead) < 0.5)
        buf.add(
            obs=rng.standard_normal((*lead, 3)).astype(np.float32),
            action=rng.integers(0, 4, lead),
            achieved_goal=np.full((*lead, 2), t, np.float32),
            desired_goal=np.full((*lead, 2), -1, np.float32),
            reward=rng.standard_normal(lead).astype(np.float32),
            terminated=terminated,
            truncated=end & ~terminated,
            next_obs=rng.standard_normal((*lead, 3)).astype(np.float32),
            next_achieved_goal=np.full((*lead, 2), t + 1, np.float32),
            next_desired_goal=np.full((*lead, 2), -1, np.float32),
        )


CASES = list(
    itertools.product(SAMPLERS, ["memory", "memmap", "shared"], [1, 3], [1, 2], [False, True])
)


@pytest.mark.parametrize(("sampler", "storage", "num_envs", "frame_stack", "her"), CASES)
def test_parts_combine(
    sampler: str, storage: str, num_envs: int, frame_stack: int, her: bool, tmp_path: Path
) -> None:
    buf = build(sampler, storage, num_envs, frame_stack, her, tmp_path)
    try:
        fill(buf, 40)
        sampleable = set(buf.sampleable_ids().tolist())
        batch = buf.sample(32)
        assert set(batch.ids.tolist()) <= sampleable
        ref = buf.get_transitions(batch.ids)
        relabelled = {"desired_goal", "next_desired_goal", "reward"} if her else set()
        for key in ref:
            if key not in relabelled:
                np.testing.assert_array_equal(batch[key], ref[key], err_msg=key)
        assert ("probabilities" in batch) == (sampler != "uniform")
        if sampler != "uniform":  # priorities follow ids through the sampler
            stale = buf._sampler.update(buf._index, batch.ids, np.arange(32, dtype=np.float64))
            assert stale == 0
        seqs = buf.sample_sequences(4, 3)
        assert seqs.mask.shape == (4, 3)
        path = tmp_path / "buf.ckpt"
        buf.save(path)
        overrides: dict[str, Any] = {"storage": "memory"} if storage != "memory" else {}
        if her:
            overrides["transforms"] = [rr.HindsightRelabel(goal_reward, strategy="future")]
        again = rr.load(path, **overrides)
        try:
            assert type(again._sampler) is type(buf._sampler)
            want, got = buf.sample(16), again.sample(16)
            for key in want:
                np.testing.assert_array_equal(got[key], want[key], err_msg=key)
        finally:
            again.close()
    finally:
        buf.close()
