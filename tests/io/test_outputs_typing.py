"""Strict mypy keeps sampling calls typed: ``Batch`` by default, ``TensorBatch`` for torch/JAX.

Runs mypy on a small client module (slow: mypy checks rlreplay first, ~1 min on a cold cache).
"""

from __future__ import annotations

from pathlib import Path

import pytest

CLIENT = """
from typing import assert_type

import numpy as np

import rlreplay as rr
from rlreplay.io import TensorBatch

buf = rr.ReplayBuffer(8, {"obs": rr.Field((), np.float32)}, as_="numpy")
assert_type(buf.sample(2), rr.Batch)
assert_type(buf.sample(2, as_="numpy", device="cpu"), rr.Batch)
assert_type(buf.sample(2, out=buf.sample(2)), rr.Batch)
assert_type(buf.sample(2, as_="torch"), TensorBatch)
assert_type(buf.sample(2, as_="jax", device="cpu"), TensorBatch)
assert_type(buf.sample_sequences(2, 3), rr.Batch)
assert_type(buf.sample_sequences(2, 3, as_="torch"), TensorBatch)
assert_type(buf.sample_episodes(2), rr.Batch)
assert_type(buf.sample_episodes(2, as_="jax"), TensorBatch)
per = rr.PrioritizedReplayBuffer(8, {"obs": rr.Field((), np.float32)})
assert_type(per.sample(2), rr.Batch)
assert_type(per.sample(2, as_="torch"), TensorBatch)
buf.sample(2, out=buf.sample(2), as_="torch")  # no overload takes both
"""


@pytest.mark.slow
def test_sampling_calls_are_typed(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api")
    client = tmp_path / "client.py"
    client.write_text(CLIENT)
    out, err, status = api.run(
        ["--strict", "--ignore-missing-imports", "--no-incremental", str(client)]
    )
    errors = [line for line in out.splitlines() if ": error:" in line]
    both = 1 + CLIENT.splitlines().index(CLIENT.splitlines()[-1])  # the out= + as_= line
    assert len(errors) == 1 and f"client.py:{both}:" in errors[0], out + err
    assert "No overload variant" in errors[0] and status == 1
