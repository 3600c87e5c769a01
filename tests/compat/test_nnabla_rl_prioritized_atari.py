"""nnabla-rl's prioritized Atari buffers (issue 13).

nnabla-rl's ``replay_buffers.memory_efficient_atari_buffer`` module has
``ProportionalPrioritizedAtariBuffer`` and ``RankBasedPrioritizedAtariBuffer``: the prioritized
buffers (``ProportionalPrioritizedReplayBuffer`` / ``RankBasedPrioritizedReplayBuffer``, same
arguments plus ``stacked_frames=4``) whose experiences are stored as
``MemoryEfficientAtariBuffer`` stores them (seed 003: one frame per experience, cast to uint8,
stacks of ``stacked_frames`` frames normalised to [0, 1] rebuilt at sample time). So the
experience at a position is the one ``MemoryEfficientAtariBuffer`` gives back there, and the
draws, weights and updates are the prioritized buffers'.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
from scipy.stats import chisquare

import rlreplay.compat.nnabla_rl.replay_buffers as RB
from rlreplay.compat.nnabla_rl.replay_buffers.memory_efficient_atari_buffer import (
    MemoryEfficientAtariBuffer,
    ProportionalPrioritizedAtariBuffer,
    RankBasedPrioritizedAtariBuffer,
)
from rlreplay.compat.nnabla_rl.replay_buffers.prioritized_replay_buffer import (
    ProportionalPrioritizedReplayBuffer,
    RankBasedPrioritizedReplayBuffer,
)

P_CHI = 1e-3
FRAME = (84, 84)  # the only frame nnabla-rl 0.16.0 stores (it asserts s.shape == (84, 84))
CLASSES = [ProportionalPrioritizedAtariBuffer, RankBasedPrioritizedAtariBuffer]


def atari_experiences(n: int, *, k: int = 4, episode: int = 7, seed: int = 0) -> list[Any]:
    """Experiences of episodes of ``episode`` steps, states as a FrameStack wrapper shows them."""
    rng = np.random.default_rng(seed)
    frames = rng.integers(0, 256, size=(n + 1, *FRAME)).astype(np.float64)

    def stack(u: int, start: int) -> np.ndarray:
        return np.stack([frames[max(j, start)] for j in range(u - k + 1, u + 1)]) / 255.0

    out = []
    for t in range(n):
        start = t - t % episode  # the episode's first step
        done = t % episode == episode - 1
        s, s_next = stack(t, start), stack(t + 1, start)
        out.append((s, t % 3, float(t), 0.0 if done else 1.0, s_next, {"t": t}))
    return out


def same_experience(a: Any, b: Any) -> bool:
    return (
        all(np.array_equal(x, y) and x.dtype == y.dtype for x, y in ((a[0], b[0]), (a[4], b[4])))
        and a[1:4] == b[1:4]
        and a[5] is b[5]
    )


def test_names_module_paths_and_bases_as_nnabla_rl() -> None:
    assert RB.ProportionalPrioritizedAtariBuffer is ProportionalPrioritizedAtariBuffer
    assert RB.RankBasedPrioritizedAtariBuffer is RankBasedPrioritizedAtariBuffer
    assert issubclass(ProportionalPrioritizedAtariBuffer, ProportionalPrioritizedReplayBuffer)
    assert issubclass(RankBasedPrioritizedAtariBuffer, RankBasedPrioritizedReplayBuffer)
    with pytest.raises(ValueError, match="greater than 0"):
        ProportionalPrioritizedAtariBuffer(capacity=0)
    with pytest.raises(AssertionError):  # nnabla-rl asserts the method
        ProportionalPrioritizedAtariBuffer(capacity=5, normalization_method="nope")


@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize("k", [1, 4])
def test_experiences_are_the_atari_buffers_through_ring_wraps(cls: Any, k: int) -> None:
    exps = atari_experiences(40, k=k)
    buffer = cls(capacity=9, stacked_frames=k, seed=0)
    reference = MemoryEfficientAtariBuffer(capacity=9, stacked_frames=k, seed=0)
    for e in exps:
        buffer.append(e)
        reference.append(e)
        for i in range(len(buffer)):
            assert same_experience(buffer[i], reference[i])
    for _ in range(5):
        experiences, info = buffer.sample(num_samples=6)
        assert info["weights"].shape == (6, 1) and info["weights"].dtype == np.float64
        for e in experiences:
            want = reference[int(e[2]) - (len(exps) - 9)]
            assert same_experience(e, want)
            assert e[0].shape == (k, *FRAME) and e[0].dtype == np.float32
        buffer.update_priorities(np.linspace(0.1, 1.0, 6))


@pytest.mark.parametrize("cls", CLASSES)
def test_draws_follow_the_priorities(cls: Any) -> None:
    """The prioritized buffers' draws: a proportional law, or one draw per rank segment."""
    n = 6
    extra = {} if cls is ProportionalPrioritizedAtariBuffer else {"sort_interval": 1}
    buffer = cls(capacity=n, alpha=1.0, error_clip=None, seed=1, **extra)
    buffer.append_all(atari_experiences(n))
    buffer.sample_indices(list(range(n)))
    errors = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    buffer.update_priorities(errors)
    counts: Counter[int] = Counter()
    for _ in range(500):
        experiences, _ = buffer.sample(num_samples=6)
        counts.update(int(e[2]) for e in experiences)
        buffer.update_priorities(errors[[int(e[2]) for e in experiences]])
    if cls is ProportionalPrioritizedAtariBuffer:
        p = errors / errors.sum()
    else:  # num_samples == len: nnabla-rl's n segments are one heap position each
        assert [counts[i] for i in range(n)] == [500] * n
        return
    observed = [counts[i] for i in range(n)]
    assert chisquare(observed, p * sum(observed)).pvalue > P_CHI


@pytest.mark.parametrize("cls", CLASSES)
def test_frames_quantised_as_nnabla_rl(cls: Any) -> None:
    """nnabla-rl stores ``(s[-1] * 255.0).astype(np.uint8)``: NumPy's truncating cast."""
    buffer = cls(capacity=4, stacked_frames=2, seed=0)
    s = np.full((2, *FRAME), 0.999)
    buffer.append((s, np.int8(1), 1, 1.0, s, {}))
    got = buffer[0]
    assert np.all(got[0] == np.float32(254 / 255)) and type(got[1]) is np.int8 and got[2] == 1
