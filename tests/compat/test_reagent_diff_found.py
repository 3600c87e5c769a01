"""Mismatches with reagent 0.1 found by the differential run of issue 13, pinned.

Each expectation is transcribed from reagent 0.1's ``replay_memory`` source (Apache 2.0,
Copyright (c) Facebook, Inc. and its affiliates; Copyright 2018 The Dopamine Authors), quoted
in the comments; the original is never imported.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from rlreplay.compat.reagent import PrioritizedReplayBuffer, ReplayBuffer
from rlreplay.compat.reagent.sum_tree import SumTree


def _filled_prioritized(cap: int = 50) -> PrioritizedReplayBuffer:
    buf = PrioritizedReplayBuffer((), 1, cap, 2, observation_dtype=np.float32)
    for t, p in enumerate([1.0, 1.3, 3.0, 4.0]):
        buf.add(float(t), 0, 1.0, False, p)
    return buf


# ---------------------------------------------------------------------- SumTree
def test_sum_tree_get_reads_the_leaf_level_as_numpy() -> None:
    # 0.1: ``return self.nodes[-1][node_index]``: the level has 2**ceil(log2(capacity))
    # float64 leaves; a negative index counts back, a padding leaf reads 0.0.
    tree = SumTree(5)  # 8 leaves
    tree.set(2, 1.5)
    got = tree.get(2)
    assert type(got) is np.float64 and got == 1.5
    assert tree.get(-6) == 1.5 and tree.get(6) == 0.0 and tree.get(-1) == 0.0
    for outside in (8, -9):
        with pytest.raises(IndexError):
            tree.get(outside)


def test_sum_tree_set_refuses_as_reagent_walks() -> None:
    # 0.1's set: ``if value < 0.0: raise ValueError``, then ``nodes[-1][node_index]``
    # (IndexError outside the level), then the walk up with ``node_index //= 2`` ends at -1
    # for a negative index: ``assert node_index == 0, "Sum tree traversal failed..."``.
    tree = SumTree(5)
    tree.set(1, 2.0)
    before = [level.tolist() for level in tree.nodes]
    with pytest.raises(AssertionError, match="traversal failed"):
        tree.set(-7, 1.0)
    with pytest.raises(IndexError):
        tree.set(8, 1.0)
    with pytest.raises(ValueError):
        tree.set(8, -1.0)  # the value is checked first
    assert [level.tolist() for level in tree.nodes] == before
    assert tree.max_recorded_priority == 2.0


# ---------------------------------------------------------------------- priorities
def test_set_priority_negative_index_fails_reagents_tree_walk() -> None:
    # 0.1: ``for index, priority in zip(indices, priorities): self.sum_tree.set(index, ...)``;
    # a negative index fails the assertion above (0.1 after writing; here nothing changes).
    buf = _filled_prioritized()
    before = buf.get_priority(np.arange(50, dtype=np.int32))
    with pytest.raises(AssertionError):
        buf.set_priority(np.array([-61], np.int32), [7.0])
    with pytest.raises(AssertionError):
        buf.sum_tree.set(-1, 7.0)
    # The first pair 0.1 refuses decides: a negative priority before a negative index.
    with pytest.raises(ValueError):
        buf.set_priority(np.array([1, -61], np.int32), [-1.0, 7.0])
    np.testing.assert_array_equal(buf.get_priority(np.arange(50, dtype=np.int32)), before)


def test_sum_tree_attribute_get_is_the_float64_leaf() -> None:
    # 0.1: ``buffer.sum_tree.get(i)`` is ``nodes[-1][i]``, the float64 leaf set by add.
    buf = _filled_prioritized()
    got = buf.sum_tree.get(1)
    assert type(got) is np.float64 and got == 1.3
    assert buf.sum_tree.get(-63) == 1.3 and buf.sum_tree.get(60) == 0.0


def test_prioritized_batch_of_zero_draws_raises_index_error() -> None:
    # 0.1: ``np.array(self.sum_tree.stratified_sample(0))`` is an empty float64 array, and
    # ``self._store[name][indices]`` refuses float indices with an IndexError.
    buf = _filled_prioritized()
    with pytest.raises(IndexError):
        buf.sample_transition_batch(batch_size=0)
    assert buf.sample_index_batch(0).numel() == 0


# ---------------------------------------------------------------------- add
def test_a_tensor_is_checked_as_a_scalar_like_reagent() -> None:
    # 0.1's _check_add_types: ndarray -> its shape, tuple/list -> np.array(x).shape,
    # else "Assume it is scalar." A (2,) tensor for a (2,) element is refused with ValueError;
    # a one-element tensor for a scalar element passes.
    buf = ReplayBuffer((2,), 1, 10, 2, observation_dtype=np.float32, reward_shape=(2,))
    with pytest.raises(ValueError, match="reward"):
        buf.add(np.zeros(2), 0, torch.tensor([1.0, 2.0]), False)
    assert int(buf.add_count) == 0
    buf.add(torch.zeros(2).numpy(), torch.tensor([3]), (1.0, 2.0), torch.tensor(False))
    assert int(buf.add_count) == 1


def test_positional_shapes_are_checked_before_missing_names() -> None:
    # 0.1 checks ``zip(args, add_arg_signature)`` first, then ``kwargs[store_element.name]``.
    extra = [("mask", (2,), np.float32)]
    buf = ReplayBuffer((2,), 1, 10, 2, extra_storage_types=extra)
    with pytest.raises(ValueError, match="action"):
        buf.add(np.zeros(2), np.zeros(3), 1.0, False, bogus=1)
    with pytest.raises(KeyError):
        buf.add(np.zeros(2), 0, 1.0, False, bogus=1)


# ---------------------------------------------------------------------- validity, counters
@pytest.mark.parametrize(
    ("index", "want"),
    [
        (np.array([1]), [True]),
        ([0, 2, 9], [True, True, False]),
        (torch.tensor([1, -9]), [True, True]),
    ],
)
def test_is_valid_transition_is_numpys_read(index: Any, want: list[bool]) -> None:
    # 0.1: ``return self._is_index_valid[index]``: an index array gives an array.
    buf = ReplayBuffer((), 1, 10, 2, update_horizon=1)
    for t in range(3):
        buf.add(t, 0, 1.0, t == 2)
    got = buf.is_valid_transition(index)
    assert isinstance(got, np.ndarray) and got.tolist() == want
    with pytest.raises(IndexError):
        buf.is_valid_transition(1.0)


def test_invalid_range_of_no_slots_is_float64() -> None:
    # 0.1: ``np.array([... for i in range(stack_size + update_horizon)])`` of no element is
    # an empty float64 array.
    buf = ReplayBuffer((), 0, 10, 2, update_horizon=0)
    buf.add(1, 0, 1.0, False)
    assert buf.invalid_range.dtype == np.float64 and buf.invalid_range.size == 0


# ---------------------------------------------------------------------- load
def test_load_needs_the_invalid_range_file(tmp_path: Path) -> None:
    # 0.1's load first checks every checkpointable element's file (``invalid_range`` is a
    # public attribute) and raises FileNotFoundError before changing anything.
    buf = ReplayBuffer((2,), 1, 10, 2, observation_dtype=np.float32)
    for t in range(4):
        buf.add(np.full(2, t, np.float32), 0, 1.0, t == 3)
    buf.save(str(tmp_path), 1)
    os.remove(tmp_path / "invalid_range_ckpt.1.gz")
    fresh = ReplayBuffer((2,), 1, 10, 2, observation_dtype=np.float32)
    with pytest.raises(FileNotFoundError):
        fresh.load(str(tmp_path), 1)
    assert int(fresh.add_count) == 0
    with gzip.open(tmp_path / "invalid_range_ckpt.1.gz", "wb") as f:
        np.save(f, buf.invalid_range, allow_pickle=False)
    fresh.load(str(tmp_path), 1)
    assert int(fresh.add_count) == int(buf.add_count)


def test_stack_size_0_checkpoint_round_trips(tmp_path: Path) -> None:
    # 0.1 saves and loads a stack_size=0 buffer like any other (its load reads the arrays).
    buf = ReplayBuffer((), 0, 6, 2, update_horizon=1)
    for t in range(9):
        buf.add(t, 0, 1.0, t % 4 == 3)
    buf.save(str(tmp_path), 0)
    fresh = ReplayBuffer((), 0, 6, 2, update_horizon=1)
    fresh.load(str(tmp_path), 0)
    assert int(fresh.add_count) == 9
    np.testing.assert_array_equal(fresh._store["observation"], buf._store["observation"])


def test_set_priority_float_array_is_asserted_even_empty() -> None:
    # 0.1: ``assert indices.dtype == np.int32, "Indices must be integers, ..."``.
    buf = _filled_prioritized()
    with pytest.raises(AssertionError):
        buf.set_priority(np.array([], np.float64), np.array([]))


# ---------------------------------------------------------------------- round 2
@pytest.mark.parametrize("cls", [ReplayBuffer, PrioritizedReplayBuffer])
def test_indices_without_batch_size_count_against_the_default(cls: Any) -> None:
    # 0.1's sample_transition_batch: ``if batch_size is None: batch_size = self._batch_size``
    # ... ``assert len(indices) == batch_size`` (before any index is read): indices of another
    # length than the default batch_size raise AssertionError, even out of range ones.
    buf = cls((2,), 1, 20, 3, observation_dtype=np.float32)
    for t in range(6):
        buf.add(
            np.full(2, t, np.float32), 0, 1.0, False, *([1.0] if cls is not ReplayBuffer else [])
        )
    for indices in ([1, 2], np.array([0]), torch.tensor([1, 2, 3, 4]), [25]):
        with pytest.raises(AssertionError):
            buf.sample_transition_batch(indices=indices)
    with pytest.raises(AssertionError):
        buf.sample_transition_batch(batch_size=2, indices=[1, 2, 3])
    batch = buf.sample_transition_batch(indices=[1, 2, 3])  # the default 3: accepted
    assert batch.state[:, 0].tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(IndexError):
        buf.sample_transition_batch(indices=[1, 2, 25])  # right length, then NumPy's read
    assert buf.sample_transition_batch(batch_size=1, indices=[4]).state.tolist() == [[4.0, 4.0]]


@pytest.mark.parametrize(("stack_size", "capacity"), [(0, 1), (1, 1), (2, 2), (3, 3)])
def test_update_horizon_0_builds_at_the_smallest_capacity(stack_size: int, capacity: int) -> None:
    # 0.1's only capacity check: ``if replay_capacity < update_horizon + stack_size: raise
    # ValueError``; with update_horizon=0, replay_capacity == stack_size (or 1) builds. Adds
    # work, and sample_transition_batch fails at ``traj_lengths`` (``terminals[:, -1]`` of a
    # (B, 0) window: IndexError) while sample_index_batch draws. Transcribed from 0.1 runs
    # (stack_size=3, capacity=3: slot validity and the stack after the last add).
    buf = ReplayBuffer((), stack_size, capacity, 3, update_horizon=0, observation_dtype=np.float32)
    for t in range(5):
        buf.add(float(t), 0, 1.0, t == 2)
    # padding before the first step and after the terminal one: stack_size - 1 rows each
    assert buf.add_count == 5 + 2 * max(stack_size - 1, 0)
    with pytest.raises(IndexError):
        buf.sample_transition_batch()
    assert len(buf.sample_index_batch(2)) == 2
    if stack_size == 3:
        assert [bool(buf.is_valid_transition(i)) for i in range(3)] == [False, False, True]
        assert buf.get_observation_stack(0).tolist() == [3.0, 4.0, 0.0]
    if stack_size == 1:
        assert buf.get_observation_stack(0).tolist() == [4.0]


def test_everything_as_stack_reads_any_index_modulo_the_capacity() -> None:
    # 0.1 with return_everything_as_stack reads every element with get_stack_for_indices
    # (``stack_indices %= self._replay_capacity``), never ``_store[name][indices]``: an index
    # past the capacity is read modulo it and echoed as given; with update_horizon > 1 the
    # reward element raises NotImplementedError("Uncertain how to do this without double
    # counting..") whatever the indices.
    def make(horizon: int) -> ReplayBuffer:
        buf = ReplayBuffer((2,), 1, 10, 2, update_horizon=horizon, return_everything_as_stack=True)
        for t in range(6):
            buf.add(np.full(2, t), 0, float(t), False)
        return buf

    batch = make(1).sample_transition_batch(batch_size=2, indices=[13, -17])
    assert batch.state[:, 0].reshape(-1).tolist() == [3.0, 3.0]
    assert batch.reward.reshape(-1).tolist() == [3.0, 3.0]
    assert batch.next_state[:, 0].reshape(-1).tolist() == [4.0, 4.0]
    assert batch.indices.reshape(-1).tolist() == [13, -17]
    with pytest.raises(NotImplementedError):
        make(2).sample_transition_batch(batch_size=1, indices=[31])


def test_refused_set_priority_keeps_max_recorded_priority() -> None:
    # Deliberate difference 11 (docs/migrating/reagent.md). 0.1's SumTree.set runs
    # ``self.max_recorded_priority = max(value, self.max_recorded_priority)`` before
    # ``self.nodes[-1][node_index]`` raises IndexError, so there a refused
    # set_priority(array([32], int32), array([2.25])) of a 23-slot buffer (32 leaves) leaves
    # max_recorded_priority at 2.25 with no leaf holding it; here nothing changes.
    buf = PrioritizedReplayBuffer((), 1, 23, 2, observation_dtype=np.float32)
    buf.add(0.0, 0, 1.0, False, 1.5)
    with pytest.raises(IndexError):
        buf.set_priority(np.array([32], np.int32), np.array([2.25]))
    assert buf.sum_tree.max_recorded_priority == 1.5
    assert buf.get_priority(np.arange(23, dtype=np.int32)).max() == 1.5


def test_sum_tree_sums_stay_exact_after_a_float32_tensor_priority() -> None:
    # Deliberate difference 5. 0.1's set adjusts the ancestors by ``value - nodes[-1][i]``;
    # for a float32 tensor value that delta is a float32 tensor, so after set(1, 0.33),
    # set(0, 0.74), set(0, torch.tensor(1.5)), set(0, 2.59) its root is 2.92000004 (0.1 run),
    # not 2.59 + 0.33. Here each parent is recomputed from its children.
    tree = SumTree(4)
    for i, v in [(1, 0.33), (0, 0.74), (0, torch.tensor(1.5)), (0, 2.59)]:
        tree.set(i, v)
    assert tree.nodes[0][0] == 2.59 + 0.33
    assert tree.max_recorded_priority == 2.59


def test_terminal_other_than_0_and_1_ends_the_episode_as_stored() -> None:
    # Deliberate difference 14. reagent 0.1 (``if self.is_empty() or
    # self._store["terminal"][last_idx] == 1:`` pads; ``if terminal:`` marks validity),
    # runs transcribed: stack_size=2, adds 1.0, 2.0 (terminal=2), 3.0, 4.0 -> add_count 5,
    # observation rows [0, 1, 2, 3, 4], slot 3's stack [2.0, 3.0] (two episodes mixed).
    buf = ReplayBuffer((), 2, 10, 1, observation_dtype=np.float32)
    for obs, terminal in [(1.0, False), (2.0, 2), (3.0, False), (4.0, False)]:
        buf.add(obs, 0, 1.0, terminal)
    assert buf._store["terminal"].tolist()[:3] == [0, 0, 2]  # stored as 0.1 stores it
    assert buf.add_count == 6  # 0.1: 5 (no padding after the stored 2)
    assert buf._store["observation"].tolist()[:6] == [0.0, 1.0, 2.0, 0.0, 3.0, 4.0]
    assert buf.get_observation_stack(4).tolist() == [0.0, 3.0]  # 0.1: [2.0, 3.0]
    # 0.1, stack_size=1: adds 1.0, 2.0 (terminal=0.5, stored 0) -> slots 0 and 1 valid at
    # once (size 2), slot 1's next_state not written yet; then a True terminal: 3 valid.
    buf = ReplayBuffer((), 1, 10, 1, observation_dtype=np.float32)
    buf.add(1.0, 0, 1.0, False)
    buf.add(2.0, 0, 1.0, 0.5)
    assert buf._store["terminal"].tolist()[:2] == [0, 0]
    assert buf.size == 1 and not buf.is_valid_transition(1)  # 0.1: size 2, slot 1 valid
    buf.add(3.0, 0, 1.0, True)
    assert buf.size == 3  # as 0.1 from here on
    batch = buf.sample_transition_batch(batch_size=1, indices=[1])
    assert batch.next_state.tolist() == [[3.0]] and not bool(batch.terminal[0])


def test_get_priority_float_array_is_asserted_even_empty() -> None:
    # 0.1's get_priority: ``assert indices.dtype == np.int32, "Indices must be int32s, ..."``
    # before reading any leaf, so an empty float array raises AssertionError too.
    buf = _filled_prioritized()
    for indices in (np.array([], np.float32), torch.tensor([]), np.array([1.0])):
        with pytest.raises(AssertionError, match="Indices must be"):
            buf.get_priority(indices)
    assert buf.get_priority(np.array([], np.int32)).tolist() == []


def test_an_emptied_sum_tree_raises_on_sampling() -> None:
    # Deliberate difference 5. 0.1: set(0, 3.28), set(2, 2), set(2, 0.0), set(0, 0.0) leaves
    # its root at -4.4e-16 (delta updates), so ``_total_priority() == 0`` is False and
    # sample() returns leaf 0 of value 0. Here the sums are exact and the tree is empty.
    tree = SumTree(3)
    for i, v in [(0, 3.28), (2, 2), (2, 0.0), (0, 0.0)]:
        tree.set(i, v)
    assert tree.nodes[0][0] == 0.0
    with pytest.raises(Exception, match="empty sum tree"):
        tree.sample()
    with pytest.raises(Exception, match="empty sum tree"):
        tree.stratified_sample(2)
