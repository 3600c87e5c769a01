"""ALF front-end: the segment trees against ALF's documented layout and the core trees."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rlreplay as rr
from rlreplay.compat.alf.segment_tree import (
    MaxSegmentTree,
    MinSegmentTree,
    SegmentTree,
    SumSegmentTree,
)


# =========================================================================== segment trees
def test_sum_segment_tree_basics() -> None:
    tree = SumSegmentTree(5)
    assert tree.summary().item() == 0.0 and tree.nnz.item() == 0
    tree[torch.tensor([0, 2, 4])] = torch.tensor([1.0, 2.0, 3.0])
    assert tree.summary().item() == 6.0 and tree.summary().dtype == torch.float32
    assert tree[torch.tensor([0, 1, 2, 3, 4])].tolist() == [1.0, 0.0, 2.0, 0.0, 3.0]
    assert tree[torch.tensor([[4], [2]])].shape == (2, 1)
    assert tree.nnz.item() == 3 and tree.nnz.dtype == torch.int64
    tree[torch.tensor([2, 1, 1])] = torch.tensor([0.0, 5.0, 0.0])  # duplicates: the last wins
    assert tree.nnz.item() == 2 and tree.summary().item() == 4.0


def test_find_sum_bound_semantics_and_edges() -> None:
    tree = SumSegmentTree(6)
    tree[torch.tensor([1, 2, 4])] = torch.tensor([1.0, 2.0, 3.0])  # prefix sums 0 1 3 3 6 6
    th = torch.tensor([0.0, 0.5, 1.0, 2.9, 3.0, 5.9])
    assert tree.find_sum_bound(th).tolist() == [1, 1, 2, 2, 4, 4]  # strict <, zeros skipped
    # threshold == summary: the non-zero value with the largest index
    assert tree.find_sum_bound(torch.tensor([6.0])).tolist() == [4]
    assert tree.find_sum_bound(tree.summary().reshape(1)).dtype == torch.int64
    with pytest.raises(ValueError, match="summary"):
        tree.find_sum_bound(torch.tensor([1.0, 6.5]))
    with pytest.raises(ValueError):
        tree.find_sum_bound(torch.tensor([-1.0]))
    with pytest.raises(ValueError):
        SumSegmentTree(3).find_sum_bound(torch.tensor([0.0]))


def test_find_sum_bound_with_float32_summary() -> None:
    """A threshold equal to the float32 summary counts as == root, whatever the rounding."""
    tree = SumSegmentTree(3)
    tree[torch.tensor([0, 1, 2])] = torch.tensor([0.1, 0.2, 0.3])
    s = tree.summary()
    assert tree.find_sum_bound(s.reshape(1)).tolist() == [2]
    tree[torch.tensor([2])] = torch.tensor([0.0])
    assert tree.find_sum_bound(tree.summary().reshape(1)).tolist() == [1]


def test_min_and_max_segment_trees_start_at_zero() -> None:
    mn, mx = MinSegmentTree(4), MaxSegmentTree(4)
    assert mn.summary().item() == 0.0 and mx.summary().item() == 0.0
    mn[torch.arange(3)] = torch.tensor([3.0, 1.0, 2.0])
    assert mn.summary().item() == 0.0  # leaf 3 is still 0, as in ALF
    mn[torch.tensor([3])] = torch.tensor([5.0])
    assert mn.summary().item() == 1.0
    mx[torch.tensor([0, 1])] = torch.tensor([-3.0, -1.0])
    assert mx.summary().item() == 0.0
    mx[torch.tensor([2])] = torch.tensor([4.0])
    assert mx.summary().item() == 4.0 and mx.nnz.item() == 3


def test_segment_tree_generic_op_dtype_and_errors() -> None:
    tree = SegmentTree(3, torch.max, dtype=torch.float64, name="t")
    tree[torch.tensor([1])] = torch.tensor([0.1], dtype=torch.float64)
    assert tree.summary().dtype == torch.float64 and tree.summary().item() == 0.1
    assert tree.name == "t" and tree.capacity == 3
    rounded = SumSegmentTree(2)
    rounded[torch.tensor([0])] = torch.tensor([0.1], dtype=torch.float64)
    assert rounded[torch.tensor([0])].item() == np.float32(0.1)  # stored as ALF stores it
    with pytest.raises(rr.ConfigError, match="op"):
        SegmentTree(3, "mul")  # not a function (any function works: see test_alf_dropin.py)
    with pytest.raises(ValueError):
        tree[torch.tensor([3])] = torch.tensor([1.0])
    with pytest.raises(TypeError):
        tree[torch.tensor([0.5])]
    with pytest.raises(ValueError):
        SumSegmentTree(3)[torch.tensor([0])] = torch.tensor([-1.0])


def test_segment_tree_state_dict_round_trip() -> None:
    tree = SumSegmentTree(4)
    tree[torch.tensor([0, 3])] = torch.tensor([2.0, 5.0])
    other = SumSegmentTree(4)
    other.load_state_dict(tree.state_dict())
    assert other.summary().item() == 7.0 and other.nnz.item() == 2


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 17),
    st.lists(st.tuples(st.integers(0, 16), st.integers(0, 8)), max_size=30),
    st.lists(st.floats(0.0, 1.0), min_size=1, max_size=8),
)
def test_segment_trees_agree_with_core_trees_and_brute_force(
    capacity: int, sets: list[tuple[int, int]], fractions: list[float]
) -> None:
    trees = (SumSegmentTree(capacity), MinSegmentTree(capacity), MaxSegmentTree(capacity))
    core = (rr.SumTree(capacity), rr.MinTree(capacity), rr.MaxTree(capacity))
    for c in core[1:]:
        c.set(np.arange(capacity), 0.0)
    values = np.zeros(capacity)
    for i, v in sets:
        i %= capacity
        values[i] = v / 2
        for t in trees:
            t[torch.tensor([i])] = torch.tensor([v / 2])
        for c in core:
            c.set([i], v / 2)
    assert trees[0].summary().item() == core[0].total == values.sum()
    assert trees[1].summary().item() == core[1].min == values.min()
    assert trees[2].summary().item() == core[2].max == values.max()
    assert trees[0].nnz.item() == np.count_nonzero(values)
    if values.sum() > 0:
        th = np.array(fractions) * values.sum()
        got = trees[0].find_sum_bound(torch.from_numpy(th)).tolist()
        assert got == core[0].find_prefix_sum(th).tolist()
        cum = np.cumsum(values)
        for x, k in zip(th.tolist(), got, strict=True):
            above = np.flatnonzero(cum > x)
            want = int(above[0]) if x < cum[-1] else int(np.flatnonzero(values)[-1])
            assert k == want and values[k] > 0
