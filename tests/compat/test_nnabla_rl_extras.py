"""nnabla-rl's ``BufferIterator`` and ``ReplacementSamplingReplayBuffer`` on rlreplay.

Written from nnabla-rl's behaviour: ``BufferIterator(buffer, batch_size, shuffle=True,
repeat=True)`` walks the positions of a buffer in batches of ``batch_size`` (the last one of an
epoch may be smaller), each batch being ``buffer.sample_indices(indices)``; ``__next__`` and
``next`` are the same, ``reset`` starts a new (reshuffled) epoch, and without ``repeat`` an
epoch's end raises ``StopIteration``. ``ReplacementSamplingReplayBuffer.sample`` draws
``rng.choice(len - num_steps + 1, size=num_samples, replace=True)`` and returns
``sample_indices`` of them.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
from scipy.stats import chisquare

import rlreplay.compat.nnabla_rl.replay_buffers as RB
from rlreplay.compat.nnabla_rl.replay_buffer import ReplayBuffer
from rlreplay.compat.nnabla_rl.replay_buffers.buffer_iterator import BufferIterator
from rlreplay.compat.nnabla_rl.replay_buffers.replacement_sampling_replay_buffer import (
    ReplacementSamplingReplayBuffer,
)

P_CHI = 1e-3


def experience(t: int) -> tuple[Any, ...]:
    s = np.full(2, t, np.float32)
    return (s, np.array([t % 2]), float(t), 1.0, s + 1, {"t": t})


def filled(buffer: ReplayBuffer, n: int) -> Any:
    buffer.append_all([experience(t) for t in range(n)])
    return buffer


def numbers(experiences: Any) -> list[int]:
    return [int(e[2]) for e in experiences]


def test_exported_like_nnabla_rl() -> None:
    assert RB.BufferIterator is BufferIterator
    assert RB.ReplacementSamplingReplayBuffer is ReplacementSamplingReplayBuffer
    assert issubclass(ReplacementSamplingReplayBuffer, ReplayBuffer)


# ---------------------------------------------------------------------------- BufferIterator
def test_iterator_without_shuffle_walks_the_buffer_in_order() -> None:
    buffer = filled(ReplayBuffer(), 7)
    iterator = BufferIterator(buffer, batch_size=3, shuffle=False, repeat=False)
    assert iter(iterator) is iterator
    batches = []
    for experiences, info in iterator:
        batches.append(numbers(experiences))
        assert info["weights"].shape == (len(experiences), 1)
    assert batches == [[0, 1, 2], [3, 4, 5], [6]]
    with pytest.raises(ValueError, match="Indices are empty"):  # nnabla-rl's: no positions left
        iterator.next()
    iterator.reset()  # keeps the epoch flag that ValueError left: one StopIteration first
    with pytest.raises(StopIteration):
        next(iterator)
    assert numbers(next(iterator)[0]) == [0, 1, 2]


def test_iterator_shuffles_a_permutation_per_epoch_and_repeats() -> None:
    buffer = filled(ReplayBuffer(capacity=10), 10)
    iterator = BufferIterator(buffer, batch_size=4, seed=0)
    stream: list[int] = []
    lengths = []
    for _ in range(3):  # each ends with the batch that reaches the end of its positions
        batches = [numbers(experiences) for experiences, _ in iterator]
        lengths.append([len(b) for b in batches])
        stream += [n for b in batches for n in b]
    # nnabla-rl's bookkeeping: epoch 1 is 4 + 4 + (2 left + 2 of epoch 2); epoch 2 its 8
    # left; then no position is left, so the next batch is 4 of epoch 3 and ends an "epoch"
    assert lengths == [[4, 4, 4], [4, 4], [4]]
    epochs = [stream[:10], stream[10:20]]  # a new permutation per epoch
    for epoch in epochs:
        assert sorted(epoch) == list(range(10))
    assert epochs[0] != list(range(10))


def test_iterator_shuffle_is_uniform_over_first_positions() -> None:
    buffer = filled(ReplayBuffer(), 5)
    iterator = BufferIterator(buffer, batch_size=5, seed=1)
    first: Counter[int] = Counter()
    for _ in range(2000):
        first[numbers(iterator.next()[0])[0]] += 1
        with pytest.raises(StopIteration):  # every batch ends an epoch
            iterator.next()
    assert chisquare([first[i] for i in range(5)]).pvalue > P_CHI


def test_iterator_over_a_prioritized_buffer_passes_its_weights() -> None:
    buffer = filled(RB.PrioritizedReplayBuffer(capacity=6, seed=0), 6)
    iterator = BufferIterator(buffer, batch_size=4, shuffle=False, repeat=False)
    experiences, info = iterator.next()
    assert numbers(experiences) == [0, 1, 2, 3] and info["weights"].shape == (4, 1)
    buffer.update_priorities(np.zeros(4))
    assert numbers(iterator.next()[0]) == [4, 5]
    buffer.update_priorities(np.zeros(2))


# ---------------------------------------------------------------------------- replacement
def test_replacement_sampling_draws_with_replacement_uniformly() -> None:
    buffer = filled(ReplacementSamplingReplayBuffer(capacity=8, seed=0), 12)  # keeps 4..11
    experiences, info = buffer.sample(num_samples=20)  # more than len: fine with replacement
    assert len(experiences) == 20 and info["weights"].tolist() == [[1.0]] * 20
    counts: Counter[int] = Counter()
    for _ in range(300):
        experiences, _ = buffer.sample(num_samples=10)
        counts.update(numbers(experiences))
    assert set(counts) == set(range(4, 12))
    assert chisquare([counts[i] for i in range(4, 12)]).pvalue > P_CHI


def test_replacement_sampling_num_steps_and_errors() -> None:
    buffer = filled(ReplacementSamplingReplayBuffer(seed=1), 5)
    experiences, _ = buffer.sample(num_samples=30, num_steps=2)
    assert isinstance(experiences, tuple) and len(experiences) == 2
    first, second = numbers(experiences[0]), numbers(experiences[1])
    assert max(first) <= 3 and [a + 1 for a in first] == second
    with pytest.raises(ValueError):
        buffer.sample(num_samples=1, num_steps=6)  # no start position fits
    with pytest.raises(ValueError):
        buffer.sample(num_steps=0)
    with pytest.raises(ValueError):
        buffer.sample(num_samples=0)  # empty indices
    with pytest.raises(ValueError):
        ReplacementSamplingReplayBuffer().sample()  # empty buffer


def test_replacement_sampling_same_seed_same_samples() -> None:
    a = filled(ReplacementSamplingReplayBuffer(seed=3), 9)
    b = filled(ReplacementSamplingReplayBuffer(seed=3), 9)
    for _ in range(3):
        assert numbers(a.sample(num_samples=6)[0]) == numbers(b.sample(num_samples=6)[0])


# ---------------------------------------------------------------------------- trajectory objects
def test_object_store_trajectories_come_back_as_the_very_objects_appended() -> None:
    """nnabla-rl's TrajectoryReplayBuffer keeps each appended trajectory in its ring and gives
    that object back (get_trajectory, sample_trajectories), and slices it for portions
    (trajectory[start:start + portion_length]). In the object store the front-end does the
    same; in the columnar store the arrays are copies (deliberate difference 1), so a new
    sequence comes back there."""
    from rlreplay.compat.nnabla_rl.replay_buffers import TrajectoryReplayBuffer

    class Steps(tuple):  # a sequence type of the user's own
        pass

    columnar = [(np.full(2, t, np.float32), 0, 0.0, 1.0, np.full(2, t + 1, np.float32), {})
                for t in range(3)]  # fmt: skip
    objects = [{"step": t} for t in range(4)]  # experiences the columnar store can't hold
    steps = Steps({"step": 10 + t} for t in range(3))
    buffer = TrajectoryReplayBuffer(num_trajectories=3, seed=0)
    buffer.append_trajectory(columnar)
    assert buffer.get_trajectory(0) is not columnar and isinstance(buffer.get_trajectory(0), list)
    buffer.append_trajectory(objects)  # the buffer moves to its object store
    buffer.append_trajectory(steps)
    first = buffer.get_trajectory(0)  # stored before the move: rebuilt, equal values
    assert first is not columnar and [e[0].tolist() for e in first] == [[t, t] for t in range(3)]
    assert buffer.get_trajectory(1) is objects and buffer.get_trajectory(2) is steps
    trajectories, _ = buffer.sample_indices_trajectory([2, 1])
    assert trajectories[0] is steps and trajectories[1] is objects
    drawn, _ = buffer.sample_trajectories(num_samples=3)
    assert sum(t is objects for t in drawn) == 1 and sum(t is steps for t in drawn) == 1
    portions, _ = buffer.sample_indices_portion([4, 5, 7], portion_length=2)
    assert portions[0] == objects[1:3] and type(portions[0]) is list
    assert portions[1] == objects[2:4]
    assert portions[2] == steps[0:2] and type(portions[2]) is tuple  # Steps' slice is a tuple
    assert portions[0][0] is objects[1]  # the experiences themselves
    buffer.append_trajectory([{"step": 20}])  # num_trajectories=3: the oldest is dropped
    assert buffer.get_trajectory(0) is objects and buffer.get_trajectory(2) == [{"step": 20}]
