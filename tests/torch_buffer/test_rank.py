"""Rank-based priorities of the device buffer: the core's ``variant="rank_based"`` law with
exact ranks at every draw (its ``sort_interval=1``). Draw frequencies follow ``rank ** -alpha``
(chi-square, with tied priorities), probabilities and weights match a slow NumPy reference and
the core's rank-based buffer for the same ids and priorities (transitions and sequence
starts), no call waits for the device, conversions keep the law, and unknown variants are
refused."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from scipy import stats

import rlreplay as rr
import rlreplay.torch as rrt
from tests.torch_buffer.helpers import Twins, make, on, random_step
from tests.torch_device.helpers import no_host_sync

Array = np.ndarray[Any, Any]

RANK: dict[str, Any] = dict(
    capacity=24, num_envs=2, n_step=2, frame_stack=2, prioritized=True, variant="rank_based",
    eps=0.0, alpha=0.7, beta=0.5,
)  # fmt: skip


def reference(ids: Array, prio: Array, alpha: float, beta: float) -> tuple[Array, Array]:
    """``(P, weights)`` over sampleable ``ids`` of priorities ``prio``, slowly: competition
    ranks ``1 + #{drawable priorities > p}`` among the drawable (priority > 0) ones."""
    drawable = prio > 0
    rank = np.array([1 + int((prio[drawable] > p).sum()) for p in prio])
    mass = np.where(drawable, rank.astype(np.float64) ** -alpha, 0.0)
    P = mass / mass.sum()
    safe = np.where(drawable, mass, 1.0)
    w = np.where(drawable, (mass[drawable].min() / safe) ** beta, 0.0)
    return P, w


def twins(device: str, seed: int = 0, steps: int = 30, **kwargs: Any) -> Twins:
    """A rank-based device buffer and its core twin (``sort_interval=1``) fed the same steps,
    then given the same priorities: ties (three levels) and some zeros."""
    tw = Twins(make(device, **{**RANK, **kwargs}))
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        tw.add(random_step(rng, tw.buf.num_envs, p_end=0.2))
    ids = tw.np_buf.sampleable_ids()
    values = rng.choice([0.0, 0.5, 1.5, 4.0], size=ids.shape[0], p=[0.15, 0.35, 0.3, 0.2])
    values[:3] = [0.5, 0.5, 0.0]  # at least one tie and one zero
    assert int(tw.buf.update_priorities(ids, values)) == 0  # type: ignore[attr-defined]
    assert tw.np_buf.update_priorities(ids, values) == 0  # type: ignore[attr-defined]
    return tw


def drawn(buf: rrt.DeviceReplayBuffer, n: int, batch: int) -> dict[str, Array]:
    rows = [buf.sample(batch) for _ in range(n)]
    return {k: np.concatenate([r[k].cpu().numpy() for r in rows]) for k in rows[0]}


@pytest.mark.parametrize("stratified", [False, True])
def test_draws_follow_the_exact_rank_law(device: str, stratified: bool) -> None:
    tw = twins(device, 1, stratified=stratified)
    ids = tw.np_buf.sampleable_ids()
    prio = tw.np_buf.get_priorities(ids)  # type: ignore[attr-defined]
    P, w = reference(ids, prio, 0.7, 0.5)
    got = drawn(tw.buf, 40, 256)
    pos = {int(i): k for k, i in enumerate(ids)}
    at = np.array([pos[int(i)] for i in got["ids"]])
    np.testing.assert_allclose(got["probabilities"], P[at], rtol=1e-12)
    np.testing.assert_allclose(got["weights"], w[at].astype(np.float32), rtol=1e-6)
    assert got["weights"].dtype == np.float32 and got["probabilities"].dtype == np.float64
    counts = np.bincount(at, minlength=ids.shape[0])
    assert (counts[P == 0] == 0).all()  # priority 0: never drawn
    test = stats.chisquare(counts[P > 0], P[P > 0] * at.shape[0])
    assert test.pvalue > 1e-3, test


def test_probabilities_match_the_core(device: str) -> None:
    """The core's rank-based buffer (``sort_interval=1``) given the same stream and priorities
    reports the same ``probabilities`` and ``weights`` for the same ids, in sample and in
    prioritized sample_sequences (starts renormalised among whole runs)."""
    tw = twins(device, 2)
    assert tw.np_buf.sort_interval == 1  # type: ignore[attr-defined]
    ours = drawn(tw.buf, 4, 512)
    theirs = tw.np_buf.sample(2048)
    table = dict(zip(ours["ids"].tolist(), ours["probabilities"].tolist(), strict=True))
    weights = dict(zip(ours["ids"].tolist(), ours["weights"].tolist(), strict=True))
    assert set(table) == set(np.asarray(theirs["ids"]).tolist())
    for i, p, wt in zip(theirs["ids"], theirs["probabilities"], theirs["weights"], strict=True):
        assert table[int(i)] == pytest.approx(float(p), rel=1e-12)
        assert weights[int(i)] == pytest.approx(float(wt), rel=1e-6)
    mass = tw.np_buf.priority_mass()  # type: ignore[attr-defined]
    pri = tw.buf._prio
    assert pri is not None
    assert float(pri.rank_masses().sum()) == pytest.approx(mass.total, rel=1e-12)
    for pad in (True, False):
        seq = tw.buf.sample_sequences(512, 3, pad=pad)
        core = tw.np_buf.sample_sequences(512, 3, pad=pad)
        ours_p = dict(zip(seq["ids"].tolist(), seq["probabilities"].tolist(), strict=True))
        both = [k for k, i in enumerate(np.asarray(core["ids"])) if int(i) in ours_p]
        assert len(both) > 256
        for k in both:
            want = float(np.asarray(core["probabilities"])[k])
            assert ours_p[int(core["ids"][k])] == pytest.approx(want, rel=1e-12)


def test_ties_alpha_zero_and_nothing_drawable(device: str) -> None:
    """All-equal priorities (and ``alpha=0``) draw uniformly; a buffer whose priorities are
    all 0 draws with probability and weight 0."""
    buf = make(device, **{**RANK, "alpha": 1.0})
    rng = np.random.default_rng(3)
    for _ in range(8):
        buf.add(**on(random_step(rng, 2, p_end=0.0, p_trunc=0.0), device))
    n = int(buf.num_sampleable)
    b = buf.sample(64)
    np.testing.assert_allclose(b["probabilities"].cpu().numpy(), 1.0 / n, rtol=1e-12)
    assert (b["weights"] == 1.0).all()
    ids = buf.sampleable_ids()
    buf.update_priorities(ids, torch.zeros(ids.shape, dtype=torch.float64, device=device))  # type: ignore[attr-defined]
    assert not bool(buf.can_sample())
    b = buf.sample(8)
    assert b["probabilities"].tolist() == [0.0] * 8 and b["weights"].tolist() == [0.0] * 8


def test_rank_based_calls_never_wait_for_the_device(device: str) -> None:
    """(test_no_sync covers add, sample, update_priorities, clear; here sample_sequences.)"""
    tw = twins(device, 4)
    with no_host_sync(device) as counter:
        for pad in (True, False):
            tw.buf.sample_sequences(8, 3, pad=pad)
        tw.buf.sample(8)
    assert dict(counter.calls) == {}


def test_round_trip_through_the_core(device: str) -> None:
    tw = twins(device, 5)
    np_buf = rrt.to_replay_buffer(tw.buf, seed=0)
    assert isinstance(np_buf, rr.PrioritizedReplayBuffer)
    assert np_buf.variant == "rank_based" and np_buf.sort_interval == 1
    ids = tw.np_buf.sampleable_ids()
    np.testing.assert_array_equal(np_buf.sampleable_ids(), ids)
    np.testing.assert_array_equal(
        np_buf.get_priorities(ids),
        tw.np_buf.get_priorities(ids),  # type: ignore[attr-defined]
    )
    assert np_buf.priority_mass() == tw.np_buf.priority_mass()  # type: ignore[attr-defined]
    # And back, also from a core buffer with another sort_interval (ranks become exact).
    back = rrt.from_replay_buffer(np_buf, device=device, seed=0)
    assert isinstance(back, rrt.DevicePrioritizedReplayBuffer) and back.variant == "rank_based"
    a, b = tw.buf.sample(32), back.sample(32)  # same seed, same state: the same draws
    for k in ("ids", "probabilities", "weights"):
        assert torch.equal(a[k], b[k]), k
    lazy = rr.PrioritizedReplayBuffer(16, {"obs": rr.Field((), np.float32)},
                                      variant="rank_based", sort_interval=5)  # fmt: skip
    assert rrt.from_replay_buffer(lazy, device=device).config.rank_based


def test_other_variants_are_refused(device: str) -> None:
    with pytest.raises(rr.ConfigError, match="variant"):
        make(device, capacity=8, prioritized=True, variant="inverse")
    with pytest.raises(rr.ConfigError, match="sort_interval"):
        make(device, capacity=8, prioritized=True, variant="rank_based", sort_interval=3)
    with pytest.raises(rr.ConfigError, match="sort_interval"):
        make(device, capacity=8, prioritized=True, sort_interval=1)  # proportional
