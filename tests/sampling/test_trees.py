"""Tests of the Sum/Min/Max segment trees against slow, obviously correct references.

The reference for every tree is a plain numpy array of leaves (``np.sum``/``np.min``/``np.max``
for the root; ``np.cumsum`` + ``searchsorted(side="right")`` for prefix sums). Where the tree and
the reference must agree bit for bit, leaves are small integers: then every partial sum is exact
whatever the summation order, and so is every ``mass - left_sum`` in the descent (an integer
subtracted from a float ``< 2**53`` that is at least as large is exact).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray
from scipy.stats import chisquare

from rlreplay.errors import (
    CheckpointError,
    ConfigError,
    DTypeError,
    EmptyBufferError,
    InvalidIdError,
    ReplayError,
    ShapeError,
)
from rlreplay.sampling import MaxTree, MinTree, SumTree
from rlreplay.sampling.trees import _SegmentTree

CAPACITIES = [1, 2, 3, 5, 7, 8, 1000, 1023, 1025]
KINDS: dict[str, tuple[type[_SegmentTree], Any, float]] = {
    # name: (class, reference reduction, neutral element)
    "sum": (SumTree, np.sum, 0.0),
    "min": (MinTree, np.min, math.inf),
    "max": (MaxTree, np.max, -math.inf),
}


# -- reference model --------------------------------------------------------------------------


class Reference:
    """The leaves as a plain array; a Python loop per item makes "last wins" obvious."""

    def __init__(self, kind: str, capacity: int) -> None:
        _, self.reduce, neutral = KINDS[kind]
        self.leaves = np.full(capacity, neutral)

    def set(self, indices: Any, values: Any) -> None:
        indices = np.asarray(indices).ravel()
        values = np.broadcast_to(np.asarray(values, dtype=np.float64), indices.shape)
        for i, v in zip(indices.tolist(), values.tolist(), strict=True):
            self.leaves[i] = v

    @property
    def root(self) -> float:
        return float(self.reduce(self.leaves))


def ref_find_prefix_sum(leaves: NDArray[np.float64], values: Any) -> NDArray[np.int64]:
    """Smallest k with value < cumsum[k]; the last non-zero leaf when no k qualifies."""
    cumsum = np.cumsum(leaves)
    out = np.searchsorted(cumsum, np.asarray(values, dtype=np.float64), side="right")
    last_nonzero = np.flatnonzero(leaves > 0)[-1]
    return np.where(out >= len(leaves), last_nonzero, out).astype(np.int64)


def root(tree: _SegmentTree) -> float:
    if isinstance(tree, SumTree):
        return tree.total
    if isinstance(tree, MinTree):
        return tree.min
    assert isinstance(tree, MaxTree)
    return tree.max


def assert_consistent(tree: _SegmentTree) -> None:
    """White-box: every internal node is exactly the left-to-right fold of its 8 children (one
    row of the array, the group of the level below) and every padding lane is neutral."""
    nodes, levels, neutral = tree._tree, tree._levels, type(tree)._NEUTRAL
    k = nodes.shape[1]
    flat = nodes.reshape(-1)
    used = np.zeros(flat.shape, dtype=bool)
    for d in range(levels.shape[0]):
        first, count = int(levels[d, 0]), int(levels[d, 1])
        used[first * k : first * k + count] = True
        if d + 1 == levels.shape[0]:
            continue
        below = int(levels[d + 1, 0])
        children = nodes[below : below + count]  # row i: the children of node i of level d
        expected = children[:, 0].copy()
        for j in range(1, k):
            c = children[:, j]
            if isinstance(tree, SumTree):
                expected = expected + c
            elif isinstance(tree, MinTree):
                expected = np.where(expected <= c, expected, c)
            else:
                expected = np.where(expected >= c, expected, c)
        np.testing.assert_array_equal(flat[first * k : first * k + count], expected)
    np.testing.assert_array_equal(flat[~used], neutral)


def assert_matches(tree: _SegmentTree, ref: Reference, *, exact: bool = True) -> None:
    np.testing.assert_array_equal(tree.get(np.arange(tree.capacity)), ref.leaves)
    if exact or not isinstance(tree, SumTree):
        assert root(tree) == ref.root
    else:
        assert root(tree) == pytest.approx(ref.root, rel=1e-12, abs=1e-300)
    assert_consistent(tree)


def full_state(tree: _SegmentTree) -> NDArray[np.float64]:
    return tree._tree.copy()


# -- construction, set, get, root -------------------------------------------------------------


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("capacity", CAPACITIES)
def test_fresh_tree_is_neutral(kind: str, capacity: int) -> None:
    cls, _, neutral = KINDS[kind]
    tree = cls(capacity)
    assert tree.capacity == len(tree) == capacity
    np.testing.assert_array_equal(tree.get(np.arange(capacity)), np.full(capacity, neutral))
    assert root(tree) == neutral
    assert_consistent(tree)


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("capacity", CAPACITIES)
def test_batch_sets_match_reference(kind: str, capacity: int) -> None:
    rng = np.random.default_rng(capacity)
    cls, _, _ = KINDS[kind]
    tree, ref = cls(capacity), Reference(kind, capacity)
    for step in range(12):
        k = int(rng.integers(0, 2 * capacity + 2))
        idx = rng.integers(0, capacity, size=k)  # duplicates are likely
        if step % 3 == 0:  # integers (and zeros): sums are exact in any order
            vals = rng.integers(0, 4, size=k).astype(np.float64)
        else:
            vals = rng.exponential(size=k) * 10.0 ** rng.integers(-5, 6, size=k)
        if kind != "sum" and step % 4 == 1:
            vals[rng.random(k) < 0.2] = -math.inf if kind == "max" else math.inf
        tree.set(idx, vals)
        ref.set(idx, vals)
        # Sums are exact (so equal in any order) while every leaf is a small integer.
        assert_matches(tree, ref, exact=bool(np.all(ref.leaves == np.round(ref.leaves))))


@pytest.mark.parametrize("kind", list(KINDS))
def test_duplicates_last_occurrence_wins(kind: str) -> None:
    cls, _, _ = KINDS[kind]
    tree = cls(5)
    tree.set([3, 1, 3, 3, 1], [7.0, 2.0, 1.0, 4.0, 9.0])
    np.testing.assert_array_equal(tree.get([1, 3]), [9.0, 4.0])
    assert_consistent(tree)


@pytest.mark.parametrize("kind", list(KINDS))
def test_scalar_broadcast_shapes_and_empty_batch(kind: str) -> None:
    cls, _, neutral = KINDS[kind]
    tree = cls(6)
    tree.set(np.array([[0, 2], [4, 5]], dtype=np.uint8), 3.0)  # any integer dtype and shape
    np.testing.assert_array_equal(tree.get([[0, 1], [2, 4]]), [[3.0, neutral], [3.0, 3.0]])
    tree.set(1, 2.0)  # scalar index
    got = tree.get(1)
    assert isinstance(got, np.ndarray)
    assert got.shape == () and got.dtype == np.float64 and got == 2.0
    before = full_state(tree)
    tree.set([], [])
    tree.set(np.array([], dtype=np.int64), 5.0)
    np.testing.assert_array_equal(full_state(tree), before)
    assert tree.get([]).shape == (0,)


def test_read_only_and_strided_inputs() -> None:
    tree = SumTree(10)
    idx = np.arange(20)[::2][:5]  # strided view
    vals = np.arange(5, dtype=np.float64)
    idx.flags.writeable = False
    vals.flags.writeable = False
    tree.set(idx, vals)
    np.testing.assert_array_equal(tree.get(np.arange(0, 10, 2)), vals)
    masses = np.array([0.5, 9.0, 10.0])
    masses.flags.writeable = False
    assert tree.find_prefix_sum(masses).tolist() == [2, 8, 8]


def test_min_and_max_accept_infinities() -> None:
    mins, maxs = MinTree(3), MaxTree(3)
    mins.set([0, 1, 2], [math.inf, -math.inf, 1.0])
    maxs.set([0, 1, 2], [math.inf, -math.inf, 1.0])
    assert (mins.min, maxs.max) == (-math.inf, math.inf)
    mins.set(1, math.inf)  # "absent" again
    maxs.set(0, -math.inf)
    assert (mins.min, maxs.max) == (1.0, 1.0)


# -- Hypothesis: sequences of batch sets against the reference --------------------------------

batch_ops = st.integers(1, 40).flatmap(
    lambda cap: st.tuples(
        st.just(cap),
        st.lists(
            st.lists(
                st.tuples(
                    st.integers(0, cap - 1),
                    st.one_of(st.just(0.0), st.integers(0, 50).map(float), st.floats(0, 1e6)),
                ),
                max_size=12,
            ),
            min_size=1,
            max_size=10,
        ),
    )
)


@pytest.mark.parametrize("kind", list(KINDS))
@settings(max_examples=60, deadline=None)
@given(case=batch_ops)
def test_hypothesis_batch_sets(kind: str, case: tuple[int, list[list[tuple[int, float]]]]) -> None:
    capacity, ops = case
    cls, _, _ = KINDS[kind]
    tree, ref = cls(capacity), Reference(kind, capacity)
    for op in ops:
        idx = np.array([i for i, _ in op], dtype=np.int64)
        vals = np.array([v for _, v in op], dtype=np.float64)
        tree.set(idx, vals)
        ref.set(idx, vals)
        assert_matches(tree, ref, exact=False)


@settings(max_examples=80, deadline=None)
@given(
    leaves=st.lists(st.integers(0, 9), min_size=1, max_size=70).filter(any),
    fractions=st.lists(st.floats(0, 1), max_size=20),
)
def test_hypothesis_find_prefix_sum(leaves: list[int], fractions: list[float]) -> None:
    tree = SumTree(len(leaves))
    tree.set(np.arange(len(leaves)), leaves)
    total = tree.total
    # Every boundary (each prefix sum, and just below it) plus arbitrary points in [0, total].
    boundaries = np.cumsum(leaves, dtype=np.float64)
    values = np.concatenate(
        [[0.0], boundaries, np.maximum(boundaries - 0.5, 0.0), np.array(fractions) * total]
    )
    got = tree.find_prefix_sum(values)
    np.testing.assert_array_equal(got, ref_find_prefix_sum(np.array(leaves, float), values))


# -- find_prefix_sum --------------------------------------------------------------------------


@pytest.mark.parametrize("capacity", CAPACITIES)
def test_find_prefix_sum_matches_reference(capacity: int) -> None:
    rng = np.random.default_rng(100 + capacity)
    leaves = rng.integers(0, 5, size=capacity).astype(np.float64)
    leaves[rng.integers(capacity)] = 3.0  # total > 0
    tree = SumTree(capacity)
    tree.set(np.arange(capacity), leaves)
    cumsum = np.cumsum(leaves)
    values = np.concatenate([[0.0], cumsum, cumsum - 0.25, rng.random(500) * tree.total])
    values = values[(values >= 0) & (values <= tree.total)]
    got = tree.find_prefix_sum(values)
    np.testing.assert_array_equal(got, ref_find_prefix_sum(leaves, values))
    assert np.all(leaves[got] > 0)
    # Shape follows the input; a scalar gives a 0-d array.
    assert tree.find_prefix_sum(values[:6].reshape(2, 3)).shape == (2, 3)
    assert tree.find_prefix_sum(0.0).shape == ()


def test_find_prefix_sum_golden() -> None:
    tree = SumTree(6)
    tree.set(np.arange(6), [0.0, 1.0, 0.0, 0.0, 2.0, 0.0])
    values = [0.0, 0.5, 1.0, 1.5, 2.999, 3.0]
    # 0 -> leaf 1 (leaf 0 is empty); 1.0 is not < 1, so leaf 4; total -> last non-zero leaf (4).
    assert tree.find_prefix_sum(values).tolist() == [1, 1, 4, 4, 4, 4]


ADVERSARIAL_LEAVES = [
    [1e-300, 1.0, 1e16],
    [1e16, 1.0, 1e-300],
    [1e16, 0.0, 1.0, 0.0, 1e-300, 0.0],
    [0.0, 0.0, 5e-324],  # the smallest subnormal
    [5e-324, 0.0, 0.0, 0.0, 0.0],
    [0.1] * 10 + [0.0] * 3,  # 0.1 * 10 != 1 in float
    [1.0, 2.0**-60, 2.0**-60, 2.0**-60, 0.0],
    [1e-17] * 7 + [1.0] + [1e-17] * 9,
    [3.3e300, 1e-300, 0.0, 2.2e300],
]


@pytest.mark.parametrize("leaves", ADVERSARIAL_LEAVES)
def test_find_prefix_sum_rounding_is_safe(leaves: list[float]) -> None:
    arr = np.array(leaves)
    tree = SumTree(len(arr))
    tree.set(np.arange(len(arr)), arr)
    total = tree.total
    values = np.array(
        [0.0, total, np.nextafter(total, 0.0), total / 2, *np.cumsum(arr), *arr, 5e-324]
    )
    values = values[values <= total]
    got = tree.find_prefix_sum(values)
    assert np.all((got >= 0) & (got < len(arr)))
    assert np.all(arr[got] > 0), (values, got)
    # values == total (or one ulp below, which rounds the same way here) -> the last non-zero.
    assert got[1] == np.flatnonzero(arr)[-1]
    # Stratified sampling pushes masses up to (and by rounding past) total: still safe.
    draws = tree.sample(1000, np.random.default_rng(0))
    assert np.all(arr[draws] > 0)


def test_find_prefix_sum_near_exact_on_wide_ranges() -> None:
    """Leaves over 200 decades: the answer is that of the exact reference up to a tiny slack."""
    rng = np.random.default_rng(5)
    capacity = 999
    leaves = 10.0 ** rng.uniform(-200, 100, size=capacity)
    leaves[rng.random(capacity) < 0.3] = 0.0
    tree = SumTree(capacity)
    tree.set(np.arange(capacity), leaves)
    total = tree.total
    values = np.concatenate([rng.random(2000) * total, [0.0, total, np.nextafter(total, 0)]])
    got = tree.find_prefix_sum(values)
    assert np.all(leaves[got] > 0)
    # The exact answer for some mass within total * 1e-12 of each value must be ``got``.
    cumsum = np.cumsum(leaves)
    slack = total * 1e-12
    low = np.searchsorted(cumsum, values - slack, side="right")
    high = np.minimum(
        np.searchsorted(cumsum, values + slack, side="right"), np.flatnonzero(leaves)[-1]
    )
    assert np.all((low <= got) & (got <= high))


def test_find_prefix_sum_errors() -> None:
    tree = SumTree(4)
    with pytest.raises(EmptyBufferError, match="total"):
        tree.find_prefix_sum([0.0])
    tree.set([1, 2], [1.0, 2.0])
    for bad in ([3.5], [-0.1], [0.0, math.nan], [math.inf]):
        with pytest.raises(ValueError, match=r"values must be in \[0, total=3.0\]"):
            tree.find_prefix_sum(bad)
    with pytest.raises(DTypeError, match="values"):
        tree.find_prefix_sum(["a"])


# -- drift -------------------------------------------------------------------------------------


def test_no_drift_after_a_million_updates() -> None:
    rng = np.random.default_rng(11)
    capacity = 4096
    tree = SumTree(capacity)
    for _ in range(4):  # 4 x 250k = 10^6 updates
        k = 250_000
        idx = rng.integers(0, capacity, size=k)
        vals = rng.exponential(size=k) * 10.0 ** rng.integers(-8, 9, size=k)
        tree.set(idx, vals)
    tree.set(np.arange(capacity), rng.random(capacity))  # huge values gone: worst case for deltas
    leaves = tree.get(np.arange(capacity))
    assert tree.total == pytest.approx(math.fsum(leaves), rel=1e-9)
    # A tree rebuilt from the leaves is the same bit for bit: the tree is a function of them.
    rebuilt = SumTree.from_state_dict(tree.state_dict())
    np.testing.assert_array_equal(rebuilt._tree, tree._tree)


# -- sampling ----------------------------------------------------------------------------------


def _priority_tree(capacity: int = 37, seed: int = 3) -> tuple[SumTree, NDArray[np.float64]]:
    rng = np.random.default_rng(seed)
    leaves = rng.integers(0, 6, size=capacity).astype(np.float64)  # about 1 in 6 is zero
    tree = SumTree(capacity)
    tree.set(np.arange(capacity), leaves)
    return tree, leaves


@pytest.mark.parametrize("stratified", [True, False])
def test_sample_frequencies_chi_square(stratified: bool) -> None:
    tree, leaves = _priority_tree()
    n = 200_000
    draws = tree.sample(n, np.random.default_rng(2024), stratified=stratified)
    assert draws.dtype == np.int64 and draws.shape == (n,)
    counts = np.bincount(draws, minlength=len(leaves))
    assert np.all(counts[leaves == 0] == 0)
    positive = leaves > 0
    expected = n * leaves[positive] / leaves.sum()
    assert chisquare(counts[positive], expected).pvalue > 1e-3
    if stratified:
        # One draw per stratum: a leaf of mass m gets n * m / total draws, give or take one
        # (plus one more for each of its two stratum boundaries).
        assert np.max(np.abs(counts[positive] - expected)) <= 2.0
        assert np.all(np.diff(draws) >= 0)  # strata are visited in order


@pytest.mark.parametrize("stratified", [True, False])
def test_sample_uses_exactly_rng_random_n(stratified: bool) -> None:
    tree, leaves = _priority_tree(capacity=1025, seed=9)
    n = 4096
    rng, twin = np.random.default_rng(77), np.random.default_rng(77)
    draws = tree.sample(n, rng, stratified=stratified)
    uniforms = twin.random(n)
    total = tree.total
    masses = (np.arange(n) + uniforms) * (total / n) if stratified else uniforms * total
    np.testing.assert_array_equal(draws, ref_find_prefix_sum(leaves, masses))
    # The Generator advanced exactly as one rng.random(n) call: checkpoints replay the draws.
    assert rng.bit_generator.state == twin.bit_generator.state
    state = rng.bit_generator.state
    again = np.random.default_rng()
    again.bit_generator.state = state
    np.testing.assert_array_equal(
        tree.sample(8, rng, stratified=stratified), tree.sample(8, again, stratified=stratified)
    )


def test_sample_never_returns_zero_leaves() -> None:
    capacity = 1000
    tree = SumTree(capacity)
    tree.set([0, 500, 999], [1e-300, 1.0, 5e-324])  # everything else is 0
    for stratified in (True, False):
        draws = tree.sample(10_000, np.random.default_rng(1), stratified=stratified)
        assert set(np.unique(draws).tolist()) <= {0, 500, 999}
    tree.set(500, 0.0)
    draws = tree.sample(1000, np.random.default_rng(2))
    assert set(np.unique(draws).tolist()) <= {0, 999}


def test_sample_edge_cases_and_errors() -> None:
    tree = SumTree(3)
    rng = np.random.default_rng(0)
    with pytest.raises(EmptyBufferError):
        tree.sample(4, rng)
    tree.set(2, 1.0)
    assert tree.sample(0, rng).shape == (0,)
    assert tree.sample(5, rng).tolist() == [2] * 5
    with pytest.raises(ValueError, match="n must be an integer >= 0"):
        tree.sample(-1, rng)
    with pytest.raises(ValueError, match="n must be"):
        tree.sample(2.5, rng)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"rng must be a numpy\.random\.Generator"):
        tree.sample(2, np.random.RandomState(0))  # type: ignore[arg-type]


# -- validation: errors name the argument, rejected calls change nothing ----------------------


REJECTED_SETS: list[tuple[str, Any, Any, type[Exception], str]] = [
    # (kind, indices, values, error, message pattern)
    ("sum", [0, 7], 1.0, InvalidIdError, r"indices must be in \[0, 7\).*got 7 at position 1"),
    ("min", [-1], 1.0, InvalidIdError, r"indices must be in \[0, 7\).*got -1"),
    ("max", np.array([2**63], dtype=np.uint64), 1.0, InvalidIdError, "indices"),
    ("sum", [0.0, 1.0], 1.0, DTypeError, "indices must be integers"),
    ("max", [True], 1.0, DTypeError, "indices must be integers"),
    ("sum", [0, 1], [1.0, 2.0, 3.0], ShapeError, r"values must be a scalar or have the shape"),
    ("min", [[0, 1]], [1.0, 2.0], ShapeError, "values"),
    ("sum", [0, 1], ["a", "b"], DTypeError, "values must be real numbers"),
    ("sum", [0, 1], [1.0, -1.0], ValueError, "values must be finite and >= 0.*position 1"),
    ("sum", [0, 1], [math.nan, 1.0], ValueError, "values must be finite and >= 0"),
    ("sum", [0], math.inf, ValueError, "values must be finite and >= 0"),
    ("sum", [3, 4], [1e308, 1e308], ValueError, "overflow"),
    ("min", [0, 1], [1.0, math.nan], ValueError, "values must not be NaN.*position 1"),
    ("max", [0], math.nan, ValueError, "values must not be NaN"),
]


@pytest.mark.parametrize(("kind", "indices", "values", "error", "pattern"), REJECTED_SETS)
def test_rejected_set_changes_nothing(
    kind: str, indices: Any, values: Any, error: type[Exception], pattern: str
) -> None:
    cls, _, _ = KINDS[kind]
    tree = cls(7)
    tree.set([0, 1, 2, 5], [1.0, 2.0, 0.5, 3.0])
    before = full_state(tree)
    with pytest.raises(error, match=pattern) as info:
        tree.set(indices, values)
    assert isinstance(info.value, ValueError | TypeError)
    np.testing.assert_array_equal(full_state(tree), before)


def test_index_and_shape_errors_are_replay_errors() -> None:
    tree = SumTree(2)
    for call in (lambda: tree.get([2]), lambda: tree.set([0], [1.0, 2.0])):
        with pytest.raises(ReplayError):
            call()


@pytest.mark.parametrize("capacity", [0, -3, 2.5, True, "8", None])
def test_bad_capacity(capacity: Any) -> None:
    with pytest.raises(ConfigError, match="capacity must be an integer >= 1"):
        SumTree(capacity)


# -- state -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("capacity", [1, 5, 1025])
def test_state_round_trip(kind: str, capacity: int, tmp_path: Any) -> None:
    cls, _, _ = KINDS[kind]
    rng = np.random.default_rng(capacity)
    tree = cls(capacity)
    tree.set(rng.integers(0, capacity, size=capacity), rng.random(capacity))
    state = tree.state_dict()
    assert set(state) == {"version", "kind", "capacity", "leaves"}
    copy = cls.from_state_dict(state)
    np.testing.assert_array_equal(copy._tree, tree._tree)
    # The state is a copy: later updates to the tree do not reach it.
    tree.set(0, 123.0)
    assert state["leaves"][0] != 123.0
    # Through numpy's own file format (ints and strings come back as 0-d arrays).
    np.savez(tmp_path / "tree.npz", **state)
    with np.load(tmp_path / "tree.npz") as loaded:
        tree.load_state_dict(dict(loaded))
    np.testing.assert_array_equal(tree._tree, copy._tree)
    assert_consistent(tree)


def test_load_state_dict_rejects_bad_states_and_changes_nothing() -> None:
    tree = SumTree(4)
    tree.set([0, 3], [1.0, 2.0])
    good = tree.state_dict()
    before = full_state(tree)
    bad_states = [
        ({k: v for k, v in good.items() if k != "leaves"}, "missing keys"),
        ({**good, "version": 99}, "version 99"),
        ({**good, "version": "one"}, "'version' must be an integer"),
        ({**good, "kind": "min"}, "kind 'sum'"),
        ({**good, "capacity": 5, "leaves": np.zeros(5)}, "capacity 5"),
        ({**good, "leaves": np.zeros(3)}, r"shape \(4,\)"),
        ({**good, "leaves": np.array([0.0, -1.0, 0.0, 0.0])}, "finite and >= 0"),
    ]
    for state, pattern in bad_states:
        with pytest.raises(CheckpointError, match=pattern):
            tree.load_state_dict(state)
        np.testing.assert_array_equal(full_state(tree), before)
    with pytest.raises(CheckpointError, match="finite and >= 0"):
        SumTree.from_state_dict({**good, "leaves": np.array([0.0, math.nan, 0.0, 0.0])})
    assert MinTree.from_state_dict({**MinTree(2).state_dict()}).min == math.inf


def test_states_saved_by_the_binary_layout_still_load() -> None:
    """States hold leaves only (``version`` 1, as the binary heap layout wrote them): the 8-ary
    tree rebuilds its nodes from them."""
    leaves = np.array([1.0, 0.0, 2.5, 4.0, 0.0, 0.5, 3.0, 1.0, 2.0])
    state = {"version": np.int64(1), "kind": np.str_("sum"), "capacity": 9, "leaves": leaves}
    tree = SumTree.from_state_dict(state)
    np.testing.assert_array_equal(tree.get(np.arange(9)), leaves)
    assert tree.total == 14.0
    assert tree.find_prefix_sum([0.0, 1.0, 3.5, 13.9]).tolist() == [0, 2, 3, 8]
    assert_consistent(tree)
    assert MinTree.from_state_dict({**state, "kind": "min"}).min == 0.0
