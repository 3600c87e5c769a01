"""ALF front-end: get_batch, uniform and prioritized (the reference of ``test_alf``)."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

import rlreplay as rr
from tests.compat.test_alf import (
    P_CHI,
    Driver,
    leaf,
    prioritized,
    starts_of,
)


# =========================================================================== get_batch (uniform)
def test_get_batch_shapes_order_and_rows() -> None:
    torch.manual_seed(0)
    d = Driver(num_envs=3, max_length=7)
    d.run(10, episode_len=3)
    batch, info = d.rb.get_batch(batch_size=8, batch_length=3)
    assert leaf(batch, "observation.obs").shape == (8, 3, 2)
    assert (
        leaf(batch, "step_type").shape == (8, 3) and leaf(batch, "step_type").dtype == torch.int32
    )
    assert info.env_ids.shape == info.positions.shape == (8,)
    assert info.env_ids.dtype == info.positions.dtype == torch.int64
    assert info.importance_weights == () and info.discounted_return == ()
    assert info.replay_buffer is d.rb
    assert (torch.diff(info.env_ids) >= 0).all(), "envs come ordered"
    for e, p in starts_of(info):
        assert d.head[e] <= p <= len(d.hist[e]) - 3
    d.check_rows(batch, info.env_ids, info.positions, 3)
    assert leaf(batch, "reward").device == torch.get_default_device()


def test_get_batch_rows_equal_core_get_sequences() -> None:
    torch.manual_seed(1)
    d = Driver(num_envs=2, max_length=9)
    d.run(15, episode_len=4)
    batch, info = d.rb.get_batch(6, 4)
    ids = (info.positions * 2 + info.env_ids).numpy()
    seq = d.rb.core.get_sequences(ids, 4, within_episode=False)
    assert seq.mask.all()
    for path, name in d.rb.field_names.items():
        np.testing.assert_array_equal(leaf(batch, path).numpy(), seq[name], err_msg=path)


def test_get_batch_balances_envs_exactly() -> None:
    torch.manual_seed(2)
    d = Driver(num_envs=4, max_length=12)
    d.run(12)
    extra_envs = collections.Counter()
    for _ in range(50):
        _, info = d.rb.get_batch(10, 2)  # 10 = 2 * 4 + 2
        counts = np.bincount(info.env_ids.numpy(), minlength=4)
        assert sorted(counts.tolist()) == [2, 2, 3, 3]
        extra_envs.update(np.flatnonzero(counts == 3).tolist())
    assert set(extra_envs) == {0, 1, 2, 3}  # the extra draws go to random envs


def test_get_batch_without_replacement_has_no_duplicates() -> None:
    torch.manual_seed(3)
    d = Driver(num_envs=2, max_length=6)
    d.run(6)
    for _ in range(20):  # 5 starts per env, 10 draws: every start exactly once
        _, info = d.rb.get_batch(10, 2)
        assert sorted(starts_of(info)) == [(e, p) for e in range(2) for p in range(5)]


def test_get_batch_with_replacement_repeats() -> None:
    torch.manual_seed(4)
    d = Driver(num_envs=1, max_length=6, with_replacement=True)
    d.run(3)
    _, info = d.rb.get_batch(20, 2)  # 2 starts, 20 draws
    assert set(starts_of(info)) == {(0, 0), (0, 1)}


def test_get_batch_uniform_law() -> None:
    torch.manual_seed(5)
    d = Driver(num_envs=2, max_length=8, with_replacement=True)
    d.run(11)  # positions 3..10 stored; starts 3..9 for L = 2
    seen = collections.Counter()
    for _ in range(300):
        _, info = d.rb.get_batch(4, 2)
        seen.update(starts_of(info))
    starts = [(e, p) for e in range(2) for p in range(3, 10)]
    assert set(seen) == set(starts)
    assert chisquare([seen[s] for s in starts]).pvalue > P_CHI


def test_get_batch_needs_data_in_every_env() -> None:
    d = Driver(num_envs=2)
    d.add(envs=[0])
    d.add(envs=[0])
    d.add(envs=[1])
    with pytest.raises(AssertionError, match="Not all environments has enough data"):
        d.rb.get_batch(2, 2)
    d.add(envs=[1])
    d.rb.get_batch(2, 2)


def test_num_earliest_frames_ignored_skips_starts() -> None:
    torch.manual_seed(6)
    d = Driver(num_envs=2, max_length=6, num_earliest_frames_ignored=2, with_replacement=True)
    d.run(4)
    with pytest.raises(AssertionError, match="batch_length \\+ num_earliest_frames_ignored = 5"):
        d.rb.get_batch(2, 3)
    d.run(4)  # 8 steps: positions 2..7 stored, starts from 4 (2 ignored) to 6 (L = 2)
    seen = set()
    for _ in range(40):
        _, info = d.rb.get_batch(4, 2)
        seen.update(starts_of(info))
    assert seen == {(e, p) for e in range(2) for p in (4, 5, 6)}


def test_recent_data_ratio_draws_recent_starts() -> None:
    torch.manual_seed(7)
    d = Driver(num_envs=2, max_length=20, recent_data_ratio=0.5, recent_data_steps=1,
               with_replacement=True)  # fmt: skip
    d.run(20)
    for _ in range(20):
        _, info = d.rb.get_batch(8, 3)
        newest = sum(p == 17 for _, p in starts_of(info))  # the newest start of each env
        assert newest >= 4  # ceil(0.5 * 8) recent draws, balanced over the envs


def test_recent_data_steps_law() -> None:
    torch.manual_seed(8)
    d = Driver(num_envs=2, max_length=30, recent_data_ratio=1.0, recent_data_steps=3,
               with_replacement=True)  # fmt: skip
    d.run(30)
    seen = collections.Counter()
    for _ in range(100):
        _, info = d.rb.get_batch(6, 2)
        seen.update(starts_of(info))
    recent = [(e, p) for e in range(2) for p in (26, 27, 28)]
    assert set(seen) == set(recent)
    assert chisquare([seen[s] for s in recent]).pvalue > P_CHI


def test_torch_manual_seed_makes_batches_repeatable() -> None:
    def run() -> list[tuple[int, int]]:
        torch.manual_seed(42)
        d = Driver(num_envs=2, max_length=10)
        d.run(10)
        return starts_of(d.rb.get_batch(5, 2)[1]) + starts_of(d.rb.get_batch(5, 2)[1])

    assert run() == run()


@pytest.mark.parametrize("ignored", [0, 2])
def test_prioritized_frequencies_follow_priorities_and_weights_are_n_p(ignored: int) -> None:
    torch.manual_seed(9)
    d = prioritized(num_earliest_frames_ignored=ignored)
    d.run(9)  # positions 0..8; starts for L = 3: ignored..6
    every = [(e, p) for e in range(2) for p in range(9)]
    prio = {s: float(1 + (3 * s[0] + s[1]) % 4) for s in every}
    prio[(1, 4)] = 0.0  # never drawn
    for s in every:
        if not ignored <= s[1] <= 6:
            prio[s] = 50.0  # no possible start: a large priority must not matter
    env = torch.tensor([s[0] for s in every])
    pos = torch.tensor([s[1] for s in every])
    d.rb.update_priority(env, pos, torch.tensor([prio[s] for s in every]))
    starts = [s for s in every if ignored <= s[1] <= 6]
    nonzero = [prio[s] for s in starts if prio[s] > 0]
    mean = sum(nonzero) / len(nonzero)
    seen = collections.Counter()
    for _ in range(200):
        batch, info = d.rb.get_batch(8, 3)
        d.check_rows(batch, info.env_ids, info.positions, 3)
        assert (torch.diff(info.env_ids) >= 0).all()
        expected = [prio[s] / mean for s in starts_of(info)]
        np.testing.assert_allclose(info.importance_weights.numpy(), expected, rtol=1e-6)
        seen.update(starts_of(info))
    assert set(seen) <= set(starts) and seen[(1, 4)] == 0
    drawn = [s for s in starts if prio[s] > 0]
    total = sum(seen.values())
    f_exp = [total * prio[s] / sum(nonzero) for s in drawn]
    assert chisquare([seen[s] for s in drawn], f_exp).pvalue > P_CHI


def test_importance_weights_agree_with_core_probabilities() -> None:
    """N * P(i) with P(i) the core's probability of the start and N the non-zero count."""
    torch.manual_seed(10)
    d = prioritized(num_envs=3)
    d.run(8)
    env = torch.arange(3).repeat_interleave(7)
    pos = torch.arange(7).repeat(3)
    d.rb.update_priority(env, pos, (pos % 3).float() * 1.5)
    core_batch = d.rb.core.sample_sequences(16, 2, within_episode=False, pad=False)
    _, info = d.rb.get_batch(16, 2)
    n = int((pos % 3 != 0).sum())  # starts with a non-zero priority
    p_of = dict(zip(core_batch.ids.tolist(), core_batch.probabilities.tolist(), strict=True))
    ids = (info.positions * 3 + info.env_ids).tolist()
    for i, w in zip(ids, info.importance_weights.tolist(), strict=True):
        if i in p_of:
            assert w == pytest.approx(n * p_of[i], rel=1e-6)
    assert set(ids) & set(p_of), "the two draws share some starts"
    mean_nonzero = float(((pos % 3) * 1.5)[pos % 3 != 0].float().mean())
    prio = d.rb.core.get_priorities(np.array(ids))
    np.testing.assert_allclose(info.importance_weights.numpy(), prio / mean_nonzero, rtol=1e-6)


def test_new_steps_get_max_of_initial_and_current_largest_priority() -> None:
    d = prioritized(num_envs=1, initial_priority=2.0)
    d.add()
    assert d.rb.initial_priority.item() == 2.0
    assert d.rb.core.get_priorities(np.array([0])).tolist() == [2.0]
    d.rb.update_priority(torch.tensor([0]), torch.tensor([0]), torch.tensor([5.0]))
    assert d.rb.initial_priority.item() == 5.0
    d.add()
    assert d.rb.core.get_priorities(np.array([1])).tolist() == [5.0]
    # Lowering every priority lowers the current maximum (the core alone would keep 5).
    d.rb.update_priority(torch.tensor([0, 0]), torch.tensor([0, 1]), torch.tensor([1.0, 3.0]))
    assert d.rb.initial_priority.item() == 3.0
    d.add()
    assert d.rb.core.get_priorities(np.array([2])).tolist() == [3.0]
    assert d.rb.initial_priority.dtype == torch.float32


def test_prioritized_errors() -> None:
    d = prioritized()
    with pytest.raises(AssertionError, match="no data in the buffer"):
        d.rb.get_batch(2, 1)
    d.run(3)
    d.rb.update_priority(torch.tensor([0, 1]), torch.tensor([0, 0]), torch.tensor([0.0, 0.0]))
    d.rb.update_priority(torch.tensor([0, 1]), torch.tensor([1, 1]), torch.tensor([0.0, 0.0]))
    with pytest.raises(AssertionError, match="valid priority"):
        d.rb.get_batch(2, 2)
    # ALF stores any float (no check, seed 001): negative priorities are tested in
    # test_alf_odd_priorities.py
    with pytest.raises(rr.ShapeError):
        d.rb.update_priority(torch.tensor([0]), torch.tensor([0]), torch.tensor([1.0, 2.0]))
    plain = Driver()
    with pytest.raises(AssertionError, match="prioritized_sampling"):
        plain.rb.update_priority(torch.tensor([0]), torch.tensor([0]), torch.tensor([1.0]))


def test_update_priority_of_overwritten_steps_is_ignored() -> None:
    d = prioritized(num_envs=1, max_length=3)
    d.run(5)  # positions 2..4 stored
    d.rb.update_priority(torch.tensor([0, 0]), torch.tensor([0, 3]), torch.tensor([9.0, 4.0]))
    assert d.rb.initial_priority.item() == 4.0
    assert d.rb.core.get_priorities(np.array([3])).tolist() == [4.0]


def test_prioritized_with_ignored_frames_and_recent_data() -> None:
    torch.manual_seed(11)
    d = prioritized(num_envs=2, max_length=12, num_earliest_frames_ignored=3,
                    recent_data_ratio=0.25, recent_data_steps=1)  # fmt: skip
    d.run(12)
    # Give the ignored frames nearly all the mass: they must still never be starts.
    env = torch.arange(2).repeat_interleave(3)
    pos = torch.arange(3).repeat(2)
    d.rb.update_priority(env, pos, torch.full((6,), 1e6))
    for _ in range(10):
        batch, info = d.rb.get_batch(8, 2)
        d.check_rows(batch, info.env_ids, info.positions, 2)
        assert all(p >= 3 for _, p in starts_of(info))
        w = info.importance_weights.numpy()
        recent = info.positions.numpy() == 10
        assert recent.sum() >= 2
    # Eligible starts: 3..10 of each env, priority 1 each, so N * P(i) = 1 for all.
    np.testing.assert_allclose(w, 1.0)


def test_batch_length_1_draws_the_newest_step_of_a_running_episode() -> None:
    """ALF's sum tree holds a priority for every possible start: with ``batch_length=1`` that
    is every stored step, the newest one of a running episode too (its successor is not stored
    yet, which is what kept the core from drawing it)."""
    torch.manual_seed(12)
    d = prioritized(num_envs=2, max_length=6)
    d.run(4, episode_len=3)  # env 0: 0 1 LAST | 3 running; env 1: 0 1 2 3 running
    every = [(e, p) for e in range(2) for p in range(4)]
    prio = {s: 1.0 + s[1] for s in every}
    prio[(1, 3)] = 6.0  # the newest step of env 1, the largest share
    env = torch.tensor([s[0] for s in every])
    pos = torch.tensor([s[1] for s in every])
    d.rb.update_priority(env, pos, torch.tensor([prio[s] for s in every]))
    total = sum(prio.values())
    mean = total / len(every)
    seen: collections.Counter[tuple[int, int]] = collections.Counter()
    for _ in range(300):
        batch, info = d.rb.get_batch(8, 1)
        d.check_rows(batch, info.env_ids, info.positions, 1)
        np.testing.assert_allclose(
            info.importance_weights.numpy(), [prio[s] / mean for s in starts_of(info)], rtol=1e-6
        )
        seen.update(starts_of(info))
    n = sum(seen.values())
    assert seen[(0, 3)] > 0 and seen[(1, 3)] > 0
    f_exp = [n * prio[s] / total for s in every]
    assert chisquare([seen[s] for s in every], f_exp).pvalue > P_CHI


def test_batch_length_1_with_only_the_newest_steps_holding_priority() -> None:
    d = prioritized(num_envs=2, max_length=6)
    d.run(3)
    env, pos = torch.tensor([0, 0, 1, 1]), torch.tensor([0, 1, 0, 1])
    d.rb.update_priority(env, pos, torch.zeros(4))  # only position 2 of each env is left
    _, info = d.rb.get_batch(6, 1)
    assert info.positions.tolist() == [2] * 6
    np.testing.assert_allclose(info.importance_weights.numpy(), 1.0)
    with pytest.raises(AssertionError, match="valid priority"):
        d.rb.get_batch(2, 2)  # no start of two stored steps has a priority


def test_recent_rows_get_alfs_importance_weights() -> None:
    """Seed (get_batch): "importance_weights: priority divided by the average of all non-zero
    priorities in the buffer", for every row of the batch, the recent ones included."""
    torch.manual_seed(13)
    d = prioritized(num_envs=2, max_length=12, recent_data_ratio=0.5, recent_data_steps=1)
    d.run(12)
    every = [(e, p) for e in range(2) for p in range(12)]
    prio = {s: 1.0 + (s[1] % 5) + s[0] for s in every}
    env = torch.tensor([s[0] for s in every])
    pos = torch.tensor([s[1] for s in every])
    d.rb.update_priority(env, pos, torch.tensor([prio[s] for s in every]))
    starts = [s for s in every if s[1] <= 10]  # L = 2
    mean = sum(prio[s] for s in starts) / len(starts)
    for _ in range(5):
        _, info = d.rb.get_batch(8, 2)
        recent = info.positions.numpy() == 10
        assert recent.sum() >= 2  # recent rows start at an env's newest start
        want = [prio[s] / mean for s in starts_of(info)]
        np.testing.assert_allclose(info.importance_weights.numpy(), want, rtol=1e-6)
        assert not np.allclose(info.importance_weights.numpy()[recent], 1.0)


def test_dequeued_steps_no_longer_count_towards_the_initial_priority() -> None:
    """Seed: "The actual initial priority used for new experience is the maximum of this value
    and the current maximum priority of all experiences"; dequeue marks steps "removed in the
    buffer", so they are no longer among its experiences."""
    d = prioritized(num_envs=1, max_length=8)
    d.run(3)
    d.rb.update_priority(torch.tensor([0, 0]), torch.tensor([0, 1]), torch.tensor([7.0, 3.0]))
    assert d.rb.initial_priority.item() == 7.0
    d.rb.dequeue(n=1)  # removes position 0, priority 7
    assert d.rb.initial_priority.item() == 3.0
    d.add()
    assert d.rb.core.get_priorities(np.array([3])).tolist() == [3.0]
    d.rb.clear()
    assert d.rb.initial_priority.item() == 1.0


@settings(max_examples=25, deadline=None)
@given(
    max_length=st.sampled_from([1, 2, 5]),
    ops=st.lists(st.tuples(st.integers(0, 1), st.integers(0, 3)), min_size=1, max_size=25),
    length=st.integers(1, 2),
)
def test_prioritized_draws_against_reference(
    max_length: int, ops: list[tuple[int, int]], length: int
) -> None:
    """Random steps (LAST, FIRST after MID, time limits) of random envs: every row is stored
    and ALF's ``priority * nnz / sum`` over the possible starts, whatever the episode state."""
    torch.manual_seed(len(ops))
    d = prioritized(num_envs=2, max_length=max_length)
    for env, kind in ops:
        d.add(envs=[env], last=[env] if kind == 1 else [], first=[env] if kind == 2 else [])
    starts = [(e, p) for e in range(2) for p in d.stored(e) if p + length - 1 in d.stored(e)]
    if not starts:
        with pytest.raises(AssertionError):
            d.rb.get_batch(4, length)
        return
    env = torch.tensor([s[0] for s in starts])
    pos = torch.tensor([s[1] for s in starts])
    prio = {s: 0.5 + (s[1] % 3) for s in starts}
    d.rb.update_priority(env, pos, torch.tensor([prio[s] for s in starts]))
    mean = sum(prio.values()) / len(prio)
    batch, info = d.rb.get_batch(6, length)
    assert set(starts_of(info)) <= set(starts)
    d.check_rows(batch, info.env_ids, info.positions, length)
    np.testing.assert_allclose(
        info.importance_weights.numpy(), [prio[s] / mean for s in starts_of(info)], rtol=1e-6
    )
