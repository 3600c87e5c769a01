"""Inputs ReAgent accepts, accepted by the front-end and handled as ReAgent handles them.

Each test cites what ReAgent does, from the seed's documentation
(``/work/shared/seeds/000_*.txt``) or ReAgent's source at that version:

* ``add(observation, action, reward, terminal, *args, **kwargs)`` stores each value by
  ``self._store[name][cursor] = value`` (NumPy assignment), and the episode ends where
  ``terminal`` is non-zero;
* ``is_valid_transition(index)`` is ``self._is_index_valid[index]`` and
  ``set_index_valid_status(idx, ...)`` writes ``self._is_index_valid[idx]``: a torch tensor
  indexed by ``index`` (negative values count from the end, others past it raise IndexError);
* ``get_priority``/``set_priority`` read and write ``self.sum_tree.nodes[-1][index]``, the leaf
  level of ``2**ceil(log2(capacity))`` entries;
* ``buffer.sum_tree`` is a ``SumTree`` with ``nodes``, ``sample``, ``stratified_sample``.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
import torch

from rlreplay.compat.reagent import PrioritizedReplayBuffer
from rlreplay.compat.reagent.circular_replay_buffer import ReplayElement
from rlreplay.compat.reagent.sum_tree import SumTree
from tests.compat.test_reagent import RefReAgent, fill, make, obs_of

MASK = ReplayElement("mask", (2,), np.float32)


def _same_batches(a: Any, b: Any) -> None:
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x.numpy(), y.numpy())


# ---------------------------------------------------------------------- add
@pytest.mark.parametrize(
    "terminal",
    [True, 1, np.bool_(True), np.int64(1), np.uint8(1), 1.0, torch.tensor(True), torch.tensor(1)],
)
def test_terminal_of_any_truthy_kind_ends_the_episode(terminal: Any) -> None:
    # ReAgent stores terminal into a uint8 array; the next add starts an episode where the
    # stored value is 1, whatever type it came as.
    ref, buf = make(stack_size=2), make(stack_size=2)
    for target, last in ((ref, True), (buf, terminal)):
        target.add(obs_of(0, 0), 0, 1.0, False)
        target.add(obs_of(0, 1), 0, 1.0, last)
        target.add(obs_of(1, 0), 0, 1.0, False)
    assert buf.add_count == ref.add_count == 5  # one padding row before each episode
    _same_batches(buf.sample_all_valid_transitions(), ref.sample_all_valid_transitions())


@pytest.mark.parametrize("terminal", [False, 0, np.bool_(False), np.int32(0), 0.0, torch.tensor(0)])
def test_falsy_terminals_continue_the_episode(terminal: Any) -> None:
    buf = make(stack_size=2)
    buf.add(obs_of(0, 0), 0, 1.0, terminal)
    buf.add(obs_of(0, 1), 0, 1.0, True)
    assert buf.add_count == 3  # the second add started no episode


def test_add_by_position_by_name_and_mixed_agree() -> None:
    # ReAgent: add(observation, action, reward, terminal, *args, **kwargs).
    kw = dict(extra_storage_types=[MASK], reward_shape=(2,))
    a, b, c = make(**kw), make(**kw), make(**kw)
    for t in range(5):
        o, r, m, term = obs_of(0, t), [1.0 * t, 2.0], [0.5, t], t == 4
        a.add(o, t % 2, np.array(r), term, np.array(m))
        b.add(observation=o, action=t % 2, reward=r, terminal=term, mask=m)  # lists, by name
        c.add(o, t % 2, tuple(r), term, mask=np.array(m, np.float64))  # tuple, float64
    _same_batches(a.sample_all_valid_transitions(), b.sample_all_valid_transitions())
    _same_batches(a.sample_all_valid_transitions(), c.sample_all_valid_transitions())
    got = a.sample_all_valid_transitions()
    assert got.reward.shape == (5, 2) and got.mask.shape == (5, 2)
    np.testing.assert_array_equal(got.mask.numpy()[:, 1], np.arange(5, dtype=np.float32))


def test_reward_arrays_of_reward_shape_sum_over_the_window() -> None:
    buf = make(reward_shape=(2,), update_horizon=2)
    for t in range(4):
        buf.add(obs_of(0, t), 0, np.array([t, -t], np.float64), t == 3)
    batch = buf.sample_transition_batch(batch_size=1, indices=[0])
    np.testing.assert_array_equal(batch.reward.numpy(), [[0 + 0.5 * 1, 0 - 0.5 * 1]])


# ---------------------------------------------------------------------- counters and slots
def test_counters_follow_reagents_ring() -> None:
    ref, buf = RefReAgent(7, 2, 1, 0.5), make(stack_size=2, replay_capacity=7)
    assert buf.is_empty() and not buf.is_full() and buf.cursor() == 0
    for e, n in enumerate([3, 4]):
        for t in range(n):
            args = (obs_of(e, t), 0, 1.0, t == n - 1, 0.0)
            ref.add(*args)
            buf.add(*args[:4])
            assert buf.cursor() == ref.cursor() and int(buf.add_count) == ref.add_count
            assert buf.is_full() == (ref.add_count >= 7) and not buf.is_empty()
    assert [buf.is_valid_transition(i) for i in range(7)] == ref.valid.tolist()


@pytest.mark.parametrize("as_index", [int, np.int32, np.int64, torch.tensor])
def test_is_valid_transition_indexes_like_a_tensor(as_index: Any) -> None:
    buf = make(replay_capacity=10)
    fill(buf, [4])
    valid = torch.tensor([buf.is_valid_transition(i) for i in range(10)])
    for i in range(-10, 10):
        assert buf.is_valid_transition(as_index(i)) == bool(valid[i])
    for bad in (10, -11):
        with pytest.raises(IndexError):
            valid[bad]  # what ReAgent's tensor does
        with pytest.raises(IndexError):
            buf.is_valid_transition(as_index(bad))


def test_set_index_valid_status_negative_index_counts_from_the_end() -> None:
    buf = make(replay_capacity=10)
    fill(buf, [4])
    size = buf.size
    buf.set_index_valid_status(-10, False)  # slot 0
    assert not buf.is_valid_transition(0) and buf.size == size - 1
    with pytest.raises(IndexError):
        buf.set_index_valid_status(10, True)
    assert buf.size == size - 1


# ---------------------------------------------------------------------- sampling
@pytest.mark.parametrize(
    "as_indices",
    [
        list,
        np.array,
        lambda s: np.array(s, np.int32),
        torch.tensor,
        lambda s: torch.tensor(s)[None],
    ],
)
def test_sample_transition_batch_indices_of_any_kind(as_indices: Any) -> None:
    buf = make()
    fill(buf, [5, 4])
    want = buf.sample_transition_batch(batch_size=3, indices=np.array([3, 0, 6]))
    _same_batches(buf.sample_transition_batch(batch_size=3, indices=as_indices([3, 0, 6])), want)
    _same_batches(buf.sample_transition_batch(batch_size=3, indices=as_indices([3, 0, 6])), want)


def test_sample_index_batch_then_transitions_of_those_indices() -> None:
    # The usual ReAgent loop: indices = sample_index_batch(B); sample_transition_batch(B, indices).
    buf = make()
    fill(buf, [5, 4])
    idx = buf.sample_index_batch(6)
    assert idx.dtype == torch.int64 and idx.shape == (6,)
    assert all(buf.is_valid_transition(i) for i in idx)
    batch = buf.sample_transition_batch(6, idx)
    assert batch.indices.reshape(-1).tolist() == idx.tolist()
    default = buf.sample_transition_batch()  # batch_size=None, indices=None
    assert default.state.shape[0] == 4


# ---------------------------------------------------------------------- priorities
def test_set_priority_takes_torch_tensors() -> None:
    buf = make(PrioritizedReplayBuffer)
    fill(buf, [4])
    batch = buf.sample_transition_batch(3)
    td = torch.tensor([[0.5], [2.0], [1.5]])  # (B, 1), as a loss produces it
    buf.set_priority(batch.indices, td)
    want = {
        int(i): float(p) for i, p in zip(batch.indices.reshape(-1), td.reshape(-1), strict=True)
    }
    for i, p in want.items():  # duplicates: the last write wins, as in ReAgent's loop
        assert buf.get_priority([i])[0] == np.float32(p)
    buf.set_priority(torch.tensor([0, 1], dtype=torch.int32), torch.tensor([3.0, 4.0]))
    assert buf.get_priority(torch.tensor([0, 1])).tolist() == [3.0, 4.0]


def test_priority_indices_read_the_tree_leaves() -> None:
    # Capacity 50: ReAgent's leaf level has 64 entries; leaves 50..63 are padding (0), and a
    # negative index counts back from leaf 63.
    buf = make(PrioritizedReplayBuffer)
    fill(buf, [4])  # slots 0..3 hold priorities 1..4
    leaves = np.zeros(64)
    leaves[:4] = [1, 2, 3, 4]
    idx = np.array([-64, -61, -1, 50, 63, 2], np.int32)
    assert buf.get_priority(idx).tolist() == leaves[idx].tolist()
    # A negative index fails ReAgent's walk up the tree ("Sum tree traversal failed").
    with pytest.raises(AssertionError):
        buf.set_priority(np.array([-61], np.int32), [7.0])
    # Writing a padding leaf is ReAgent's bug (its tree then draws a slot that does not exist).
    with pytest.raises(IndexError):
        buf.set_priority(np.array([50], np.int32), [1.0])


def test_sum_tree_attribute_is_a_whole_reagent_sum_tree() -> None:
    buf = make(PrioritizedReplayBuffer, replay_capacity=6)
    fill(buf, [5])  # priorities 1..5 in slots 0..4
    buf.sum_tree.set(4, 0.5)
    ref = SumTree(6)
    for i, p in enumerate(buf.get_priority(np.arange(6, dtype=np.int32))):
        ref.set(i, float(p))
    assert [x.tolist() for x in buf.sum_tree.nodes] == [x.tolist() for x in ref.nodes]
    assert buf.sum_tree._total_priority() == ref._total_priority() == 10.5
    for q in (0.0, 0.3, 0.99, 1.0):
        assert buf.sum_tree.sample(q) == ref.sample(q)
    random.seed(4)
    drawn = buf.sum_tree.stratified_sample(4)
    random.seed(4)
    assert drawn == ref.stratified_sample(4)
    assert buf.sum_tree.get(1) == 2.0 and buf.sum_tree.max_recorded_priority == 5.0


def test_set_priority_count_mismatch_is_refused_not_truncated() -> None:
    # Deliberate difference 7: ReAgent's zip(indices, priorities) drops the surplus silently.
    buf = make(PrioritizedReplayBuffer)
    fill(buf, [4])
    before = buf.get_priority(np.arange(4, dtype=np.int32))
    for idx, prios in (([0, 1, 2], [5.0, 6.0]), ([0], [5.0, 6.0])):
        with pytest.raises(ValueError, match="one per index"):
            buf.set_priority(np.array(idx, np.int32), np.array(prios))
    np.testing.assert_array_equal(buf.get_priority(np.arange(4, dtype=np.int32)), before)
