"""``SumTree.sample(n, rng=None)``: without ``rng`` a tree draws from a Generator of its own.

That Generator is ``numpy.random.default_rng(seed)`` with the ``seed`` given at construction,
made on the first draw that needs it, so a seeded tree draws exactly what the same tree given
``default_rng(seed)`` draws; a caller's ``rng`` leaves the tree's own untouched.
"""

from __future__ import annotations

import numpy as np
import pytest

import rlreplay as rr
from rlreplay.sampling.trees import _sum_min_pair

LEAVES = np.array([0.0, 1.0, 3.0, 0.0, 2.5, 0.5, 7.0, 0.0, 1.0, 4.0])


def filled(seed: int | None = None) -> rr.SumTree:
    tree = rr.SumTree(LEAVES.size, seed=seed)
    tree.set(np.arange(LEAVES.size), LEAVES)
    return tree


@pytest.mark.parametrize("stratified", [True, False])
def test_a_seeded_tree_draws_what_default_rng_of_that_seed_draws(stratified: bool) -> None:
    tree, reference = filled(seed=123), filled()
    rng = np.random.default_rng(123)
    for n in (1, 7, 64, 0, 300):
        got = tree.sample(n, stratified=stratified)
        np.testing.assert_array_equal(got, reference.sample(n, rng, stratified=stratified))
        assert got.dtype == np.int64 and got.shape == (n,)
        assert (LEAVES[got] > 0).all()


def test_same_seed_same_draws_other_seed_other_draws() -> None:
    a, b, c = filled(seed=5), filled(seed=5), filled(seed=6)
    draws_a = np.concatenate([a.sample(50) for _ in range(4)])
    draws_b = np.concatenate([b.sample(50) for _ in range(4)])
    draws_c = np.concatenate([c.sample(50) for _ in range(4)])
    np.testing.assert_array_equal(draws_a, draws_b)
    assert not np.array_equal(draws_a, draws_c)


def test_a_given_rng_leaves_the_trees_own_untouched() -> None:
    tree, twin = filled(seed=9), filled(seed=9)
    tree.sample(40, np.random.default_rng(0))  # the caller's Generator, not the tree's
    np.testing.assert_array_equal(tree.sample(40), twin.sample(40))
    assert tree.rng is tree.rng  # one Generator for the tree's lifetime


def test_unseeded_trees_sample_and_the_law_is_proportional() -> None:
    tree = filled()
    draws = tree.sample(200_000, stratified=False)
    freq = np.bincount(draws, minlength=LEAVES.size) / draws.size
    np.testing.assert_allclose(freq, LEAVES / LEAVES.sum(), atol=0.01)


def test_trees_made_over_shared_nodes_sample_without_an_rng() -> None:
    sums, _mins, _ = _sum_min_pair(4)
    sums.set([1, 3], [1.0, 2.0])
    assert set(sums.sample(100).tolist()) <= {1, 3}
    assert rr.SumTree.from_state_dict(sums.state_dict()).sample(3).shape == (3,)


@pytest.mark.parametrize("seed", [-1, 1.5, "3", True, [1, 2]])
def test_a_bad_seed_is_a_config_error(seed: object) -> None:
    with pytest.raises(rr.ConfigError, match="seed"):
        rr.SumTree(4, seed=seed)  # type: ignore[arg-type]


def test_a_bad_rng_is_still_a_type_error() -> None:
    with pytest.raises(TypeError, match="Generator"):
        filled().sample(3, np.random.RandomState(0))  # type: ignore[arg-type]


def test_an_empty_tree_raises_before_drawing() -> None:
    tree = rr.SumTree(3, seed=1)
    with pytest.raises(rr.EmptyBufferError):
        tree.sample(2)
    tree.set([0], [1.0])
    np.testing.assert_array_equal(tree.sample(2), [0, 0])
