"""The global sampler's arithmetic, without Ray."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import rlreplay as rr
from rlreplay.distributed.split import (
    encode_env_ids,
    encode_ids,
    pack_updates,
    route_env_ids,
    route_ids,
    split_batch_size,
    unpack_updates,
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


@given(
    st.lists(
        st.tuples(st.integers(0, 2**62), st.floats(allow_nan=True, allow_infinity=True)),
        max_size=40,
    )
)
def test_packed_updates_round_trip(pairs: list[tuple[int, float]]) -> None:
    ids = np.array([i for i, _ in pairs], np.int64)
    p = np.array([q for _, q in pairs], np.float64)
    back_ids, back_p = unpack_updates(pack_updates(ids, p))
    assert back_ids.dtype == np.int64 and back_p.dtype == np.float64
    np.testing.assert_array_equal(back_ids, ids)
    np.testing.assert_array_equal(back_p, p)  # NaN where NaN: the shard's core rejects it


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
