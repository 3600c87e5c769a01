"""Mismatches with nnabla-rl 0.16.0 found by the final differential audit (issue 13).

Each expectation is transcribed from nnabla-rl 0.16.0's behaviour (its source,
``nnabla_rl/replay_buffer.py`` and ``nnabla_rl/replay_buffers/*.py``, Apache-2.0, Sony Group
Corporation, run side by side with the front-end in a scratch driver); the original is never
imported here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rlreplay.compat.nnabla_rl.random as rl_random
from rlreplay.compat.nnabla_rl.replay_buffer import ReplayBuffer
from rlreplay.compat.nnabla_rl.replay_buffers import (
    HindsightReplayBuffer,
    MemoryEfficientAtariTrajectoryBuffer,
    ProportionalPrioritizedReplayBuffer,
    RankBasedPrioritizedAtariBuffer,
    TrajectoryReplayBuffer,
)


def _reward(achieved: Any, goal: Any, info: dict[str, Any]) -> float:
    return -float(np.abs(np.asarray(achieved) - np.asarray(goal)).sum())


def _goal_step(t: int, *rest: Any, done: bool = False) -> tuple[Any, ...]:
    s = (np.full(3, float(t)), np.zeros(2), np.full(2, float(t)))
    s_next = (np.full(3, t + 1.0), np.zeros(2), np.full(2, t + 1.0))
    return (s, np.zeros(1), -1.0, 0.0 if done else 1.0, s_next, {}, *rest)


def _frame(t: int) -> np.ndarray[Any, Any]:
    out = np.zeros((84, 84), np.uint8)
    out[0, 0] = t
    return out


# ---------------------------------------------------------------- 0-d arrays
@pytest.mark.parametrize("capacity", [None, 10])
def test_zero_dim_arrays_come_back_as_zero_dim_arrays(capacity: int | None) -> None:
    # 0.16.0 keeps the appended objects: a 0-d array comes back as a 0-d ndarray (the
    # columnar store used to hand out NumPy scalars)
    buffer = ReplayBuffer(capacity)
    for t in range(3):
        buffer.append(
            (np.array(float(t)), np.array(1), np.array(0.5, np.float32), 1.0, np.array(t + 1.0), {})
        )
    for experience in [buffer[1], buffer.sample_indices([1])[0][0], *buffer.sample(2)[0]]:
        s, a, r, _, s_next, _ = experience
        for value in (s, a, r, s_next):
            assert type(value) is np.ndarray and value.ndim == 0
    s, a, r, _, s_next, _ = buffer[1]
    assert (s.dtype, a.dtype, r.dtype) == (np.float64, np.int64, np.float32)
    assert (float(s), int(a), float(r), float(s_next)) == (1.0, 1, 0.5, 2.0)


# ---------------------------------------------------------------- hindsight
def test_hindsight_info_is_element_5() -> None:
    # 0.16.0: ``isinstance(experience[5], dict)`` and ``experience[5].update(...)``, whatever
    # follows it (the front-end used the last element)
    buffer = HindsightReplayBuffer(_reward, hindsight_prob=0.0, capacity=5)
    buffer.append(_goal_step(0, "extra"))
    stored = buffer[0]
    assert stored[6] == "extra"
    assert stored[5]["index_in_episode"] == 0
    with pytest.raises(IndexError):  # a 5-tuple has no experience[5]
        buffer.append(_goal_step(1)[:5])
    with pytest.raises(ValueError):  # experience[5] is not a dict (the last element is)
        buffer.append((*_goal_step(1)[:5], 7, {}))
    assert len(buffer) == 1


def test_hindsight_relabelling_a_seven_tuple_raises_after_its_draws() -> None:
    # 0.16.0 draws drng.random(), then drng.integers(index, end + 1), then unpacks the
    # experience into six names: ValueError, with both draws made
    buffer = HindsightReplayBuffer(_reward, hindsight_prob=1.0, capacity=5)
    buffer.append_all([_goal_step(t, "extra") for t in range(3)])
    rl_random.seed(3)
    with pytest.raises(ValueError):
        buffer.sample_indices([1])
    expected = np.random.default_rng(3)
    expected.random()
    expected.integers(1, 3)
    assert rl_random.drng.random() == expected.random()


def test_hindsight_bad_index_draws_before_it_raises() -> None:
    # 0.16.0 draws drng.random() for each index before reading it: the index before the bad
    # one is drawn, then the bad one's draw is made and its read raises KeyError
    buffer = HindsightReplayBuffer(_reward, hindsight_prob=0.0, capacity=5)
    buffer.append_all([_goal_step(t) for t in range(3)])
    rl_random.seed(4)
    with pytest.raises(KeyError):
        buffer.sample_indices([0, -1, 1])
    expected = np.random.default_rng(4)
    expected.random()
    expected.random()
    assert rl_random.drng.random() == expected.random()


# ---------------------------------------------------------------- trajectories
def test_indices_portion_negative_index_without_trajectories() -> None:
    # 0.16.0's cumulative lengths start as [0]: a negative index reads trajectory 0, which
    # the ring (num_trajectories given) refuses with KeyError, the deque with IndexError
    with pytest.raises(KeyError):
        TrajectoryReplayBuffer(3).sample_indices_portion([-1])
    with pytest.raises(IndexError):
        TrajectoryReplayBuffer().sample_indices_portion([-1])
    with pytest.raises(IndexError):  # no cumulative length above 0: argwhere(...)[0]
        TrajectoryReplayBuffer(3).sample_indices_portion([0])


def test_atari_trajectory_positions_as_its_lazy_trajectory() -> None:
    # 0.16.0 reads an experience through _LazyAtariTrajectory: a negative index goes to the
    # trajectory's MemoryEfficientAtariBuffer, whose ring raises KeyError; a key that is not
    # a Python int raises TypeError("Invalid key type"); past the end, ValueError first
    buffer = MemoryEfficientAtariTrajectoryBuffer()
    buffer.append_trajectory([(_frame(t), 0, 0.0, 1.0, _frame(t + 1), {}) for t in range(3)])
    with pytest.raises(KeyError):
        buffer[-1]
    with pytest.raises(TypeError, match="Invalid key type"):
        buffer[np.int64(1)]
    with pytest.raises(ValueError):
        buffer[np.int64(3)]
    assert buffer[2][0][-1][0, 0] == pytest.approx(2 / 255)


# ---------------------------------------------------------------- rank-based Atari
def test_rank_based_atari_heap_is_never_sorted() -> None:
    # 0.16.0's RankBasedPrioritizedAtariBuffer.append replaces the rank-based append (which
    # counts appends and sorts the heap every sort_interval): its heap is never sorted.
    # Weights after five appends, an update and a sixth append, with sort_interval=1 (the
    # sorted heap would give 0.9248... and 0.8362... in the other order)
    buffer = RankBasedPrioritizedAtariBuffer(5, sort_interval=1, betasteps=10000, stacked_frames=2)
    for t in range(5):
        buffer.append((_frame(t), 0, 0.0, 1.0, _frame(t + 1), {}))
    buffer.sample_indices([0, 1, 2, 3, 4])
    buffer.update_priorities(np.array([0.1, 0.2, 0.3, 0.4, 0.5]))
    buffer.append((_frame(5), 0, 0.0, 1.0, _frame(6), {}))
    _, info = buffer.sample_indices([0, 1, 2, 3, 4])
    expected = [1.0, 0.8362674111778418, 0.9248644867764005, 0.7256163652578481, 0.5692932500470251]
    assert info["weights"].ravel().tolist() == expected
    # sort_interval is never used: 0 does not divide by zero at append
    other = RankBasedPrioritizedAtariBuffer(4, sort_interval=0, stacked_frames=2)
    other.append((_frame(0), 0, 0.0, 1.0, _frame(1), {}))
    assert len(other) == 1


# ---------------------------------------------------------------- prioritized positions
def test_update_after_a_negative_position_with_num_steps_0() -> None:
    # 0.16.0 keeps the positions and updates relative index p at ring slot (p + head) %
    # capacity: for -1, the unfilled last leaf of a buffer that is not full (its mass then
    # is the min tree's minimum) and the newest experience of a full one
    buffer = ProportionalPrioritizedReplayBuffer(7)
    buffer.append_all(list(range(5)))
    with pytest.warns(RuntimeWarning):  # the empty leaf's mass 0: weight inf, as there
        buffer.sample_indices([-1], num_steps=0)
    buffer.update_priorities(np.array([0.01]))
    _, info = buffer.sample_indices([0, 1])
    assert info["weights"].ravel().tolist() == [0.33107630855704023] * 2
    buffer.update_priorities(np.array([1.0, 1.0]))
    buffer.append_all(list(range(4)))  # full: head 2
    buffer.sample_indices([-1], num_steps=0)
    buffer.update_priorities(np.array([0.5]))
    _, info = buffer.sample_indices([5, 6])
    assert info["weights"].ravel().tolist() == [0.8466819295024021, 1.0]
