"""Every nnabla-rl buffer draws from nnabla-rl's global generator unless given ``seed=``.

nnabla-rl's buffers and ``BufferIterator`` draw every random number from the module attribute
``nnabla_rl.random.drng`` (``rl.random.drng.choice`` in ``ReplayBuffer._random_indices`` and
``ReplacementSamplingReplayBuffer.sample``, ``rl.random.drng.shuffle`` in
``BufferIterator.reset``, ``rl.random.drng`` in the prioritized draws and the hindsight
relabelling), and ``nnabla_rl.utils.reproductions.set_global_seed(seed)`` replaces it with a
seeded generator. So after the same ``set_global_seed`` the same calls give the same draws,
whichever buffer makes them; ``seed=`` (an rlreplay addition) gives a buffer a generator of its
own that leaves ``drng`` alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rlreplay.compat.nnabla_rl.random as rl_random
import rlreplay.compat.nnabla_rl.replay_buffers as RB
from rlreplay.compat.nnabla_rl.replay_buffer import ReplayBuffer
from rlreplay.compat.nnabla_rl.utils.reproductions import set_global_seed


def experience(t: int) -> tuple[Any, ...]:
    s = np.full(2, t, np.float32)
    return (s, np.array([t % 2]), float(t), float(t % 5 != 4), s + 1, {"t": t})


def goal_experience(t: int) -> tuple[Any, ...]:
    """A goal-conditioned experience (episodes of 5 steps)."""
    g = np.full(2, 9.0)
    s = (np.full(3, float(t)), g, np.full(2, float(t)))
    s_next = (np.full(3, t + 1.0), g, np.full(2, t + 1.0))
    return (s, np.zeros(1), -1.0, float(t % 5 != 4), s_next, {})


def atari_experience(t: int) -> tuple[Any, ...]:
    s = np.full((4, 84, 84), (t % 200) / 255.0)  # 0.16.0 stores (84, 84) frames only
    return (s, t % 4, 1.0, float(t % 5 != 4), np.roll(s, -1, axis=0), {})


def hindsight(**kw: Any) -> Any:
    return RB.HindsightReplayBuffer(lambda a, g, i: -1.0, hindsight_prob=0.5, **kw)


# (factory, experience maker) of every buffer that draws at random
CASES: dict[str, tuple[Callable[..., Any], Callable[[int], Any]]] = {
    "ReplayBuffer": (lambda **kw: ReplayBuffer(capacity=50, **kw), experience),
    "ReplacementSampling": (
        lambda **kw: RB.ReplacementSamplingReplayBuffer(capacity=50, **kw),
        experience,
    ),
    "Proportional": (
        lambda **kw: RB.ProportionalPrioritizedReplayBuffer(capacity=50, **kw),
        experience,
    ),
    "RankBased": (
        lambda **kw: RB.RankBasedPrioritizedReplayBuffer(capacity=50, **kw),
        experience,
    ),
    "PrioritizedRankVariant": (
        lambda **kw: RB.PrioritizedReplayBuffer(capacity=50, variant="rank_based", **kw),
        experience,
    ),
    "Hindsight": (hindsight, goal_experience),
    "Atari": (
        lambda **kw: RB.MemoryEfficientAtariBuffer(capacity=50, **kw),
        atari_experience,
    ),
}


def draws(factory: Callable[..., Any], make: Callable[[int], Any], **kw: Any) -> list[Any]:
    """What three samples of 6 (with priority updates in between) give back, as numbers."""
    buffer = factory(**kw)
    buffer.append_all([make(t) for t in range(40)])
    out: list[Any] = []
    for _ in range(3):
        experiences, info = buffer.sample(num_samples=6)
        out.append([repr(e[0]) + repr(e[2]) for e in experiences])
        out.append(np.asarray(info["weights"]).tolist())
        buffer.update_priorities(np.linspace(0.1, 2.0, 6))
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_set_global_seed_reaches_every_buffer(name: str) -> None:
    factory, make = CASES[name]
    set_global_seed(21)
    first = draws(factory, make)
    state = rl_random.drng.bit_generator.state
    assert state != np.random.default_rng(21).bit_generator.state  # drew from drng
    set_global_seed(21)
    assert draws(factory, make) == first  # same global seed: same draws
    set_global_seed(22)
    assert draws(factory, make) != first


@pytest.mark.parametrize("name", sorted(CASES))
def test_seed_keyword_gives_a_generator_of_its_own(name: str) -> None:
    factory, make = CASES[name]
    set_global_seed(0)
    state = rl_random.drng.bit_generator.state
    first = draws(factory, make, seed=4)
    assert rl_random.drng.bit_generator.state == state  # drng untouched
    set_global_seed(99)
    assert draws(factory, make, seed=4) == first


def test_replacement_sampling_draws_drng_choice_with_replacement() -> None:
    """nnabla-rl: ``rl.random.drng.choice(max_index, size=num_samples, replace=True)``."""
    buffer = RB.ReplacementSamplingReplayBuffer()
    objects = list(range(7))
    buffer.append_all(objects)
    set_global_seed(3)
    drawn, _ = buffer.sample(num_samples=12, num_steps=2)
    want = np.random.default_rng(3).choice(6, size=12, replace=True)
    assert drawn[0] == [objects[i] for i in want]
    assert drawn[1] == [objects[i + 1] for i in want]


def test_buffer_iterator_shuffles_with_numpys_global_generator() -> None:
    """nnabla-rl 0.16's ``BufferIterator.reset``: ``np.random.shuffle(self._indices)``."""
    buffer = ReplayBuffer()
    buffer.append_all(list(range(9)))
    set_global_seed(8)  # seeds np.random too, as nnabla-rl's
    iterator = RB.BufferIterator(buffer, batch_size=9, shuffle=True, repeat=True)
    reference = np.random.RandomState(8)
    order = np.arange(9)
    reference.shuffle(order)
    assert next(iterator)[0] == order.tolist()
    own = RB.BufferIterator(buffer, batch_size=9, seed=5)
    state = np.random.get_state()[1].copy()  # noqa: NPY002
    next(own)
    own.reset()
    assert (np.random.get_state()[1] == state).all()  # noqa: NPY002


def test_trajectory_buffer_draws_from_drng() -> None:
    buffer = RB.TrajectoryReplayBuffer()
    for k in range(6):
        buffer.append_trajectory([experience(10 * k + t) for t in range(k + 2)])
    set_global_seed(5)
    a = buffer.sample_trajectories_portion(num_samples=4, portion_length=2)[0]
    set_global_seed(5)
    b = buffer.sample_trajectories_portion(num_samples=4, portion_length=2)[0]
    assert [[e[2] for e in t] for t in a] == [[e[2] for e in t] for t in b]


def test_trajectory_portions_are_nnabla_rls_draws() -> None:
    """nnabla-rl 0.16.0: ``drng.choice(n, size=k, replace=True, p=lengths / total)``, then per
    drawn trajectory, in order, ``drng.choice(length - portion_length + 1, replace=False)``."""
    buffer = RB.TrajectoryReplayBuffer()
    lengths = [2, 5, 3, 7]
    t = 0
    for length in lengths:
        buffer.append_trajectory([experience(t + i) for i in range(length)])
        t += length
    set_global_seed(11)
    portions, _ = buffer.sample_trajectories_portion(num_samples=6, portion_length=2)
    reference = np.random.default_rng(11)
    p = np.asarray(lengths) / np.sum(lengths)
    chosen = reference.choice(4, size=6, replace=True, p=p)
    starts = np.cumsum(lengths) - lengths
    for portion, k in zip(portions, chosen.tolist(), strict=True):
        first = int(starts[k]) + int(reference.choice(lengths[k] - 1, replace=False))
        assert [e[2] for e in portion] == [experience(first)[2], experience(first + 1)[2]]
