"""keras-gym's ExperienceReplayBuffer with a negative ``bootstrap_n``, as the seed runs it.

The seed (``shared/seeds/002``, ``keras_gym.caching.experience_replay``) checks nothing: with
``bootstrap_n = -m`` its ring has ``capacity - m`` slots (``np.zeros((capacity + bootstrap_n,
...))``), ``len()`` is ``max(0, num_transitions + m)``, and ``sample()`` reads an empty window
``ls = j + np.arange(-m)`` (``Rn = 0``, never ``done``, so ``In = np.power([gamma], -m)``) and
``S_next``/``A_next`` at ``ks = js - m``: the stack ``m`` steps *before* ``S``. It rejects a
draw only where a slot of ``js[:-1]`` or ``ks`` holds a larger episode id. Where ``ks`` does not
hold step ``t - m`` of ``t``'s episode it returns another step (a slot never written, a newer
step past the overwrite boundary, the previous episode's step); the front-end draws again
there (deliberate differences 1, 2, 3, 6 of docs/migrating/keras_gym.md). Everywhere else the
batches are the seed's, bit for bit (``KerasGymReference`` is the seed's code, transcribed).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlreplay.compat.keras_gym import ExperienceReplayBuffer
from rlreplay.compat.keras_gym.caching.experience_replay import SampleConstructionError
from tests.compat.test_keras_gym_reference import Env, KerasGymReference, assert_same, feed


def episode_of(episodes: list[tuple[int, bool]]) -> list[int]:
    """The episode index of each global step ``t`` (``feed`` stores frame ``t + 1``)."""
    return [e for e, (length, _) in enumerate(episodes) for _ in range(length)]


def last_frames(x: np.ndarray, k: int) -> np.ndarray:
    """The newest frame's value (``t + 1``) of each row of ``S`` or ``S_next``."""
    out: np.ndarray = x[..., -1].reshape(x.shape[0], -1)[:, 0] if k > 1 else x[:, 0]
    return out.astype(np.int64)


def backward_rows(batch: tuple[np.ndarray, ...], k: int, m: int, eps: list[int]) -> np.ndarray:
    """Rows whose ``S_next`` is step ``t - m`` of the episode of ``S``'s step ``t``."""
    t, src = last_frames(batch[0], k) - 1, last_frames(batch[4], k) - 1
    same = [s >= 0 and eps[s] == eps[u] for u, s in zip(t.tolist(), src.tolist(), strict=True)]
    out: np.ndarray = (src == t - m) & np.array(same, bool)
    return out


def check_against_seed(
    episodes: list[tuple[int, bool]], m: int, k: int, capacity: int, seed: int
) -> None:
    """Each batch is the seed's while the seed's rows are all well defined (the random
    streams part at the seed's first other row, as the front-end draws again there); every
    row of the front-end's is one: ``Rn = 0``, ``In = gamma**-m``, ``S_next`` ``m`` steps back.
    """
    kw = dict(batch_size=2, bootstrap_n=-m, gamma=0.5, random_seed=seed)
    ours, ref = (
        ExperienceReplayBuffer(Env(k), capacity, **kw),
        KerasGymReference(Env(k), capacity, **kw),
    )
    feed([ours, ref], episodes, k)
    eps = episode_of(episodes)
    assert len(ours) == len(ref)
    parted = len(ours) < 2
    for _ in range(3):
        if parted:
            break
        expected = ref.sample()
        try:
            got = ours.sample()
        except SampleConstructionError:
            assert not backward_rows(expected, k, m, eps).all()
            return
        assert backward_rows(got, k, m, eps).all()
        np.testing.assert_array_equal(got[2], np.zeros(2))
        np.testing.assert_array_equal(got[3], np.full(2, 0.5**-m))
        if not backward_rows(expected, k, m, eps).all():
            parted = True  # the seed kept a draw the front-end draws again
        else:
            assert_same(got, expected, exact=True)


@settings(max_examples=50, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 6), min_size=1, max_size=8),
    m=st.integers(1, 3),
    k=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_same_batches_as_the_seed_before_wrap_around(
    lengths: list[int], m: int, k: int, seed: int
) -> None:
    check_against_seed([(n, True) for n in lengths], m, k, 100, seed)


@settings(max_examples=50, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 5), min_size=4, max_size=12),
    m=st.integers(1, 3),
    k=st.integers(1, 3),
    capacity=st.integers(12, 16),
    seed=st.integers(0, 2**16),
)
def test_same_batches_as_the_seed_after_wrap_around(
    lengths: list[int], m: int, k: int, capacity: int, seed: int
) -> None:
    # Episodes shorter than the ring (capacity - m >= 9 slots): the seed's S stacks are right.
    check_against_seed([(n, True) for n in lengths], m, k, capacity, seed)


def test_one_long_episode_is_the_seeds_state_m_steps_back() -> None:
    # capacity 10, bootstrap_n=-2: the seed's ring has 8 slots and len() = 8 + 2 = 10.
    buf = ExperienceReplayBuffer(Env(1), 10, batch_size=4, bootstrap_n=-2, random_seed=4)
    ref = KerasGymReference(Env(1), 10, batch_size=4, bootstrap_n=-2, random_seed=4)
    for t in range(8):
        for b in (buf, ref):
            b.add(np.full(2, t + 1.0, np.float32), t % 3, 1.0, t == 7, 1)
    assert len(buf) == len(ref) == 10
    S, A, Rn, In, S_next, A_next = got = buf.sample()
    np.testing.assert_array_equal(S_next[:, 0], S[:, 0] - 2)
    np.testing.assert_array_equal(A_next.argmax(axis=1), (S[:, 0].astype(int) - 3) % 3)
    np.testing.assert_array_equal(Rn, np.zeros(4))  # the window is empty, even at the done step
    np.testing.assert_array_equal(In, np.power([0.99], -2).repeat(4))
    assert (S[:, 0] >= 3).all()  # steps 0 and 1 have no step 2 back in the episode
    # seed 4: the seed draws steps 2, 6, 7, 5 (frames 3, 7, 8, 6), all with a step 2 back
    assert_same(got, ref.sample(), exact=True)
    np.testing.assert_array_equal(A, np.eye(3)[(S[:, 0].astype(int) - 1) % 3])


def test_a_step_with_nothing_m_steps_back_is_drawn_again() -> None:
    # One add and bootstrap_n=-2: len() = 1 + 2 = 3 passes the size check; the seed returns
    # S_next from the ring slot -2 % 8, never written (np.empty memory), every time. The
    # front-end draws again and raises the seed's own error for a batch it cannot build.
    buf = ExperienceReplayBuffer(Env(1), 10, batch_size=3, bootstrap_n=-2, random_seed=0)
    buf.add(np.ones(2, np.float32), 0, 1.0, False, 1)
    assert len(buf) == 3
    with pytest.raises(RuntimeError, match=r"couldn't construct valid sample.*bootstrap_n=-2"):
        buf.sample()


def test_ring_sizes_fail_at_the_first_add_as_the_seeds() -> None:
    # capacity + bootstrap_n < 0: np.zeros((-1, ...)) raises ValueError; == 0: IndexError.
    buf = ExperienceReplayBuffer(Env(1), 2, bootstrap_n=-3)
    with pytest.raises(ValueError, match="negative dimensions"):
        buf.add(np.zeros(2), 0, 0.0, False, 0)
    with pytest.raises(IndexError):
        ExperienceReplayBuffer(Env(1), 2, bootstrap_n=-2).add(np.zeros(2), 0, 0.0, False, 0)
