"""Tests of the batched 8-ary tree kernels against slow, obviously correct per-item references.

The references build the tree as plain Python lists, one list per level (``ref_levels``: each
node the left-to-right fold of its ``K = 8`` children, levels padded with the neutral element),
and flatten them into the kernels' ``(groups, K)`` layout (``ref_tree``), so they know nothing
of the kernels' index arithmetic.

* :func:`_descend_all` (all masses one level at a time, prefetched, branch-free) against
  ``ref_descend``, a plain per-mass descent over the reference levels, on trees and masses built
  to hit every rounding path (masses on and next to prefix-sum boundaries, at and past the
  total, leaves of wildly different magnitudes, zero leaves and zero subtrees);
* :func:`_set_kernel` (every path recomputed level by level, dense top levels, no sort) against
  "write the leaves in call order, then rebuild every node from the leaves", compared bit for
  bit (``-0.0`` and ``+0.0`` told apart) for the three operations;
* the sum/min pair of :func:`_sum_min_pair` against two standalone trees.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from rlreplay.sampling import MaxTree, MinTree, SumTree
from rlreplay.sampling.trees import (
    _MAX,
    _MIN,
    _SUM,
    _find_prefix_sum_kernel,
    _layout,
    _sample_kernel,
    _SegmentTree,
    _set_kernel,
    _sum_min_pair,
)

K = 8  # the fan-out the references assume

OPS: dict[str, tuple[type[_SegmentTree], int, float]] = {
    "sum": (SumTree, _SUM, 0.0),
    "min": (MinTree, _MIN, math.inf),
    "max": (MaxTree, _MAX, -math.inf),
}


# -- references -------------------------------------------------------------------------------


def ref_combine(op: int, a: float, b: float) -> float:
    if op == _SUM:
        return a + b
    if op == _MIN:
        return a if a <= b else b
    return a if a >= b else b


def ref_fold(op: int, values: list[float]) -> float:
    """``values`` combined left to right: ``((v0 . v1) . v2) . ...``."""
    acc = values[0]
    for value in values[1:]:
        acc = ref_combine(op, acc, value)
    return acc


def ref_levels(leaves: list[float], op: int, neutral: float) -> list[list[float]]:
    """The tree as lists, root level first; every level padded with ``neutral`` to whole groups.

    Level ``L`` holds the leaves; a level above holds ``ceil(n / K)`` nodes for ``n`` nodes
    below, node ``i`` being the fold of nodes ``K * i .. K * i + K - 1`` below; the root level
    has one node. There is always at least one level below the root.
    """

    def padded(nodes: list[float]) -> list[float]:
        return nodes + [neutral] * (-len(nodes) % K)

    levels = [padded(list(leaves))]
    count = len(leaves)
    while len(levels) == 1 or count > 1:
        below = levels[0]
        count = -(-count // K)
        levels.insert(0, padded([ref_fold(op, below[K * i : K * i + K]) for i in range(count)]))
    return levels


def ref_tree(leaves: list[float], op: int, neutral: float) -> NDArray[np.float64]:
    """The whole ``(groups, K)`` tree array: the levels of ``ref_levels``, leaves first."""
    flat = [v for level in reversed(ref_levels(leaves, op, neutral)) for v in level]
    return np.array(flat, dtype=np.float64).reshape(-1, K)


def ref_descend(levels: list[list[float]], mass: float) -> tuple[int, bool]:
    """The per-mass descent over ``ref_levels``; also says whether it ended "at the end".

    At a node, its children's running prefix sums ``p_j`` are scanned: the first ``j`` with
    ``mass < p_j`` is taken, after ``mass -= p_(j-1)``. If there is none (the mass is at or past
    the end of the node's subtree, by rounding below the root), the rightmost non-zero child is
    taken at every level from then on.
    """
    node = 0
    at_end = not mass < levels[0][0]
    for level in levels[1:]:
        children = level[K * node : K * node + K]
        if not at_end:
            prefix = 0.0
            for j, c in enumerate(children):
                before = prefix
                prefix += c
                if mass < prefix:
                    node, mass = K * node + j, mass - before
                    break
            else:
                at_end = True
        if at_end:
            node = K * node + max(j for j, c in enumerate(children) if c > 0.0)
    return node, at_end


def sum_levels(tree: SumTree) -> list[list[float]]:
    """The reference levels of the leaves ``tree`` holds now."""
    return ref_levels(tree.get(np.arange(tree.capacity)).tolist(), _SUM, 0.0)


def bits(array: NDArray[np.float64]) -> NDArray[np.int64]:
    """The raw bits, so that ``-0.0 != +0.0`` in comparisons."""
    return np.ascontiguousarray(array).view(np.int64)


def tree_bits(tree: _SegmentTree) -> NDArray[np.int64]:
    return bits(tree._tree)


# -- the batched descent ----------------------------------------------------------------------


def _masses_to_try(leaves: NDArray[np.float64], fractions: list[float]) -> NDArray[np.float64]:
    """Masses on, just below and just above every prefix sum, the total, and fractions."""
    total = float(np.sum(leaves))
    cumsum = np.cumsum(leaves)
    edges = np.concatenate([[0.0], cumsum, [total]])
    near = np.concatenate([edges, np.nextafter(edges, -np.inf), np.nextafter(edges, np.inf)])
    near = near[(near >= 0.0) & np.isfinite(near)]
    return np.concatenate([near, np.asarray(fractions) * total]).astype(np.float64)


def _check_descent(leaves: NDArray[np.float64], masses: NDArray[np.float64]) -> int:
    """Runs the kernel on ``masses`` and compares with the reference.

    Returns how many masses below the total still ended "at the end" (rounding carried them past
    the end of a subtree), to show that a test reaches that path.
    """
    tree = SumTree(len(leaves))
    tree.set(np.arange(len(leaves)), leaves)
    levels = sum_levels(tree)
    np.testing.assert_array_equal(bits(tree._tree), bits(ref_tree(leaves.tolist(), _SUM, 0.0)))
    got = _find_prefix_sum_kernel(tree._tree, tree._levels, masses)
    rounded = 0
    for i, mass in enumerate(masses.tolist()):
        want, end = ref_descend(levels, mass)
        assert got[i] == want, (mass, leaves.tolist())
        rounded += end and mass < tree.total
    assert (leaves[got] > 0).all()
    return rounded


leaf_values = st.one_of(
    st.integers(0, 5).map(float),
    st.floats(0.0, 1.0),
    st.sampled_from([0.0, 1e-300, 1e-17, 3e-16, 1.0, 1e16, 1e150]),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(leaf_values, min_size=1, max_size=70).filter(lambda v: 0.0 < sum(v) < 1e300),
    st.lists(st.floats(0.0, 1.0), max_size=20),
)
def test_descend_all_matches_per_mass_descent(leaves: list[float], fractions: list[float]) -> None:
    """Every mass (boundaries, one ulp around them, the total, inside) gets the same leaf."""
    values = np.asarray(leaves, dtype=np.float64)
    _check_descent(values, _masses_to_try(values, fractions))


def test_descend_all_rounding_paths_are_exercised() -> None:
    """Trees where masses fall past the end of a subtree through rounding, and zero subtrees."""
    rng = np.random.default_rng(11)
    rounded = 0
    for _ in range(300):
        n = int(rng.integers(1, 300))
        scale = 10.0 ** rng.integers(-20, 20, size=n)
        leaves = rng.random(n) * scale * (rng.random(n) < 0.7)
        if rng.random() < 0.5:  # ones next to 1e16 (ulp 2): sums and differences round
            leaves = np.where(rng.random(n) < 0.5, 1.0, 1e16 + 2 * rng.integers(0, 4, n))
            leaves *= rng.random(n) < 0.85
        if leaves.sum() == 0.0:
            leaves[int(rng.integers(n))] = 1.0
        rounded += _check_descent(leaves, _masses_to_try(leaves, rng.random(50).tolist()))
    assert rounded > 0
    # Node 0 (leaves 0-7) sums to 3, node 1 (leaves 8-9) to 1e16; the root 3 + 1e16 rounds up
    # to 1e16 + 4. The mass 1e16 + 2 < root passes node 0 (prefix 3) and 1e16 + 2 - 3 rounds
    # to 1e16, exactly node 1's sum: the mass is past its end, and the draw takes its rightmost
    # non-zero leaf, 8.
    leaves = np.array([1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1e16, 0.0])
    assert _check_descent(leaves, np.array([1.0000000000000002e16])) == 1
    tree = SumTree(10)
    tree.set(np.arange(10), leaves)
    assert tree.find_prefix_sum([1.0000000000000002e16]).tolist() == [8]


@pytest.mark.parametrize("stratified", [True, False])
@pytest.mark.parametrize("capacity", [1, 2, 3, 7, 64, 1000, 1025])
def test_sample_kernel_matches_per_draw_reference(capacity: int, stratified: bool) -> None:
    """Same uniforms, same slots as the per-draw formula + descent (so the streams match)."""
    rng = np.random.default_rng(capacity)
    leaves = rng.random(capacity) * (rng.random(capacity) < 0.8)
    leaves[-1] = 0.5  # total > 0
    tree = SumTree(capacity)
    tree.set(np.arange(capacity), leaves)
    for n in (0, 1, 5, 256):
        uniforms = rng.random(n)
        # Include the largest uniform below 1 (the mass rounds to the total or just below).
        if n:
            uniforms[-1] = np.nextafter(1.0, 0.0)
        got = _sample_kernel(tree._tree, tree._levels, uniforms, stratified)
        levels = sum_levels(tree)
        total = levels[0][0]
        assert total == tree.total
        stratum = total / n if n else 0.0
        for i in range(n):
            mass = (i + uniforms[i]) * stratum if stratified else uniforms[i] * total
            assert got[i] == ref_descend(levels, float(mass))[0]


def test_sample_and_find_prefix_sum_on_a_large_tree() -> None:
    """A 2**20-leaf tree with zero runs: batched kernels equal the per-mass reference."""
    rng = np.random.default_rng(5)
    capacity = 1_000_000
    leaves = rng.random(capacity) ** 4
    leaves[rng.random(capacity) < 0.3] = 0.0
    leaves[200_000:300_000] = 0.0
    tree = SumTree(capacity)
    tree.set(np.arange(capacity), leaves)
    masses = np.concatenate([rng.random(2000) * tree.total, [0.0, tree.total]])
    got = tree.find_prefix_sum(masses)
    levels = sum_levels(tree)
    want = [ref_descend(levels, float(m))[0] for m in masses]
    np.testing.assert_array_equal(got, want)
    # The 8-ary tree has 7 levels below the root here (a binary one had 20).
    assert len(levels) == 8 and tree._levels.shape == (8, 2)


# -- the batched set --------------------------------------------------------------------------


def _value(kind: str) -> st.SearchStrategy[float]:
    small = st.sampled_from([0.0, -0.0, 1.0, 2.0, 0.5, 3.25])
    if kind == "sum":
        return st.one_of(small.filter(lambda v: v >= 0.0), st.floats(0.0, 1e6))
    return st.one_of(small, st.floats(-1e6, 1e6), st.sampled_from([math.inf, -math.inf]))


@st.composite
def set_sequences(draw: Any, kind: str) -> tuple[int, list[list[tuple[int, float]]]]:
    capacity = draw(st.integers(1, 80))
    batches = draw(
        st.lists(
            st.lists(st.tuples(st.integers(0, capacity - 1), _value(kind)), max_size=3 * capacity),
            max_size=6,
        )
    )
    return capacity, batches


@pytest.mark.parametrize("kind", list(OPS))
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_set_kernel_equals_per_leaf_set_then_full_rebuild(kind: str, data: st.DataObject) -> None:
    """Bit for bit, every node, after each batch (duplicates: the last one wins)."""
    cls, op, neutral = OPS[kind]
    capacity, batches = data.draw(set_sequences(kind))
    tree = cls(capacity)
    leaves = [neutral] * capacity
    for batch in batches:
        idx = np.array([i for i, _ in batch], dtype=np.int64)
        vals = np.array([v for _, v in batch], dtype=np.float64)
        _set_kernel(tree._tree, tree._levels, op, idx, vals)
        for i, v in batch:
            leaves[i] = v
        np.testing.assert_array_equal(tree_bits(tree), bits(ref_tree(leaves, op, neutral)))


@pytest.mark.parametrize("kind", list(OPS))
@pytest.mark.parametrize("batch", [1, 3, 255, 256, 257, 5000, 40_000])
def test_set_kernel_batch_widths(kind: str, batch: int) -> None:
    """Batches narrower and wider than the levels (the dense top-level switch) on 2**15 leaves."""
    cls, op, neutral = OPS[kind]
    capacity = 30_000
    rng = np.random.default_rng(batch)
    tree = cls(capacity)
    leaves = np.full(capacity, neutral)
    for _ in range(3):
        idx = rng.integers(0, capacity, batch)
        vals = rng.random(batch) * 100.0
        _set_kernel(tree._tree, tree._levels, op, idx, vals)
        leaves[idx] = vals  # numpy fancy assignment: the last duplicate wins
        np.testing.assert_array_equal(tree_bits(tree), bits(ref_tree(leaves.tolist(), op, neutral)))


def test_set_kernel_keeps_negative_zero_exact() -> None:
    """``-0.0`` leaves propagate exactly as a rebuild does (min picks by order on ties)."""
    for cls, op, neutral in OPS.values():
        tree = cls(4)
        leaves = [neutral] * 4
        for i, v in [(0, 0.0), (1, -0.0), (0, -0.0), (2, 0.0), (1, 0.0), (3, -0.0)]:
            _set_kernel(tree._tree, tree._levels, op, np.array([i]), np.array([v]))
            leaves[i] = v
            np.testing.assert_array_equal(tree_bits(tree), bits(ref_tree(leaves, op, neutral)))


# -- the interleaved sum/min pair ----------------------------------------------------------


@pytest.mark.parametrize("capacity", [1, 2, 5, 1000])
def test_sum_min_pair_behaves_as_two_standalone_trees(capacity: int) -> None:
    sums, mins, nodes = _sum_min_pair(capacity)
    assert nodes.shape == (2, sums._root + 1, K)
    assert sums._tree.flags.c_contiguous and mins._tree.flags.c_contiguous
    assert np.shares_memory(sums._tree, nodes) and np.shares_memory(mins._tree, nodes)
    alone_sum, alone_min = SumTree(capacity), MinTree(capacity)
    rng = np.random.default_rng(capacity)
    for _ in range(5):
        idx = rng.integers(0, capacity, 7)
        vals = rng.random(7)
        for pair, alone in ((sums, alone_sum), (mins, alone_min)):
            pair.set(idx, vals)
            alone.set(idx, vals)
            np.testing.assert_array_equal(pair._tree, alone._tree)
    np.testing.assert_array_equal(nodes[0], alone_sum._tree)
    np.testing.assert_array_equal(nodes[1], alone_min._tree)
    assert sums.total == alone_sum.total and mins.min == alone_min.min
    np.testing.assert_array_equal(
        sums.sample(50, np.random.default_rng(1)), alone_sum.sample(50, np.random.default_rng(1))
    )
    masses = rng.random(20) * sums.total
    np.testing.assert_array_equal(sums.find_prefix_sum(masses), alone_sum.find_prefix_sum(masses))
    # A state round trip rebuilds in place: the views still share the pair's memory.
    state = alone_sum.state_dict()
    sums.load_state_dict(SumTree(capacity).state_dict())
    assert sums.total == 0.0 and nodes[0, sums._root, 0] == 0.0
    sums.load_state_dict(state)
    np.testing.assert_array_equal(nodes[0], alone_sum._tree)
    np.testing.assert_array_equal(mins.get(np.arange(capacity)), alone_min.get(np.arange(capacity)))


def test_over_refuses_a_mismatched_array() -> None:
    with pytest.raises(ValueError, match="shape"):
        SumTree._over(5, np.zeros(16))
    with pytest.raises(ValueError, match="shape"):
        SumTree._over(9, np.zeros((2, K)))  # 9 leaves need 2 leaf groups, 1 above, the root
    with pytest.raises(ValueError, match="float64"):
        SumTree._over(4, np.zeros((2, K), dtype=np.float32))
    assert SumTree._over(9, np.zeros((4, K))).total == 0.0


# -- the layout --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("capacity", "counts"),
    [
        (1, [1, 1]),
        (8, [1, 8]),
        (9, [1, 2, 9]),
        (64, [1, 8, 64]),
        (65, [1, 2, 9, 65]),
        (1_000_000, [1, 4, 31, 245, 1954, 15625, 125000, 1_000_000]),
    ],
)
def test_layout_levels(capacity: int, counts: list[int]) -> None:
    """Node counts per level (root first), leaves first in memory, each level whole groups."""
    levels = _layout(capacity)
    assert levels[:, 1].tolist() == counts
    groups = [-(-c // K) for c in counts]
    firsts = np.cumsum([0, *groups[::-1]])[:-1][::-1]  # leaves at group 0, the root last
    assert levels[:, 0].tolist() == firsts.tolist()
    tree = SumTree(capacity)
    assert tree._tree.shape == (sum(groups), K) and tree._root == sum(groups) - 1
    # Every group is one 64-byte cache line.
    assert tree._tree.ctypes.data % 64 == 0 and tree._tree.strides == (64, 8)
    assert tree._tree.flags.c_contiguous


def test_layout_is_smaller_than_the_binary_heap() -> None:
    """About 8/7 of the leaves (the binary heap took 2 * next_pow2(capacity))."""
    for capacity in (1000, 1025, 1_000_000):
        size = SumTree(capacity)._tree.size
        assert capacity <= size <= capacity * 8 / 7 + 8 * 8
        assert size < 2 * (1 << (capacity - 1).bit_length())
