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
    merge_batches,
    merge_draws,
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


@pytest.mark.parametrize("prioritized", [True, False])
def test_merged_draws_are_each_batchs_merge_of_its_rows(prioritized: bool) -> None:
    """Each batch of a request is merge_batches of its slice of every shard's draws (rows
    beyond the request's counts, as one-trip sampling leaves them, are ignored)."""
    rng = np.random.default_rng(4)
    S, B, J = 4, 16, 3
    counts = np.stack([rng.multinomial(B, [0.5, 0.0, 0.3, 0.2]) for _ in range(J)])
    answers = {}
    for k in (0, 1, 2, 3):
        n = B * J  # every shard drew the whole request
        answers[k] = (
            rr.Batch(
                obs=rng.random((n, 2)).astype(np.float32), ids=rng.integers(0, 999, n),
                env_ids=rng.integers(0, 5, n), probabilities=rng.random(n) + 0.1,
                weights=np.ones(n, np.float32),
            ),
            2.0 + k, 0.05,
        )  # fmt: skip
    betas = [0.4, 0.7, 1.0]
    got = merge_draws(
        answers, counts, [(b, np.random.default_rng(j)) for j, b in enumerate(betas)], S,
        prioritized=prioritized, total_mass=14.0, smallest_mass=0.05,
    )  # fmt: skip
    starts = np.concatenate([np.zeros((1, S), np.int64), counts.cumsum(axis=0)])
    for j, beta in enumerate(betas):
        parts = [
            (k, rr.Batch({n: v[starts[j, k] : starts[j + 1, k]] for n, v in b.items()}), m, low)
            for k, (b, m, low) in answers.items()
            if counts[j, k]
        ]
        want = merge_batches(
            parts, S, np.random.default_rng(j), prioritized=prioritized, total_mass=14.0,
            smallest_mass=0.05, beta=beta,
        )  # fmt: skip
        assert list(got[j].keys()) == list(want.keys())
        for name in want:
            assert got[j][name].dtype == want[name].dtype
            np.testing.assert_array_equal(got[j][name], want[name], err_msg=name)


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
