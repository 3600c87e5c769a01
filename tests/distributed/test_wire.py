"""Packed shard replies and priority updates that ride on draws, without Ray."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import rlreplay as rr
from rlreplay.distributed.shard import Shard
from rlreplay.distributed.split import pack_updates
from rlreplay.distributed.wire import PACK_LIMIT, pack_columns, unpack_columns

FIELDS = {"obs": rr.Field((2,), np.float32), "action": rr.Field((), np.int64)}

columns = st.dictionaries(
    st.text(min_size=1, max_size=8),
    hnp.arrays(
        st.sampled_from([np.float32, np.float64, np.int64, np.uint8, np.bool_]),
        hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=5),
    ),
    max_size=6,
)


@given(columns, st.booleans(), st.sampled_from([0, 64, PACK_LIMIT]))
def test_packed_columns_round_trip(cols: dict[str, np.ndarray], strided: bool, limit: int) -> None:
    if strided:  # non-contiguous inputs are packed in C order
        cols = {k: v[::-1] for k, v in cols.items()}
    layout, payload = pack_columns(cols, limit)
    # Past the limit the columns stay arrays (Ray's object store moves them without copies).
    assert isinstance(payload, dict) == (sum(v.nbytes for v in cols.values()) > limit)
    # Ray's msgpack hands tuples back as lists.
    back = unpack_columns([[n, d, list(s)] for n, d, s in layout], payload)
    assert list(back) == list(cols)
    for name, v in cols.items():
        assert back[name].dtype == v.dtype and back[name].shape == v.shape
        np.testing.assert_array_equal(back[name], v)


def test_a_payload_of_the_wrong_size_is_refused() -> None:
    layout, payload = pack_columns({"a": np.arange(3, dtype=np.int64)})
    with pytest.raises(rr.ShapeError, match="expected 24 bytes"):
        unpack_columns(layout, payload + b"x")


def filled_shard(prioritized: bool = True) -> Shard:
    s = Shard(100, FIELDS, 1, prioritized, 0, {"alpha": 1.0, "beta": 0.0, "stratified": False})
    n = 20
    values = dict(
        obs=np.zeros((n, 2), np.float32), action=np.arange(n), reward=np.ones(n),
        terminated=np.arange(n) == n - 1, truncated=np.zeros(n, bool),
        next_obs=np.zeros((n, 2), np.float32),
    )  # fmt: skip
    s.extend([(0, values)])
    return s


def test_a_draw_applies_its_updates_first_and_returns_their_error() -> None:
    s = filled_shard()
    ids = s.buffer.sampleable_ids()
    p = np.full(ids.shape, 1e-9)
    p[3] = 1e9  # after the update, id 3 holds nearly all the mass
    layout, payload, mass, smallest, error = s.draw(64, pack_updates(ids, p))
    assert error is None
    got = unpack_columns(layout, payload)
    assert (got["ids"] == ids[3]).mean() > 0.99
    assert mass == pytest.approx(s.buffer.priority_mass()[0]) and smallest > 0
    assert got["obs"].shape == (64, 2) and got["action"].dtype == np.int64
    # A reply past PACK_LIMIT stays arrays, with the same columns.
    big_layout, big, *_ = s.draw(4096)
    assert isinstance(big, dict) and [c[0] for c in big_layout] == list(got)
    assert unpack_columns(big_layout, big)["obs"].shape == (4096, 2)
    # A rejected update (an id never issued) changes nothing and does not fail the draw.
    before = s.buffer.priority_mass()
    *_, error = s.draw(8, pack_updates(np.array([10**6]), np.ones(1)))
    assert isinstance(error, rr.InvalidIdError)
    assert s.buffer.priority_mass() == before
    # The mass reading of two-trip sampling applies updates the same way.
    count, mass, _, error = s.info(pack_updates(ids[:1], np.full(1, 2.0)))
    assert error is None and count == ids.shape[0]
    assert mass == pytest.approx(s.buffer.priority_mass()[0])


def test_a_shard_without_mass_draws_nothing() -> None:
    s = Shard(100, FIELDS, 1, False, 0, {})
    assert s.draw(8) == ((), b"", 0.0, float("inf"), None)
    # Updates to a uniform shard come back as an error, as a separate call raises it.
    *_, error = s.draw(8, pack_updates(np.zeros(1, np.int64), np.ones(1)))
    assert isinstance(error, rr.ConfigError)
    with pytest.raises(rr.ConfigError):
        s.update_priorities(pack_updates(np.zeros(1, np.int64), np.ones(1)))
