"""nnabla-rl's prioritized buffers at their edges: betasteps=0, alpha=0, zero priorities.

Written from nnabla-rl's code as its users meet it (the seed documents the constructor
``PrioritizedReplayBuffer(capacity, alpha=0.6, beta=0.4, betasteps=10000, ..., epsilon=1e-8,
...)``):

* its constructor computes ``self._beta_diff = (1.0 - beta) / betasteps``, so ``betasteps=0``
  raises ``ZeroDivisionError`` when the buffer is built;
* a priority's mass is ``(|error| + epsilon) ** alpha`` in Python, where ``0 ** 0 == 1``: with
  ``alpha=0`` a zero priority has mass 1 like every other, so it is drawn;
* every priority 0 (``epsilon=0`` and zero errors): its stratified draw queries
  ``drng.uniform(0, 0) == 0`` and its sum tree's descent (left while ``query <= left``) ends in
  the left-most leaf of the deepest level, absolute index ``2 ** ceil(log2(c)) - c``; the
  weights are ``(0 / 0) ** -beta``, NaN.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
from scipy.stats import chisquare

from rlreplay.compat.nnabla_rl.replay_buffers.memory_efficient_atari_buffer import (
    ProportionalPrioritizedAtariBuffer,
    RankBasedPrioritizedAtariBuffer,
)
from rlreplay.compat.nnabla_rl.replay_buffers.prioritized_replay_buffer import (
    PrioritizedReplayBuffer,
    ProportionalPrioritizedReplayBuffer,
    RankBasedPrioritizedReplayBuffer,
)


def experience(t: int) -> tuple[Any, ...]:
    s = np.full(2, t, np.float32)
    return (s, np.array([0]), float(t), 1.0, s + 1, {})


def numbers(experiences: Any) -> list[int]:
    return [int(e[2]) for e in experiences]


@pytest.mark.parametrize(
    "cls",
    [
        PrioritizedReplayBuffer,
        ProportionalPrioritizedReplayBuffer,
        RankBasedPrioritizedReplayBuffer,
        ProportionalPrioritizedAtariBuffer,
        RankBasedPrioritizedAtariBuffer,
    ],
)
def test_betasteps_zero_divides_by_zero_at_construction(cls: type[Any]) -> None:
    with pytest.raises(ZeroDivisionError):
        cls(capacity=10, betasteps=0)
    with pytest.raises(ZeroDivisionError):
        cls(capacity=10, betasteps=0.0)
    cls(capacity=10, betasteps=1)  # any other value builds the buffer


def test_alpha_zero_draws_zero_priorities_like_any_other() -> None:
    """alpha=0: every mass is priority ** 0 == 1, a zero priority included (0 ** 0 == 1)."""
    n = 6
    buffer = ProportionalPrioritizedReplayBuffer(capacity=n, alpha=0.0, epsilon=0.0, seed=5)
    buffer.append_all([experience(t) for t in range(n)])
    errors = np.array([0.0, 0.5, 0.0, 1.0, 0.0, 0.2])
    buffer.sample_indices(list(range(n)))
    buffer.update_priorities(errors)
    counts: Counter[int] = Counter()
    for _ in range(300):
        experiences, info = buffer.sample(num_samples=4)
        counts.update(numbers(experiences))
        np.testing.assert_array_equal(info["weights"], 1.0)  # every P(i) is the same
        buffer.update_priorities(errors[numbers(experiences)])
    observed = np.array([counts[t] for t in range(n)])
    assert observed[[0, 2, 4]].min() > 0  # the zero priorities are drawn
    assert chisquare(observed).pvalue > 1e-3  # uniformly
    # an experience appended with the largest priority 0 (init_max_error=0) is drawn too
    zero_init = ProportionalPrioritizedReplayBuffer(
        capacity=4, alpha=0.0, epsilon=0.0, init_max_error=0.0, seed=1
    )
    zero_init.append_all([experience(t) for t in range(4)])
    experiences, info = zero_init.sample(num_samples=4)
    np.testing.assert_array_equal(info["weights"], 1.0)


def zeroed(capacity: int, n: int, **kwargs: Any) -> ProportionalPrioritizedReplayBuffer:
    buffer = ProportionalPrioritizedReplayBuffer(capacity=capacity, epsilon=0.0, seed=2, **kwargs)
    buffer.append_all([experience(t) for t in range(n)])
    buffer.sample_indices(list(range(len(buffer))))
    buffer.update_priorities(np.zeros(len(buffer)))
    return buffer


@pytest.mark.parametrize("capacity", [1, 2, 3, 4, 5, 7, 8, 12])
def test_all_zero_priorities_draw_nnabla_rls_leaf(capacity: int) -> None:
    """The slot every draw takes, from nnabla-rl's descent; appended numbers wrap the ring."""
    leaf = {1: 0, 2: 0, 3: 1, 4: 0, 5: 3, 7: 1, 8: 0, 12: 4}[capacity]  # 2**ceil(log2 c) - c
    for n in (capacity, capacity + 3):  # full, and wrapped (slot t % capacity holds number t)
        buffer = zeroed(capacity, n)
        experiences, info = buffer.sample(num_samples=min(3, capacity))
        held = [t for t in range(n - capacity, n) if t % capacity == leaf]
        assert numbers(experiences) == held * len(experiences)
        assert np.isnan(info["weights"]).all()  # (0 / 0) ** -beta
        buffer.update_priorities(np.zeros(len(experiences)))


def test_all_zero_priorities_with_the_leaf_out_of_reach() -> None:
    """nnabla-rl re-draws a position too close to the newest for num_steps, and its all-zero
    tree gives the same slot every time: it never ends. Here that is a RuntimeError."""
    buffer = zeroed(4, 4)  # leaf 0 holds the oldest experience: num_steps 4 still fits
    experiences, _ = buffer.sample(num_samples=2, num_steps=4)
    assert numbers(experiences[0]) == [0, 0]
    buffer.update_priorities([0.0, 0.0])
    wrapped = zeroed(4, 7)  # slot 0 holds number 4, position 1: num_steps 4 does not fit
    with pytest.raises(RuntimeError, match="for ever"):
        wrapped.sample(num_samples=1, num_steps=4)
    experiences, _ = wrapped.sample(num_samples=1, num_steps=3)  # position 1 fits 3 steps
    assert numbers(experiences[0]) == [4]


@pytest.mark.parametrize("method", ["buffer_max", "batch_max"])
def test_one_zero_priority_in_the_min_tree(method: str) -> None:
    """epsilon=0 and one zero error: nnabla-rl's min tree holds that 0, so with "buffer_max"
    every weight is (p / 0) ** -beta = inf ** -beta = 0; "batch_max" divides by the batch's
    smallest priority, which is positive (a zero priority is not drawn while others are)."""
    alpha, beta = 0.5, 0.4
    buffer = ProportionalPrioritizedReplayBuffer(
        capacity=4, alpha=alpha, beta=beta, betasteps=10**18, epsilon=0.0, seed=3,
        normalization_method=method,
    )  # fmt: skip
    buffer.append_all([experience(t) for t in range(4)])
    errors = np.array([0.5, 0.0, 1.0, 0.25])
    buffer.sample_indices([0, 1, 2, 3])
    buffer.update_priorities(errors)
    experiences, info = buffer.sample(num_samples=4)
    drawn = numbers(experiences)
    assert 1 not in drawn
    masses = errors[drawn] ** alpha
    want = np.zeros(4) if method == "buffer_max" else (masses / masses.min()) ** -beta
    np.testing.assert_allclose(info["weights"][:, 0], want)
    # the zero leaves the ring: the buffer-wide minimum is positive again
    buffer.update_priorities(errors[drawn])
    buffer.append_all([experience(t) for t in range(4, 6)])  # drops numbers 0 and 1
    _, info = buffer.sample_indices([0, 1])  # numbers 2 and 3
    masses = np.array([1.0, 0.25, 1.0, 1.0]) ** alpha  # 2, 3, then two appended at the max 1.0
    np.testing.assert_allclose(info["weights"][:, 0], (masses[:2] / masses.min()) ** -beta)


def test_rank_based_draws_are_prioritized_before_the_first_sort_interval() -> None:
    """nnabla-rl's rank-based buffer ranks by its max-heap from the first sample on (a heap is
    roughly sorted at all times), long before sort_interval (1000000 by default) comes: its
    draws favour large errors at once. The front-end re-sorts its snapshot whenever the buffer
    has more than doubled since the last one, so its draws follow P(i) ∝ rank(i) ** -alpha
    there too, not a uniform law."""
    n, alpha = 16, 0.7
    buffer = RankBasedPrioritizedReplayBuffer(capacity=64, alpha=alpha, seed=9)  # defaults
    buffer.append_all([experience(t) for t in range(n)])
    errors = np.linspace(0.05, 0.8, n)  # distinct: rank 1 is the newest (largest error)
    buffer.sample_indices(list(range(n)))
    buffer.update_priorities(errors)
    masses = np.arange(n, 0, -1, dtype=np.float64) ** -alpha  # rank n .. 1
    counts: Counter[int] = Counter()
    for _ in range(400):
        experiences, _ = buffer.sample(num_samples=8)
        counts.update(numbers(experiences))
        buffer.update_priorities(errors[numbers(experiences)])
    observed = np.array([counts[t] for t in range(n)])
    assert chisquare(observed, masses / masses.sum() * observed.sum()).pvalue > 1e-3
    # the buffer grows past twice its last sorted size: new experiences are ranked again
    buffer.append_all([experience(t) for t in range(n, 3 * n)])
    _, info = buffer.sample_indices(list(range(3 * n)))
    buffer.update_priorities(np.concatenate([errors, np.full(2 * n, 0.01)]))
    experiences, info = buffer.sample(num_samples=8)  # re-sorted: 48 > 2 * 16
    assert np.unique(info["weights"]).size > 1  # ranks differ, so do the weights
