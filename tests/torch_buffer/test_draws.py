"""Uniform draws, the recency mix and draws without replacement follow the NumPy core's laws
(chi-square tests of draw frequencies), from the buffer's device generator."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from scipy import stats

import rlreplay as rr
import rlreplay.torch as rrt
from rlreplay.torch.draws import recent_count
from tests.torch_buffer.helpers import FIELDS, Twins, make, random_step

Array = np.ndarray[Any, Any]

RECENT = dict(capacity=16, num_envs=2, n_step=3, finals_per_env=8)


def filled(device: str, seed: int, steps: int = 25, **kwargs: Any) -> Twins:
    tw = Twins(make(device, **{**RECENT, **kwargs}))
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        tw.add(random_step(rng, 2, p_end=0.1))
    return tw


def recent_set(np_buf: rr.ReplayBuffer, recent_steps: int) -> Array:
    """The ``recent_steps`` newest sampleable ids of each env, from the core's ids."""
    ids = np.sort(np_buf.sampleable_ids())
    E = np_buf.num_envs
    out = [ids[ids % E == e][-recent_steps:] for e in range(E)]
    return np.sort(np.concatenate(out))


def draw_ids(buf: rrt.DeviceReplayBuffer, n: int, batch: int, **kwargs: Any) -> Array:
    return np.stack([buf.sample(batch, **kwargs)["ids"].cpu().numpy() for _ in range(n)])


def test_uniform_draws_are_uniform_over_the_sampleable_ids(device: str) -> None:
    tw = filled(device, 1, steps=30)
    everything = np.sort(tw.np_buf.sampleable_ids())
    ids = draw_ids(tw.buf, 200, 32)
    counts = np.array([(ids == i).sum() for i in everything])
    assert counts.sum() == ids.size  # only sampleable ids
    assert stats.chisquare(counts).pvalue > 1e-3


@pytest.mark.parametrize(("ratio", "steps"), [(0.25, 3), (1.0, 50)])
def test_recent_draws_follow_the_core_law(device: str, ratio: float, steps: int) -> None:
    tw = filled(device, 3)
    batch = 16
    k = recent_count(ratio, batch)
    ids = draw_ids(tw.buf, 300, batch, recent_ratio=ratio, recent_steps=steps)
    everything = np.sort(tw.np_buf.sampleable_ids())
    recent = recent_set(tw.np_buf, steps)
    for part, allowed in ((ids[:, :k], recent), (ids[:, k:], everything)):
        if part.size == 0:  # recent_ratio=1: the whole batch is recent
            continue
        counts = np.array([(part == i).sum() for i in allowed])
        assert counts.sum() == part.size  # only allowed ids
        assert stats.chisquare(counts).pvalue > 1e-3
    # The core draws its recent part from the same set.
    core = np.concatenate(
        [tw.np_buf.sample(batch, recent_ratio=ratio, recent_steps=steps)["ids"][:k]
         for _ in range(30)]
    )  # fmt: skip
    assert set(core.tolist()) <= set(recent.tolist())


def test_the_buffer_s_own_recency_options_apply(device: str) -> None:
    tw = filled(device, 4, recent_ratio=0.5, recent_steps=1)
    ids = draw_ids(tw.buf, 20, 8)
    assert np.isin(ids[:, :4], recent_set(tw.np_buf, 1)).all()


def test_draws_without_replacement_follow_the_core_law(device: str) -> None:
    """No duplicates in a batch while enough are sampleable, recent draws first; per-id
    frequencies match the core's (two-sample chi-square); a batch larger than the sampleable
    set is drawn with replacement, as in the core."""
    tw = filled(device, 6)
    everything = np.sort(tw.np_buf.sampleable_ids())
    recent = recent_set(tw.np_buf, 2)
    batch, ratio = 6, 0.5
    k = recent_count(ratio, batch)
    opts: dict[str, Any] = dict(recent_ratio=ratio, recent_steps=2, replacement=False)
    ids = draw_ids(tw.buf, 600, batch, **opts)
    assert all(len(set(row.tolist())) == batch for row in ids)
    assert np.isin(ids[:, :k], recent).all()
    core = np.stack([tw.np_buf.sample(batch, **opts)["ids"] for _ in range(600)])
    for part in (slice(0, k), slice(k, batch)):
        table = np.array([[(d[:, part] == i).sum() for i in everything] for d in (ids, core)])
        table = table[:, table.sum(axis=0) > 0]
        assert stats.chi2_contingency(table).pvalue > 1e-3
    # Without recency: distinct, uniform marginals.
    plain = draw_ids(tw.buf, 300, 8, replacement=False)
    assert all(len(set(row.tolist())) == 8 for row in plain)
    counts = np.array([(plain == i).sum() for i in everything])
    assert counts.sum() == plain.size and stats.chisquare(counts).pvalue > 1e-3
    # More recent draws asked than recent transitions: all of them first, then the others.
    n = everything.shape[0]
    whole = tw.buf.sample(n, recent_ratio=0.8, recent_steps=2, replacement=False)
    got = whole["ids"].cpu().numpy()
    assert sorted(got.tolist()) == everything.tolist()
    assert sorted(got[: recent.shape[0]].tolist()) == recent.tolist()
    more = tw.buf.sample(n + 3, replacement=False)["ids"].cpu().numpy()
    assert np.isin(more, everything).all() and len(set(more.tolist())) < n + 3
    huge = tw.buf.sample(tw.buf.capacity + 1, replacement=False)["ids"].cpu().numpy()
    assert np.isin(huge, everything).all()


def test_seeds_repeat_draws_and_options_are_checked(device: str) -> None:
    a, b = filled(device, 2), filled(device, 2)
    assert draw_ids(a.buf, 3, 8).tolist() == draw_ids(b.buf, 3, 8).tolist()
    with pytest.raises(rr.ConfigError, match="recent_ratio"):
        a.buf.sample(8, recent_ratio=2.0)
    with pytest.raises(rr.ConfigError, match="recent_steps"):
        a.buf.sample(8, recent_ratio=0.5, recent_steps=0)
    with pytest.raises(rr.ConfigError, match="replacement"):
        rrt.DeviceReplayBuffer(16, FIELDS, replacement="no")  # type: ignore[arg-type]
    with pytest.raises(rr.ConfigError, match="seed"):
        rrt.DeviceReplayBuffer(16, FIELDS, seed=-1)
    per = make(device, capacity=16, prioritized=True)
    with pytest.raises(rr.ConfigError, match="uniform-only"):
        per.sample(8, recent_ratio=0.5)
