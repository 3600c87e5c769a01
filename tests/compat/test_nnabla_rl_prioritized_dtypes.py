"""The types nnabla-rl 0.16.0's proportional buffer hands out, under NumPy 2, side by side.

nnabla-rl's ``SumTree`` and ``MinTree`` nodes keep the objects they are given (Python floats
at first: ``0.0``, ``inf``, ``init_max_error``; then the elements of the masses array
``((|clip(errors)| + epsilon) ** alpha).flatten()``, NumPy scalars of the errors' dtype) and
combine them with NumPy 2's scalar rules (a Python float is cast to the other operand's type).
So with float32 TD errors its sums, minima, queries and ``info["weights"]`` (``np.asarray`` of
the sampled leaves, divided by the minimum, ``** -beta``) are float32 once every node involved
holds one, float64 with float64 errors (or a list of Python floats), Python floats before any
update. The reference is nnabla-rl's module transcribed in ``tests/compat/_nnabla_rl_reference.py``
(run under this NumPy); the front-end must give the same types and bit-identical values, and
draw the same experiences (float32 sums round differently from float64 ones).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlreplay.compat.nnabla_rl.replay_buffers.prioritized_replay_buffer as per
from tests.compat import _nnabla_rl_reference as ref


def _experience(t: int) -> tuple[Any, ...]:
    return (np.zeros(2, np.float32), 0, 0.0, 1.0, np.zeros(2, np.float32), {"t": t})


def _same_object(mine: Any, theirs: Any) -> bool:
    return type(mine) is type(theirs) and (mine == theirs or (mine != mine and theirs != theirs))


def _errors(rng: np.random.Generator, kind: str, k: int) -> Any:
    e = rng.normal(size=(k, 1)) * 3
    if kind == "list":
        return e.tolist()
    return e.astype(np.float32 if kind == "float32" else np.float64)


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    capacity=st.sampled_from([5, 8, 13]),
    method=st.sampled_from(["buffer_max", "batch_max"]),
    init=st.sampled_from([1.0, 0.3]),
    kinds=st.lists(st.sampled_from(["float32", "float64", "list"]), min_size=1, max_size=3),
)
def test_types_and_values_as_nnabla_rl(
    seed: int, capacity: int, method: str, init: float, kinds: list[str]
) -> None:
    rng = np.random.default_rng(seed)
    mine = per.ProportionalPrioritizedReplayBuffer(
        capacity, init_max_error=init, normalization_method=method, seed=seed
    )
    theirs: Any = ref.ProportionalPrioritizedReplayBuffer(
        capacity, init_max_error=init, normalization_method=method
    )
    theirs._rng = np.random.default_rng(seed)
    for t in range(4 * capacity):
        mine.append(_experience(t))
        theirs.append(_experience(t))
        if len(mine) < 4 or t % 2:
            continue
        got, info = mine.sample(3)
        want, their_info = theirs.sample(3)
        assert [e[5]["t"] for e in got] == [e[5]["t"] for e in want]
        assert info["weights"].dtype == their_info["weights"].dtype
        assert np.array_equal(info["weights"], their_info["weights"])
        errors = _errors(rng, kinds[t % len(kinds)], 3)
        mine.update_priorities(errors)
        theirs.update_priorities(errors)
        holder = theirs._buffer
        assert _same_object(mine._sum_tree.sum(), holder.sum_priority())
        if method == "buffer_max":
            assert _same_object(mine._min_tree.min(), holder.min_priority())
        for i in range(len(mine)):
            slot = (i + holder._data._head) % capacity
            leaf = mine._sum_tree[mine._sum_tree.absolute_to_tree_index(slot)]
            assert _same_object(leaf, holder.get_priority(i))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_helper_classes_keep_the_types_they_are_given(dtype: type) -> None:
    mine = per.SumTreeDataHolder(capacity=3, initial_max_priority=1.0)
    theirs: Any = ref.SumTreeDataHolder(capacity=3, initial_max_priority=1.0)
    for holder in (mine, theirs):
        for item in "abc":
            holder.append(item)
        holder.update_priority(1, dtype(0.1))
        holder.update_priority(2, dtype(0.7))
    assert _same_object(mine.sum_priority(), theirs.sum_priority())
    assert _same_object(mine.min_priority(), theirs.min_priority())
    for i in range(3):
        assert _same_object(mine.get_priority(i), theirs.get_priority(i))
    query = dtype(1.05)
    assert mine.get_index_from_query(query) == theirs.get_index_from_query(query)
    assert type(per.SumTree(2).sum()) is float  # Python floats until a NumPy scalar arrives
