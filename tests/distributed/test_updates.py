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


def test_queued_updates_ride_on_the_next_requested_draw(ray_local: object) -> None:
    from rlreplay.distributed import ReplayService

    fields = {"obs": rr.Field((2,), np.float32)}
    with ReplayService(2, 80, fields, prioritized=True, seed=0, num_envs=2) as svc:
        w = svc.writer([0, 1], flush_every=16)
        for t in range(16):
            w.add(obs=np.zeros((2, 2), np.float32), reward=[0.0, 0.0],
                  terminated=[t == 15] * 2, truncated=[False] * 2,
                  next_obs=np.zeros((2, 2), np.float32))  # fmt: skip
        w.close()
        batches = svc.iterate(64, prefetch=1, per_call=2)
        ids = np.unique(next(batches).ids)
        p = np.full(ids.shape, 1e-6)
        p[0] = 1e6
        svc.update_priorities(ids, p, wait=False)
        next(batches)  # the second batch of the request made before the update
        # The next request is made after the update: its draws (one call per shard, the
        # updates riding on them) see it.
        assert (next(batches).ids == ids[0]).mean() > 0.9
        # A rejected update fails neither the draw that carried it nor later ones; it is
        # raised by the next update_priorities.
        svc.update_priorities(np.array([10**9]), np.ones(1), wait=False)
        next(batches)
        next(batches)
        with pytest.raises(rr.InvalidIdError):
            svc.update_priorities(ids[:1], np.ones(1), wait=False)
        batches.close()
