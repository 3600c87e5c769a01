"""abandon_episode on the device buffers, against the NumPy core fed the same calls: the same
sampleable ids and transitions, sequences, complete episodes and priorities; draws that never
reach a hole (uniform, recency, without replacement); conversions and checkpoints that keep
the cut; bad env ids refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

import rlreplay as rr
import rlreplay.torch as rrt
from tests.torch_buffer.helpers import (
    Twins,
    assert_bit_identical,
    assert_same_contents,
    host,
    make,
    random_step,
)
from tests.torch_buffer.test_env_ids import SubsetTwins
from tests.torch_buffer.test_prioritized import assert_same_priorities

Array = np.ndarray[Any, Any]

CONFIGS: list[dict[str, Any]] = [
    dict(capacity=16, num_envs=2, n_step=3, finals_per_env=8),
    dict(capacity=18, num_envs=3, n_step=2, frame_stack=3, finals_per_env=6),
    dict(capacity=20, num_envs=2, n_step=3, frame_stack=2, prioritized=True),
    dict(capacity=16, num_envs=2, n_step=2, recent_ratio=0.5, recent_steps=3, finals_per_env=8),
    dict(capacity=24, num_envs=2, n_step=2, frame_stack=3, finals_per_env=2),  # drops episodes
    dict(capacity=20, num_envs=2, n_step=2, prioritized=True, variant="rank_based"),
]


def abandon(tw: Twins, e: int) -> None:
    """Abandon env ``e``'s episode in both buffers: the same id (or none)."""
    ours = tw.buf.abandon_episode(e).cpu().numpy()
    theirs = tw.np_buf.abandon_episode(e)
    np.testing.assert_array_equal(ours, theirs)


def stored_ids(tw: Twins) -> Array:
    first, end = tw.buf.stored_range()
    E = tw.buf.num_envs
    return np.concatenate([np.arange(first[e], end[e]) * E + e for e in range(E)])


def core_episodes(tw: Twins) -> set[int]:
    """First ids of the complete episodes the core holds (its draws' support)."""
    try:
        got = tw.np_buf.sample_episodes(2000)
    except rr.EmptyBufferError:
        return set()
    return set(np.asarray(got["ids"]).tolist())


def assert_same_everything(tw: Twins) -> None:
    """Sampleable ids and transitions, sequences of every stored start, complete episodes and
    (prioritized) priorities: the core's."""
    assert_same_contents(tw)
    ids = stored_ids(tw)
    if ids.size:
        for within in (True, False):
            ours = host(tw.buf.get_sequences(ids, 4, within_episode=within))
            theirs = tw.np_buf.get_sequences(ids, 4, within_episode=within)
            assert_bit_identical(ours, {k: np.asarray(v) for k, v in theirs.items()})
    assert int(tw.buf.num_episodes) == len(core_episodes(tw))
    if tw.buf.config.prioritized:
        assert_same_priorities(tw)


ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.sampled_from([0.0, 0.1, 0.3])),
        st.tuples(st.just("add"), st.sampled_from([0.0, 0.1, 0.3])),
        st.tuples(st.just("add"), st.sampled_from([0.0, 0.1, 0.3])),
        st.tuples(st.just("abandon"), st.integers(0, 2)),
        st.tuples(st.just("sample"), st.just(0)),
        st.tuples(st.just("update"), st.integers(0, 2**16)),
        st.tuples(st.just("clear"), st.just(0)),
    ),
    min_size=1,
    max_size=40,
)


@settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(config=st.sampled_from(range(len(CONFIGS))), script=ops, seed=st.integers(0, 2**16))
def test_random_operations_with_abandons_match_the_core(
    config: int, script: list[tuple[str, Any]], seed: int
) -> None:
    tw = Twins(make("cpu", **CONFIGS[config], seed=seed))
    rng = np.random.default_rng(seed)
    E = tw.buf.num_envs
    for op, arg in script:
        if op == "add":
            tw.add(random_step(rng, E, p_end=float(arg), p_trunc=0.05))
        elif op == "abandon":
            abandon(tw, int(arg) % E)
        elif op == "sample":
            ids = tw.buf.sample(32)["ids"].cpu().numpy()
            if tw.np_buf.num_sampleable:
                assert set(ids.tolist()) <= set(tw.np_buf.sampleable_ids().tolist())
        elif op == "update" and tw.buf.config.prioritized:
            ids = stored_ids(tw)
            if ids.size:
                p = np.random.default_rng(arg).random(ids.size) + 0.1
                ignored = int(tw.buf.update_priorities(ids, p))
                # (stored ids: only those of holes are ignored, by both)
                assert ignored == tw.np_buf.update_priorities(ids, p)  # type: ignore[attr-defined]
        elif op == "clear":
            tw.clear()
        assert_same_everything(tw)


def hole_twins(config: dict[str, Any], seed: int = 0) -> Twins:
    """Twins with abandoned episodes in every env (holes inside the sampleable ranges)."""
    tw = Twins(make("cpu", **config, seed=seed))
    rng = np.random.default_rng(seed)
    E = tw.buf.num_envs
    for i in range(25):
        tw.add(random_step(rng, E, p_end=0.05, p_trunc=0.0))
        if i % 6 == 5:
            abandon(tw, i % E)
    assert tw.buf._ring.holes is not None
    return tw


@pytest.mark.parametrize("replacement", [True, False])
@pytest.mark.parametrize("recent_ratio", [0.0, 0.5])
def test_draws_never_reach_a_hole_and_stay_uniform(recent_ratio: float, replacement: bool) -> None:
    config = dict(capacity=40, num_envs=2, n_step=3, finals_per_env=20)
    tw = hole_twins({**config, "recent_ratio": recent_ratio, "recent_steps": 4,
                     "replacement": replacement})  # fmt: skip
    assert_same_contents(tw)
    support = tw.np_buf.sampleable_ids()
    drawn = np.concatenate([tw.buf.sample(16)["ids"].cpu().numpy() for _ in range(400)])
    assert set(drawn.tolist()) <= set(support.tolist())
    if recent_ratio == 0.0:
        counts = np.array([(drawn == i).sum() for i in support])
        assert stats.chisquare(counts).pvalue > 1e-4
    else:  # the recent half: each env's 4 newest sampleable ids (the core's set)
        recent = np.concatenate([tw.buf.sample(16)["ids"].cpu().numpy()[:8] for _ in range(200)])
        want = set()
        E = tw.buf.num_envs
        for e in range(E):
            mine = support[support % E == e]
            want |= set(mine[-4:].tolist())
        assert set(recent.tolist()) == want


def test_hole_ids_get_no_mass_and_are_ignored_by_updates() -> None:
    tw = Twins(make("cpu", capacity=20, num_envs=1, n_step=3, prioritized=True))
    rng = np.random.default_rng(0)
    for _ in range(6):
        tw.add(random_step(rng, 1, p_end=0.0, p_trunc=0.0))
    abandon(tw, 0)  # steps 3, 4, 5: the hole; 0, 1, 2 stay
    tw.add(random_step(rng, 1, p_end=0.0, p_trunc=0.0))
    for _ in range(4):
        tw.add(random_step(rng, 1, p_end=0.0, p_trunc=0.0))
    assert tw.buf.sampleable_ids().tolist() == [0, 1, 2, 6, 7]
    ids = np.arange(10)
    assert int(tw.buf.update_priorities(ids, np.full(10, 5.0))) == 3  # the hole's
    assert tw.np_buf.update_priorities(ids, np.full(10, 5.0)) == 3  # type: ignore[attr-defined]
    assert_same_priorities(tw)
    mass = tw.buf._prio.sums.get(torch.arange(10))  # type: ignore[union-attr]
    assert (mass[3:6] == 0).all() and (mass[:3] > 0).all()
    assert not tw.buf.sampleable(torch.tensor([3, 4, 5])).any()


def test_a_compiled_sampler_with_holes_samples_eagerly() -> None:
    tw = hole_twins(dict(capacity=40, num_envs=2, n_step=2, finals_per_env=20))
    sample = rrt.compiled_sampler(tw.buf, 8)
    support = set(tw.np_buf.sampleable_ids().tolist())
    for _ in range(20):
        assert set(sample()["ids"].tolist()) <= support


@pytest.mark.parametrize("prioritized", [False, True])
def test_conversions_and_checkpoints_keep_the_cut(tmp_path: Path, prioritized: bool) -> None:
    config = dict(capacity=24, num_envs=2, n_step=2, frame_stack=2, prioritized=prioritized)
    tw = hole_twins(config, seed=3)
    np_buf = tw.buf.to_replay_buffer()
    np.testing.assert_array_equal(np_buf.sampleable_ids(), tw.np_buf.sampleable_ids())
    back = rrt.from_replay_buffer(tw.np_buf)
    tw.buf.save(tmp_path / "cut.rr")
    loaded = rrt.load(tmp_path / "cut.rr")
    for other in (back, loaded):
        np.testing.assert_array_equal(other.sampleable_ids().numpy(), tw.np_buf.sampleable_ids())
        assert other._ring.holes is not None
    # The next steps go on as in the core (a new episode after each cut).
    rng = np.random.default_rng(9)
    tw.buf = back
    for _ in range(5):
        tw.add(random_step(rng, 2, p_end=0.1))
    assert_same_everything(tw)


def test_abandon_returns_nothing_when_no_episode_runs() -> None:
    tw = Twins(make("cpu", capacity=16, num_envs=2, n_step=2))
    abandon(tw, 0)  # no step yet
    step = random_step(np.random.default_rng(0), 2, p_end=0.0, p_trunc=0.0)
    step["terminated"] = np.array([True, False])
    tw.add(step)
    abandon(tw, 0)  # ended: nothing runs
    abandon(tw, 1)
    abandon(tw, 1)  # already abandoned
    tw.clear()
    tw.add(random_step(np.random.default_rng(1), 2, p_end=0.0, p_trunc=0.0))
    abandon(tw, 0)  # its step is stored after the clear
    assert_same_everything(tw)


@pytest.mark.parametrize("bad", [2, -1, 1.0, True, "0", [0]])
def test_bad_env_ids_are_refused_and_change_nothing(bad: Any) -> None:
    buf = make("cpu", capacity=16, num_envs=2)
    buf.add(**{k: torch.from_numpy(v) for k, v in random_step(np.random.default_rng(0), 2,
                                                                p_end=0.0).items()})  # fmt: skip
    before = buf.to_replay_buffer().state_dict()["arrays"]["index/env"]
    with pytest.raises(rr.InvalidIdError, match="env_id"):
        buf.abandon_episode(bad)
    after = buf.to_replay_buffer().state_dict()["arrays"]["index/env"]
    np.testing.assert_array_equal(before, after)


@settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(
    config=st.sampled_from(range(len(CONFIGS))),
    script=st.lists(
        st.tuples(st.sampled_from(["add", "add", "abandon"]), st.integers(0, 2**16)),
        min_size=1,
        max_size=40,
    ),
    kind=st.sampled_from(["numpy", "tensor"]),
)
def test_abandons_with_env_subsets_match_the_core(
    config: int, script: list[tuple[str, int]], kind: str
) -> None:
    """Envs counted per env (host or device ``env_ids``): the same cuts as the core's."""
    tw = SubsetTwins(make("cpu", **CONFIGS[config]))
    E = tw.buf.num_envs
    for op, arg in script:
        rng = np.random.default_rng(arg)
        if op == "add":
            envs = np.sort(rng.permutation(E)[: rng.integers(1, E + 1)])
            tw.add(random_step(rng, E, p_end=0.2), envs, kind)
        else:
            e = arg % E
            ours = tw.buf.abandon_episode(e).cpu().numpy()
            np.testing.assert_array_equal(ours, tw.np_buf.abandon_episode(e))
        assert_same_contents(tw)  # type: ignore[arg-type]
        if tw.buf.config.prioritized:
            assert_same_priorities(tw)  # type: ignore[arg-type]
