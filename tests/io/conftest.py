"""The buffers (the io methods come from their IOMixin base), and a recorder of everything
added (the slow reference)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

import rlreplay as rr

Buffer = rr.ReplayBuffer
PBuffer = rr.PrioritizedReplayBuffer


FIELDS: dict[str, rr.Field] = {
    "obs": rr.Field((3,), np.float32),
    "frame": rr.Field((2, 2), np.uint8, observation=True),
    "action": rr.Field((), np.int64),
    "logits": rr.Field((2,), np.float64),
}


@dataclass
class Recorded:
    """Every step added to each env, in order: its values, episode start and position."""

    steps: list[list[dict[str, Any]]] = field(default_factory=list)


def fill(
    buf: rr.ReplayBuffer,
    n_steps: int,
    seed: int,
    *,
    end_p: float = 0.15,
    finish: bool = True,
    abandon_p: float = 0.0,
) -> Recorded:
    """Add ``n_steps`` random steps to every env of ``buf`` (episodes end at random, terminated
    or truncated; with ``abandon_p``, a running episode is abandoned after a step with that
    probability: its last step is recorded with ``_abandoned``); with ``finish``, every env's
    last episode ends too. Returns the record."""
    rng = np.random.default_rng(seed)
    E = buf.num_envs
    rec = Recorded([[] for _ in range(E)])
    start = [0] * E
    for t in range(n_steps):
        for e in range(E):
            values: dict[str, Any] = {
                "obs": rng.normal(size=3).astype(np.float32),
                "frame": rng.integers(0, 256, (2, 2)).astype(np.uint8),
                "action": int(rng.integers(0, 5)),
                "logits": rng.normal(size=2),
                "reward": np.float32(rng.normal()),
            }
            values = {k: v for k, v in values.items() if k in buf.schema.fields}
            ends = rng.random() < end_p or (finish and t == n_steps - 1)
            term = bool(ends and rng.random() < 0.5)
            values.update(terminated=term, truncated=bool(ends and not term))
            for name in buf.schema.observation_names:
                values["next_" + name] = (
                    rng.normal(size=3).astype(np.float32)
                    if name == "obs"
                    else rng.integers(0, 256, (2, 2)).astype(np.uint8)
                )
            buf.add(env_ids=[e], **{k: np.asarray(v)[None] for k, v in values.items()})
            abandon = bool(abandon_p and not ends and rng.random() < abandon_p)
            if abandon:
                assert buf.abandon_episode(e).tolist() == [t * E + e]
            rec.steps[e].append({**values, "_start": start[e], "_t": t, "_abandoned": abandon})
            if ends or abandon:
                start[e] = t + 1
    return rec


@pytest.fixture
def minari_path(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A private MINARI_DATASETS_PATH: nothing read or written elsewhere, nothing downloaded."""
    path = tmp_path / "minari"
    path.mkdir()
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(path))
    return path
