"""The prioritized device buffer follows the core's proportional law: the same priorities and
tree leaves for the same stream and updates (bit for bit), draw frequencies proportional to
``p ** alpha`` over the sampleable transitions (chi-square), probabilities and importance
weights by the core's formula, and the core's update rules (stale ids, duplicates, clipping,
eps, the largest priority, the beta schedule)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from scipy import stats

import rlreplay as rr
from tests.torch_buffer.helpers import Twins, assert_same_contents, make, random_step

Array = np.ndarray[Any, Any]

PER: dict[str, Any] = dict(capacity=24, num_envs=2, n_step=2, frame_stack=2, prioritized=True)


def assert_same_priorities(tw: Twins) -> None:
    """The same per-slot priorities, sum-tree leaves and min-tree root as the core's."""
    tw.np_buf.sampleable_ids()  # (the core settles its last write before a read)
    core = tw.np_buf._sampler.raw  # type: ignore[attr-defined]
    pri = tw.buf._prio
    assert pri is not None
    # Priorities of stored steps (a cleared or overwritten slot's is never read again, and a
    # checkpoint keeps only the stored ones).
    C, E = tw.buf.env_capacity, tw.buf.num_envs
    head = tw.buf._ring.head.cpu().numpy()
    rows = np.concatenate([e * C + np.arange(head[e], tw.count) % C for e in range(E)])
    np.testing.assert_array_equal(pri.prio.cpu().numpy()[rows], core.prio[rows])
    ours = pri.sums.state_dict()["leaves"]
    assert ours.tobytes() == core.sum_tree.state_dict()["leaves"].tobytes()
    assert float(pri.sums.total) == float(core.sum_tree.total)
    assert float(pri.mins.min) == float(core.min_tree.min)
    assert float(pri.max_priority) == tw.np_buf.max_priority  # type: ignore[attr-defined]


def updated_twins(device: str, seed: int, steps: int = 40, **kwargs: Any) -> Twins:
    """Twins fed ``steps`` steps, with priorities updated on the way (the same host values
    given to both)."""
    tw = Twins(make(device, **{**PER, **kwargs}))
    rng = np.random.default_rng(seed)
    for i in range(steps):
        tw.add(random_step(rng, tw.buf.num_envs, p_end=0.2))
        if i % 4 == 3:
            ids = tw.np_buf.sampleable_ids()
            ids = rng.choice(ids, size=min(5, ids.shape[0]))  # duplicates: the last wins
            values = rng.uniform(0.0, 3.0, ids.shape[0])
            stale_core = tw.np_buf.update_priorities(ids, values)  # type: ignore[attr-defined]
            stale = tw.buf.update_priorities(ids, values)  # type: ignore[attr-defined]
            assert int(stale) == stale_core
        if i % 5 == 4:
            assert_same_priorities(tw)
            assert_same_contents(tw)
    return tw


@pytest.mark.parametrize("finals_per_env", [None, 2])
def test_priorities_and_trees_match_the_core(device: str, finals_per_env: int | None) -> None:
    """Also with few final records: dropped episodes leave the trees as dequeue leaves the
    core's (``finals_per_env=2`` recomputes every leaf at each add)."""
    tw = updated_twins(device, 1, finals_per_env=finals_per_env, priority_clip=(0.1, 2.0))
    if finals_per_env is not None:
        assert tw.dropped > 0
    ids = tw.np_buf.sampleable_ids()
    got = tw.buf.get_priorities(ids).cpu().numpy()  # type: ignore[attr-defined]
    np.testing.assert_array_equal(got, tw.np_buf.get_priorities(ids))  # type: ignore[attr-defined]
    tw.clear()
    assert_same_priorities(tw)
    assert not bool(tw.buf.can_sample())


@pytest.mark.parametrize("stratified", [False, True])
def test_draws_follow_the_priorities(device: str, stratified: bool) -> None:
    tw = updated_twins(device, 2, steps=30, stratified=stratified, alpha=0.7, beta=0.5)
    buf = tw.buf
    ids = tw.np_buf.sampleable_ids()
    prio = tw.np_buf.get_priorities(ids)  # type: ignore[attr-defined]
    mass = np.where(prio > 0, prio**0.7, 0.0)
    P = mass / mass.sum()
    drawn = []
    for _ in range(150):
        b = buf.sample(32)
        got = {k: v.cpu().numpy() for k, v in b.items()}
        drawn.append(got["ids"])
        pos = np.searchsorted(np.sort(ids), got["ids"])
        want_p = P[np.argsort(ids)][pos]
        np.testing.assert_allclose(got["probabilities"], want_p, rtol=1e-12)
        want_w = (P[P > 0].min() / want_p) ** 0.5
        np.testing.assert_allclose(got["weights"], want_w.astype(np.float32), rtol=1e-6)
        assert got["weights"].dtype == np.float32 and got["probabilities"].dtype == np.float64
    all_ids = np.concatenate(drawn)
    counts = np.array([(all_ids == i).sum() for i in ids])
    assert counts.sum() == all_ids.size  # only sampleable ids
    test = stats.chisquare(counts, P * all_ids.size)
    assert test.pvalue > 1e-3, test
    assert buf.beta_step == 150  # type: ignore[attr-defined]


def test_update_rules(device: str) -> None:
    buf = make(device, capacity=8, num_envs=1, prioritized=True, eps=0.5, beta=0.4,
               beta_final=1.0, beta_steps=4, initial_priority=2.0)  # fmt: skip
    rng = np.random.default_rng(0)
    for _ in range(6):
        buf.add(**random_step(rng, 1, p_end=0.0, p_trunc=0.0))
    pri = buf._prio
    assert pri is not None
    assert buf.get_priorities([0, 5]).tolist() == [2.0, 2.0]  # type: ignore[attr-defined]
    # Duplicates: the last wins; only what took effect counts towards the largest priority.
    buf.update_priorities([1, 1, 2], [9.0, 1.0, 3.0])  # type: ignore[attr-defined]
    assert buf.get_priorities([1, 2]).tolist() == [1.5, 3.5]  # type: ignore[attr-defined]
    assert float(buf.max_priority) == 3.5  # type: ignore[attr-defined]
    # New transitions get max(initial_priority, largest applied).
    buf.add(**random_step(rng, 1, p_end=0.0, p_trunc=0.0))
    assert buf.get_priorities([6]).tolist() == [3.5]  # type: ignore[attr-defined]
    # Host values are checked as the core checks them, and nothing changes.
    with pytest.raises(rr.PriorityError):
        buf.update_priorities([1], [float("nan")])  # type: ignore[attr-defined]
    with pytest.raises(rr.PriorityError):
        buf.update_priorities([1], [-1.0])  # type: ignore[attr-defined]
    with pytest.raises(rr.InvalidIdError):
        buf.update_priorities([100], [1.0])  # type: ignore[attr-defined]
    with pytest.raises(rr.ShapeError):
        buf.update_priorities([1, 2], [1.0])  # type: ignore[attr-defined]
    assert buf.get_priorities([1]).tolist() == [1.5]  # type: ignore[attr-defined]
    # Tensor values cannot be checked without waiting: bad ones and unknown ids are ignored.
    ids = torch.tensor([1, 2, 100, -3], device=device)
    values = torch.tensor([float("nan"), -1.0, 1.0, 1.0], dtype=torch.float64, device=device)
    assert int(buf.update_priorities(ids, values)) == 4  # type: ignore[attr-defined]
    assert buf.get_priorities([1, 2]).tolist() == [1.5, 3.5]  # type: ignore[attr-defined]
    # Overwritten ids are ignored (steps 0 .. 7 written, capacity 8: add two more).
    for _ in range(3):
        buf.add(**random_step(rng, 1, p_end=0.0, p_trunc=0.0))
    assert int(buf.update_priorities([0, 1, 5], [7.0, 7.0, 7.0])) == 2  # type: ignore[attr-defined]
    assert buf.get_priorities([5]).tolist() == [7.5]  # type: ignore[attr-defined]
    # beta moves once per sample along its schedule.
    betas = []
    for _ in range(6):
        betas.append(buf.beta)  # type: ignore[attr-defined]
        buf.sample(4)
    np.testing.assert_allclose(betas, [0.4, 0.55, 0.7, 0.85, 1.0, 1.0])
    # An explicit beta does not move the schedule.
    buf.sample(4, beta=0.0)  # type: ignore[call-arg]
    assert buf.beta_step == 6  # type: ignore[attr-defined]


def test_empty_prioritized_buffer_gives_weight_zero(device: str) -> None:
    buf = make(device, capacity=8, prioritized=True)
    b = buf.sample(4)
    assert b["weights"].tolist() == [0.0] * 4 and b["probabilities"].tolist() == [0.0] * 4
    with pytest.raises(rr.ConfigError, match="variant"):
        make(device, capacity=8, prioritized=True, variant="inverse")
