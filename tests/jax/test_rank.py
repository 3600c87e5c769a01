"""Rank-based draws follow the core's exact rank law (``variant="rank_based"``,
``sort_interval=1``): ``rank = 1 + #{drawable priorities > p}`` with ties sharing a rank, mass
``rank ** -alpha``, priority 0 never drawn, weights normalised by the smallest mass; the
probabilities match the core's for the same stream and updates, and draw frequencies match
them (chi-square)."""

from __future__ import annotations

from typing import Any

import pytest

jax = pytest.importorskip("jax")
stats = pytest.importorskip("scipy.stats")

import numpy as np  # noqa: E402

import rlreplay as rr  # noqa: E402
import rlreplay.jax as rrj  # noqa: E402
from tests.jax.helpers import (  # noqa: E402
    Twins,
    jax_buffer,
    jax_sampleable_ids,
    random_step,
    update_padded,
)
from tests.jax.test_prioritized import core_priorities, many_draws  # noqa: E402

Array = np.ndarray[Any, Any]

RANK = dict(
    capacity=40, num_envs=2, n_step=2, prioritized=True, finals_per_env=20, eps=0.0,
    variant="rank_based", alpha=0.7,
)  # fmt: skip


def rank_law(prios: Array, alpha: float) -> Array:
    """The exact law from its definition (priorities of the sampleable ids, in order)."""
    drawable = prios > 0
    larger = (prios[None, :] > prios[:, None]) & drawable[None, :]
    mass = np.where(drawable, (1.0 + larger.sum(axis=1)) ** -alpha, 0.0)
    out: Array = mass / mass.sum()
    return out


def test_rank_draws_follow_the_core_law() -> None:
    buf = jax_buffer(**RANK)
    assert buf.config.rank_based
    rng = np.random.default_rng(0)
    tw = Twins(buf)
    for _ in range(45):
        tw.add(random_step(rng, 2, p_end=0.15))
    live = jax_sampleable_ids(buf, tw.state)
    # Ties (equal priorities share a rank), zeros (never drawn), exact float32 values.
    prios = rng.choice([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 8.0], size=live.shape[0])
    tw.state = update_padded(buf, tw.state, live, prios)
    tw.np_buf.update_priorities(live, prios)
    p = rank_law(prios, buf.config.alpha)
    assert_core_law(tw.np_buf, live, p)
    ids, probs, weights = (np.asarray(a) for a in many_draws(buf, 300, 64)(
        tw.state, jax.random.key(1)))  # fmt: skip
    counts = np.array([(ids == i).sum() for i in live])
    assert counts.sum() == ids.size
    assert counts[prios == 0].sum() == 0
    keep = p > 0
    chi = stats.chisquare(counts[keep], p[keep] * ids.size)
    assert chi.pvalue > 1e-3, chi
    pos = np.searchsorted(live, ids)
    np.testing.assert_allclose(probs, p[pos], rtol=1e-5)
    np.testing.assert_allclose(weights, (p[keep].min() / p[pos]) ** buf.config.beta, rtol=1e-5)
    # New transitions join at the largest priority applied (8.0): ranks move for all.
    for _ in range(3):
        tw.add(random_step(rng, 2, p_end=0.0, p_trunc=0.0))
    live = jax_sampleable_ids(buf, tw.state)
    p = rank_law(core_priorities(tw.np_buf, live), buf.config.alpha)
    assert_core_law(tw.np_buf, live, p)
    assert_jax_law(buf, tw.state, live, p)


def assert_jax_law(buf: rrj.JaxBuffer, state: rrj.BufferState, live: Array, p: Array) -> None:
    """The JAX buffer's draws report the law ``p`` over ``live``."""
    ids, probs, _ = many_draws(buf, 300, 64)(state, jax.random.key(2))
    pos = np.searchsorted(live, np.asarray(ids))
    np.testing.assert_allclose(np.asarray(probs), p[pos], rtol=1e-5)


def assert_core_law(np_buf: rr.ReplayBuffer, live: Array, p: Array) -> None:
    """The core's draws report the law ``p`` over ``live`` (sorted ids)."""
    core = np_buf.sample(64)
    pos = np.searchsorted(live, core["ids"])
    np.testing.assert_allclose(core["probabilities"], p[pos], rtol=1e-12)


def test_rank_buffers_convert_with_their_law() -> None:
    buf = jax_buffer(**RANK)
    rng = np.random.default_rng(3)
    state = buf.init()
    for _ in range(20):
        state = buf.add(state, random_step(rng, 2, p_end=0.2))
    live = jax_sampleable_ids(buf, state)
    prios = rng.choice([0.5, 1.0, 4.0], size=live.shape[0])
    state = update_padded(buf, state, live, prios)
    np_buf = rrj.to_replay_buffer(buf, state, seed=0)
    assert isinstance(np_buf, rr.PrioritizedReplayBuffer)
    p = rank_law(prios, buf.config.alpha)
    assert_core_law(np_buf, live, p)
    back, state2 = rrj.from_replay_buffer(np_buf, finals_per_env=20)
    assert back is buf
    assert_jax_law(buf, state2, live, p)
