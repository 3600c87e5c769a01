"""The learner's queue of priority updates (wait=False), without Ray."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import rlreplay as rr
from rlreplay.distributed.split import route_ids, unpack_updates
from rlreplay.distributed.updates import UpdateQueue

calls = st.lists(
    st.lists(st.tuples(st.integers(0, 40), st.floats(0.0, 10.0)), max_size=12), max_size=6
)


@given(calls, st.integers(1, 4))
def test_dispatch_hands_each_shard_its_updates_in_call_order(
    updates: list[list[tuple[int, float]]], num_shards: int
) -> None:
    q = UpdateQueue([object()] * num_shards)
    for call in updates:
        ids = np.array([i for i, _ in call], np.int64)
        shard, local = route_ids(ids, num_shards)
        q.put(shard, local, np.array([p for _, p in call], np.float64))
    seen: list[Mapping[int, bytes]] = []
    assert q.dispatch(lambda packed: seen.append(packed) or 7) == 7
    got = {k: list(zip(*(a.tolist() for a in unpack_updates(b)), strict=True))
           for k, b in seen[0].items()}  # fmt: skip
    flat = [(i, p) for call in updates for i, p in call]
    want = {
        k: [(i // num_shards, p) for i, p in flat if i % num_shards == k] for k in range(num_shards)
    }
    assert got == {k: v for k, v in want.items() if v}  # the same updates, same order per shard
    assert q.dispatch(dict) == {}  # the queue was emptied


def test_errors_of_updates_that_rode_on_draws_surface_at_the_next_harvest() -> None:
    q = UpdateQueue([object()])
    q.harvest(None, None)  # nothing sent, nothing failed: no Ray needed
    q.fail(rr.InvalidIdError("ids: [7] were never issued"))
    with pytest.raises(rr.InvalidIdError, match="never issued"):
        q.harvest(None, None)
    q.harvest(None, None)  # raised once
