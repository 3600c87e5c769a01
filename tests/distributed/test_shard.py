"""A shard's recovery record, without Ray: a restart is its constructor run again."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import rlreplay as rr
from rlreplay.distributed.shard import Shard

FIELDS = {"obs": rr.Field((2,), np.float32)}


def steps(n: int, t0: int) -> list[tuple[int, dict[str, np.ndarray]]]:
    t = np.arange(t0, t0 + n, dtype=np.float32)
    values = dict(obs=np.stack([t, t], 1), reward=np.ones(n), terminated=np.zeros(n, bool),
                  truncated=np.zeros(n, bool))  # fmt: skip
    return [(0, values)]


def start(home: Path, prioritized: bool = False) -> Shard:
    return Shard(100, FIELDS, 1, prioritized, 0, {}, str(home), 3)


def test_restarts_reload_the_last_checkpoint_and_count_losses(tmp_path: Path) -> None:
    home, ckpt = tmp_path / "home", tmp_path / "ckpt"
    home.mkdir()
    ckpt.mkdir()
    s = start(home)
    s.extend(steps(6, 0))
    s = start(home)  # died before any save: empty, 6 lost
    assert s.sizes() == (0, 0)
    assert s.status()["restarts"] == 1 and s.status()["lost"] == 6
    s.extend(steps(10, 0))
    info = s.save(str(ckpt / "a.rlr"))
    assert (info["added"], info["stored"], info["sampleable"]) == (10, 10, 9)
    before = s.get_transitions(np.arange(9))
    s.extend(steps(4, 10))
    assert s.status()["since_checkpoint"] == 4
    s = start(home)
    assert s.status() == {
        "stored": 10, "sampleable": 9, "restarts": 2, "lost": 10, "abandoned": 1,
        "since_checkpoint": 0, "checkpoint": str(ckpt / "a.rlr"),
    }  # fmt: skip
    np.testing.assert_array_equal(s.get_transitions(np.arange(9)).obs, before.obs)
    version, *_ = s.extend(steps(2, 20))
    assert version > 2 * (1 << 40)  # after every version of the dead incarnations
    # The reload cut the episode at step 9: step 9 never bootstraps from step 10 (obs 20, after
    # the 4 lost steps), which starts a new episode.
    assert s.buffer.sampleable_ids().tolist() == [*range(9), 10]
    assert s.buffer.episode_begin([11]).tolist() == [10]


def test_loading_a_foreign_checkpoint_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    other = rr.PrioritizedReplayBuffer(100, FIELDS, seed=0)
    other.save(tmp_path / "other.rlr")
    s = start(tmp_path)
    s.extend(steps(5, 0))
    with pytest.raises(rr.CheckpointError, match="not this shard's"):
        s.load(str(tmp_path / "other.rlr"), 5)
    with pytest.raises(rr.CheckpointError):
        s.load(str(tmp_path / "missing.rlr"), 5)
    assert s.sizes() == (5, 4) and s.status()["checkpoint"] is None
