"""Frame-stack batches written into recycled memory: never memory a caller still holds.

The ReAgent front-end packs sampled frame stacks into arrays that it hands out again once
nothing else holds them (``_kernels.recycled_empty``); these tests hold batches, tensors, views
and NumPy arrays of them across later samples and check that none of them changes, and that
the memory of dropped batches is indeed used again.
"""

from __future__ import annotations

import gc
import sys
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rlreplay.compat.reagent import ReplayBuffer  # noqa: E402
from rlreplay.compat.reagent._kernels import _DEAD, recycled_empty  # noqa: E402


def _filled(steps: int = 300) -> Any:
    rng = np.random.default_rng(0)
    buffer = ReplayBuffer(
        observation_shape=(6, 5),
        stack_size=4,
        replay_capacity=200,
        batch_size=8,
        update_horizon=2,
        gamma=0.9,
        observation_dtype=np.uint8,
        seed=3,
    )
    for t in range(steps):
        obs = rng.integers(0, 255, (6, 5), np.uint8)
        buffer.add(obs, t % 3, float(t % 5), int(t % 37 == 36))
    return buffer


def _copy(batch: Any) -> dict[str, np.ndarray]:
    return {name: getattr(batch, name).numpy().copy() for name in batch._fields}


def test_held_batches_never_change_and_match_their_indices() -> None:
    buffer = _filled()
    held = []
    for _ in range(20):
        batch = buffer.sample_transition_batch()
        held.append((batch, _copy(batch)))
    state_views = [batch.state[1:] for batch, _ in held[:5]]  # tensor views only
    arrays = [batch.next_state.numpy() for batch, _ in held[5:10]]  # NumPy views only
    expected_views = [v.clone() for v in state_views]
    expected_arrays = [a.copy() for a in arrays]
    kept = held[10:]
    del held
    for _ in range(30):
        buffer.sample_transition_batch()  # may reuse the memory of the dropped batches
    for batch, values in kept:
        for name, value in values.items():
            assert np.array_equal(getattr(batch, name).numpy(), value), name
    for view, want in zip(state_views, expected_views, strict=True):
        assert torch.equal(view, want)
    for arr, want in zip(arrays, expected_arrays, strict=True):
        assert np.array_equal(arr, want)
    # each batch is what the same indices read afresh give
    for batch, _ in kept[:3]:
        again = buffer.sample_transition_batch(indices=batch.indices.reshape(-1).numpy())
        assert torch.equal(again.state, batch.state)
        assert torch.equal(again.next_state, batch.next_state)


def test_memory_of_dropped_batches_is_used_again() -> None:
    buffer = _filled()
    gc.collect()
    seen = set()
    for _ in range(10):
        batch = buffer.sample_transition_batch()
        seen.add(batch.state.data_ptr())
        del batch  # dropped before the next sample
    assert len(seen) <= 3  # (a fresh array each time would give ten addresses, or reuse by luck)
    first = buffer.sample_transition_batch()
    second = buffer.sample_transition_batch()  # while the first is held
    assert first.state.data_ptr() != second.state.data_ptr()
    assert first.state.data_ptr() != second.next_state.data_ptr()


def test_recycled_empty_hands_out_only_arrays_nothing_holds() -> None:
    shape, dtype = (3, 7, 2), np.dtype(np.int16)
    a = recycled_empty(shape, dtype)
    b = recycled_empty(shape, dtype)
    assert a is not b and a.shape == shape and a.dtype == dtype
    view = a[1:]
    del a
    c = recycled_empty(shape, dtype)
    assert c is not view.base and c is not b  # a view keeps its base held
    del view
    d = recycled_empty(shape, dtype)
    assert d.flags.owndata and d.flags.writeable
    assert sys.getrefcount(d) > _DEAD


def test_pools_keep_a_bounded_number_of_bytes() -> None:
    from rlreplay.compat.reagent import _kernels

    big = (5, 1 << 20)  # 40 MiB of float64: more than the pools keep
    a = recycled_empty(big, np.dtype(np.float64))
    del a
    b = recycled_empty(big, np.dtype(np.float64))
    assert b.shape == big
    assert _kernels._pooled[0] <= _kernels._POOL_BYTES
    pooled = sum(x.nbytes for pool in _kernels._POOLS.values() for x in pool)
    assert pooled == _kernels._pooled[0]
    for _ in range(20):  # more than the depth of one pool, all held
        held = [recycled_empty((4, 3), np.dtype(np.uint8)) for _ in range(3)]
        assert len({id(h) for h in held}) == 3
    assert all(len(pool) <= _kernels._POOL_DEPTH for pool in _kernels._POOLS.values())
