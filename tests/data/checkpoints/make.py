"""Writes the checkpoint files of this folder and the samples each buffer drew after its save.

Run once with a released rlreplay (``python tests/data/checkpoints/make.py``): the files are
fixtures, so ``tests/test_old_checkpoints.py`` proves that later versions still load them and
continue with the same sample stream. Rerunning it overwrites the fixtures; do that only when
the format is meant to change.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

import rlreplay as rr

HERE = Path(__file__).parent


def _fill(buf: Any, steps: int, num_envs: int, rng: np.random.Generator) -> None:
    shape = (num_envs,) if num_envs > 1 else ()
    for _t in range(steps):
        ended = rng.random(shape) < 0.08
        trunc = (rng.random(shape) < 0.04) & ~ended
        buf.add(
            obs=rng.standard_normal((*shape, 3)).astype(np.float32),
            action=rng.integers(0, 4, shape).astype(np.int64),
            reward=rng.standard_normal(shape).astype(np.float32),
            next_obs=rng.standard_normal((*shape, 3)).astype(np.float32),
            terminated=ended,
            truncated=trunc,
        )


FIELDS = {"obs": rr.Field((3,), np.float32), "action": rr.Field((), np.int64)}

CASES: dict[str, tuple[type[Any], dict[str, Any], int]] = {
    "uniform": (rr.ReplayBuffer, dict(n_step=3, gamma=0.9, frame_stack=2, seed=1), 150),
    "uniform_envs": (
        rr.ReplayBuffer,
        dict(
            num_envs=2,
            n_step=2,
            record_episodic_return=True,
            next_fields=("action",),
            recent_ratio=0.25,
            recent_steps=8,
            seed=2,
        ),
        70,
    ),
    "proportional": (
        rr.PrioritizedReplayBuffer,
        dict(n_step=2, alpha=0.7, beta=0.5, beta_steps=20, seed=3),
        150,
    ),
    "rank_based": (
        rr.PrioritizedReplayBuffer,
        dict(num_envs=2, variant="rank_based", sort_interval=5, seed=4),
        70,
    ),
}


def build(name: str) -> Any:
    cls, kwargs, steps = CASES[name]
    buf = cls(64, FIELDS, **kwargs)
    rng = np.random.default_rng(100)
    _fill(buf, steps, buf.num_envs, rng)
    if isinstance(buf, rr.PrioritizedReplayBuffer):
        for _ in range(3):
            b = buf.sample(8)
            buf.update_priorities(b.ids, rng.random(8) * 3)
    return buf


def samples(buf: Any, prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i in range(3):
        batch = buf.sample(16)
        for key, value in batch.items():
            out[f"{prefix}{i}.{key}"] = np.asarray(value)
    return out


def main() -> None:
    for name in CASES:
        buf = build(name)
        buf.save(HERE / f"{name}.rlr")
        ids = np.asarray(buf.sampleable_ids())
        expected = {"sampleable_ids": ids}
        expected.update({f"t.{k}": np.asarray(v) for k, v in buf.get_transitions(ids).items()})
        expected.update(samples(buf, "s"))
        np.savez(HERE / f"{name}.expected.npz", **expected)
        print(name, len(buf), ids.shape[0], (HERE / f"{name}.rlr").stat().st_size)


if __name__ == "__main__":
    main()
