"""Checkpoints written by rlreplay 0.1.0 still load, hold the same transitions and continue the
same sample stream (the files and the samples each buffer drew after its save are fixtures:
``tests/data/checkpoints/make.py``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import rlreplay as rr

DATA = Path(__file__).parent / "data" / "checkpoints"
CASES = ["uniform", "uniform_envs", "proportional", "rank_based"]


@pytest.mark.parametrize("name", CASES)
def test_old_checkpoint_loads_with_same_transitions_and_stream(name: str) -> None:
    expected = dict(np.load(DATA / f"{name}.expected.npz"))
    buf = rr.load(DATA / f"{name}.rlr")
    ids = np.asarray(buf.sampleable_ids())
    np.testing.assert_array_equal(ids, expected["sampleable_ids"])
    got = buf.get_transitions(ids)
    keys = {k[2:] for k in expected if k.startswith("t.")}
    assert keys == set(got.keys())
    for key in keys:
        np.testing.assert_array_equal(np.asarray(got[key]), expected[f"t.{key}"], err_msg=key)
    for i in range(3):
        batch = buf.sample(16)
        keys = {k.split(".", 1)[1] for k in expected if k.startswith(f"s{i}.")}
        assert keys == set(batch.keys())
        for key in keys:
            np.testing.assert_array_equal(
                np.asarray(batch[key]), expected[f"s{i}.{key}"], err_msg=f"sample {i}: {key}"
            )
    assert type(buf).__name__ == (
        "ReplayBuffer" if name.startswith("uniform") else "PrioritizedReplayBuffer"
    )
