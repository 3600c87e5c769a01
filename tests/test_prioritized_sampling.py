"""PrioritizedReplayBuffer sampling laws: chi-square, strata, rank staleness bound, tree drift."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy.stats import chisquare

import rlreplay as rr
from tests.test_prioritized import check_trees, feed, feed_all, make, masses


def frequencies(buf: rr.PrioritizedReplayBuffer, draws: int, batch: int) -> tuple[Any, Any]:
    """Observed counts and expected probabilities over the sampleable ids."""
    expected = masses(buf)
    ids = np.array(sorted(expected))
    m = np.array([expected[i] for i in ids.tolist()])
    drawn = np.concatenate([buf.sample(batch).ids for _ in range(draws // batch)])
    counts = np.array([(drawn == i).sum() for i in ids.tolist()])
    return counts, m / m.sum()


@pytest.mark.parametrize("variant", ["proportional", "rank_based"])
@pytest.mark.parametrize("stratified", [True, False])
@pytest.mark.parametrize("batch", [1, 64])
def test_chi_square_frequencies_match_p(variant: str, stratified: bool, batch: int) -> None:
    kw: dict[str, Any] = {"sort_interval": 1} if variant == "rank_based" else {}
    buf = make(64, variant=variant, alpha=0.7, stratified=stratified, seed=11, num_envs=2, **kw)
    for env in (0, 1):
        feed(buf, 12, env_id=env, every=6, start=50 * env)
    ids = buf.sampleable_ids()
    rng = np.random.default_rng(3)
    prio = rng.uniform(0.05, 3.0, ids.shape)
    prio[[2, 9]] = prio[4]  # ties (rank-based: shared rank)
    buf.update_priorities(ids, prio)
    counts, p = frequencies(buf, 8_000 if batch == 1 else 64_000, batch)
    assert counts.sum() * p.min() > 20  # enough draws per cell for the chi-square law
    result = chisquare(counts, counts.sum() * p)
    assert result.pvalue > 1e-3, result


def test_draws_follow_reported_probabilities_under_stale_ranks() -> None:
    """Between re-sorts the law is that of the ranks in use, and P(i) reports exactly it."""
    buf = make(64, variant="rank_based", alpha=1.0, sort_interval=10_000, seed=4)
    ids = feed(buf, 30, every=10)
    buf._prios.resort()
    buf.update_priorities(ids[:10], np.linspace(5.0, 9.0, 10))  # stale ranks from here on
    pr = buf._prios
    slots = np.arange(pr.num_slots)
    m = pr.sum_tree.get(slots)
    drawn = np.concatenate([buf.sample(64).ids for _ in range(400)])
    env, t, _ = buf._index.split_ids(buf.sampleable_ids())
    sl = buf._index.slots(env, t)
    counts = np.array([(drawn == i).sum() for i in buf.sampleable_ids().tolist()])
    p = m[sl] / m[sl].sum()
    assert chisquare(counts, counts.sum() * p).pvalue > 1e-3
    b = buf.sample(64)
    env, t, _ = buf._index.split_ids(b.ids)
    np.testing.assert_allclose(b.probabilities, m[buf._index.slots(env, t)] / m.sum())


def test_stratified_draws_cover_the_strata() -> None:
    buf = make(128, alpha=1.0, eps=0.0, seed=2)
    ids = feed(buf, 100, every=25)
    rng = np.random.default_rng(0)
    buf.update_priorities(ids, rng.uniform(0.0, 2.0, 100))
    pr = buf._prios
    m = pr.sum_tree.get(np.arange(pr.num_slots))
    hi = np.cumsum(m)
    lo = hi - m
    total = pr.sum_tree.total
    for B in (1, 7, 32, 100):
        b = buf.sample(B)
        env, t, _ = buf._index.split_ids(b.ids)
        s = buf._index.slots(env, t)
        # Draw i lands in stratum [i, i+1) * total / B: its leaf's mass interval meets it.
        i = np.arange(B)
        assert (lo[s] <= (i + 1) * total / B + 1e-9).all()
        assert (hi[s] >= i * total / B - 1e-9).all()
    # Equal masses and B = N: one draw per transition.
    flat = make(128, alpha=1.0, seed=3)
    ids = feed(flat, 64, every=64)
    assert sorted(flat.sample(64).ids.tolist()) == ids.tolist()


@pytest.mark.parametrize("sort_interval", [None, 1, 5, 40])
def test_rank_staleness_is_bounded_by_changes_since_resort(sort_interval: int | None) -> None:
    buf = make(60, variant="rank_based", sort_interval=sort_interval, seed=6, num_envs=3)
    rng = np.random.default_rng(8)
    pr = buf._prios
    for step in range(60):
        feed_all(buf, int(rng.integers(0, 3)), every=4)
        if buf.num_sampleable:
            b = buf.sample(8)
            assert pr.changes < (sort_interval or max(1, pr.snapshot_size // 100))
            buf.update_priorities(b.ids, np.round(rng.uniform(0, 3, 8), 1))
        ids = buf.sampleable_ids()
        if not ids.size:
            continue
        p = buf.get_priorities(ids)
        env, t, _ = buf._index.split_ids(ids)
        used = pr.rank[buf._index.slots(env, t)]
        exact = 1 + (p[None, :] > p[:, None]).sum(1)
        positive = p > 0
        assert (np.abs(used - exact)[positive] <= pr.changes).all(), step
        if sort_interval == 1 and step % 5 == 0:
            check_trees(buf)


def test_tree_drift_after_a_million_updates() -> None:
    buf = make(1000, alpha=0.6, eps=0.0, seed=1, num_envs=2)
    feed_all(buf, 500, every=50)
    ids = buf.sampleable_ids()
    rng = np.random.default_rng(12)
    for _ in range(1000):  # 10**6 priority updates, 1000 per call, many duplicates
        pick = ids[rng.integers(0, ids.size, 1000)]
        buf.update_priorities(pick, rng.exponential(1.0, 1000) * 10.0 ** rng.integers(-6, 6))
    pr = buf._prios
    leaves = pr.sum_tree.get(np.arange(pr.num_slots))
    exact = math.fsum(leaves.tolist())
    assert abs(pr.sum_tree.total - exact) <= 1e-9 * exact
    check_trees(buf)


@pytest.mark.parametrize(
    ("capacity", "num_envs"), [(7, 1), (9, 3), (1000, 1), (1023, 3), (1025, 5)]
)
@pytest.mark.parametrize("variant", ["proportional", "rank_based"])
def test_non_power_of_two_capacities(capacity: int, num_envs: int, variant: str) -> None:
    buf = make(capacity, variant=variant, num_envs=num_envs, seed=9, n_step=2)
    rng = np.random.default_rng(capacity)
    steps = 3 * capacity // num_envs + 5  # wrap around every ring a few times
    for start in range(0, steps, 50):
        feed_all(buf, min(50, steps - start), every=7)
        b = buf.sample(32)
        assert set(b.ids.tolist()) <= set(buf.sampleable_ids().tolist())
        buf.update_priorities(b.ids, rng.uniform(0, 2, 32))
    assert buf._prios.num_slots == num_envs * (capacity // num_envs)
    check_trees(buf)
