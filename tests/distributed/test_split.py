"""The global sampler's arithmetic, without Ray."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import rlreplay as rr
from rlreplay.distributed.split import (
    encode_env_ids,
    encode_ids,
    route_env_ids,
    route_ids,
    split_batch_size,
)


def test_ids_round_trip_through_their_shard():
    local = np.arange(50)
    for k in range(4):
        shard, back = route_ids(encode_ids(local, k, 4), 4)
        assert (shard == k).all() and (back == local).all()
        shard, env = route_env_ids(encode_env_ids(local, k, 4), 4)
        assert (shard == k).all() and (env == local).all()
    with pytest.raises(rr.InvalidIdError):
        route_ids(np.array([1.5]), 4)
    with pytest.raises(rr.InvalidIdError):
        route_ids(np.array([-3]), 4)


def test_split_is_multinomial_over_masses():
    rng = np.random.default_rng(0)
    counts = np.array([split_batch_size(10, [1.0, 0.0, 3.0], rng) for _ in range(4000)])
    assert (counts.sum(axis=1) == 10).all() and (counts[:, 1] == 0).all()
    np.testing.assert_allclose(counts.mean(axis=0), [2.5, 0.0, 7.5], atol=0.08)
    with pytest.raises(rr.EmptyBufferError):
        split_batch_size(4, [0.0, 0.0], rng)


def test_import_rlreplay_does_not_import_ray():
    code = "import sys, rlreplay; sys.exit('ray' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
