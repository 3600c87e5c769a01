"""Rows the front-end once built or drew unlike the seed's keras-gym (found by the machines).

``S_next``/``A_next`` of ``done`` windows, also where step ``t + n`` is not added:

The seed's ``sample()`` (``shared/seeds/002``) reads ``ks = j + bootstrap_n - arange(k - 1, -1,
-1)`` modulo the ring whether or not the window met a ``done`` (``In = 0`` masks the row, it is
returned all the same). A step ``t + bootstrap_n`` not added yet wraps to a slot holding the
oldest step; ``if self._e[ks[~i]] < ep: ks[~i] = ks[~i + 1]`` pads by episode id. The
front-end returns the same (``docs/migrating/keras_gym.md``, fix 7: only slots never written,
``np.empty`` in keras-gym, read zeros).

Draws at the overwrite boundary: the seed rejects a draw only when a slot of ``js[:-1]`` holds
a larger episode id; one holding the same id (a new episode after a ``done``, fix 4) is kept,
and the front-end keeps it too, with the frames the agent saw (fix 2).
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rlreplay.compat.keras_gym import ExperienceReplayBuffer
from tests.compat.test_keras_gym_reference import KerasGymReference


class Env:
    def __init__(self, num_frames: int) -> None:
        self.action_space = gymnasium.spaces.Discrete(3)
        self.num_frames = num_frames


class FixedDraw:
    """A ``RandomState`` stand-in whose ``randint`` draws slot ``j`` every time."""

    def __init__(self, j: int) -> None:
        self.j = j

    def randint(self, high: int, size: int | None = None) -> Any:
        assert 0 <= self.j < high
        return self.j if size is None else np.full(size, self.j)


def state(g: int, k: int, first: int = 0) -> np.ndarray[Any, Any]:
    """The stack the agent saw at step ``g`` of an episode that began at step ``first``:
    frames name their step (``g + 1``), and repeat the first one before it."""
    steps = np.maximum(np.arange(g - k + 1, g + 1), first) + 1
    return np.stack([steps, -steps]).astype(np.float32)[np.newaxis]


def test_done_window_at_the_newest_step_reads_the_wrapped_slots() -> None:
    """capacity=3, bootstrap_n=2, num_frames=2: 5 slots. Episode 1 is steps 0-1 (done), episode
    2 steps 2-5 (done). Slot 0 holds step 5; its window is done at once, and ``ks`` = slots 1,
    2 hold steps 1 (episode 1 < 2: replaced by its successor) and 2: ``S_next`` is frames
    ``[3, 3]``, ``A_next`` step 2's action (2)."""
    buf = ExperienceReplayBuffer(Env(2), 3, batch_size=1, bootstrap_n=2, gamma=0.5)
    for g in range(6):
        buf.add(state(g, 2), g % 3, 1.0, g in (1, 5), 1 if g < 2 else 2)
    buf.random = FixedDraw(0)  # type: ignore[assignment]
    S, _, Rn, In, S_next, A_next = buf.sample()
    np.testing.assert_array_equal(S[0, 0], [[5, 6], [-5, -6]])
    np.testing.assert_array_equal(Rn, [1.0])
    np.testing.assert_array_equal(In, [0.0])
    np.testing.assert_array_equal(S_next[0, 0], [[3, 3], [-3, -3]])
    np.testing.assert_array_equal(A_next, [[0, 0, 1]])


def test_a_slot_never_written_reads_zeros() -> None:
    """Before the ring comes round (5 slots, 3 adds), ``ks`` of the newest step reads slots 3 and
    4, never written: keras-gym's ``np.empty`` frames and ``np.zeros`` actions; zeros here."""
    buf = ExperienceReplayBuffer(Env(2), 3, batch_size=1, bootstrap_n=2, gamma=0.5)
    for g in range(3):
        buf.add(state(g, 2), g % 3, 1.0, g == 2, 7)
    buf.random = FixedDraw(2)  # type: ignore[assignment]
    _, _, _, In, S_next, A_next = buf.sample()
    np.testing.assert_array_equal(In, [0.0])
    np.testing.assert_array_equal(S_next, np.zeros((1, 1, 2, 2)))
    np.testing.assert_array_equal(A_next, np.zeros((1, 3)))


@settings(max_examples=40, deadline=None)
@given(
    episodes=st.lists(
        st.tuples(st.integers(1, 6), st.booleans(), st.booleans()), min_size=1, max_size=6
    ),
    n=st.integers(1, 3),
    k=st.integers(1, 3),
    capacity=st.integers(1, 8),
)
def test_every_done_row_is_keras_gyms(
    episodes: list[tuple[int, bool, bool]], n: int, k: int, capacity: int
) -> None:
    """Every slot drawn in turn: where both keep the draw and build the same ``S`` (the rows
    the front-end's other fixes leave alone), a done row's ``S_next``/``A_next`` are the
    seed's, bit for bit (its state cache transcribed as zeros, so unwritten slots agree)."""
    ours = ExperienceReplayBuffer(Env(k), capacity, batch_size=1, bootstrap_n=n, gamma=0.5)
    ref = KerasGymReference(Env(k), capacity, batch_size=1, bootstrap_n=n, gamma=0.5)
    g, episode_id, first, ended = 0, 0, 0, True
    for length, done, same_id in episodes:
        episode_id += 0 if same_id else 1
        if not same_id or ended:  # a new id, or a done ended the episode (fix 4)
            first = g
        for t in range(length):
            s = state(g, k, first)
            ends = done and t == length - 1
            for buf in (ours, ref):
                buf.add(s if k > 1 else s[0, :, -1], g % 3, float(g), ends, episode_id)
            g, ended = g + 1, ends
    if len(ref) < 1:
        return
    for j in range(min(g, capacity + n)):
        ref.random, ours.random = FixedDraw(j), FixedDraw(j)  # type: ignore[assignment]
        try:
            want, got = ref.sample(), ours.sample()
        except RuntimeError:
            continue
        if want[3][0] != 0 or not np.array_equal(want[0], got[0]):
            continue
        np.testing.assert_array_equal(got[4], want[4], err_msg="S_next")
        np.testing.assert_array_equal(got[5], want[5], err_msg="A_next")


def test_a_stack_over_a_newer_episode_with_the_same_id_is_kept() -> None:
    """capacity=6, bootstrap_n=0, num_frames=2: step 0 ends episode id 1 (done), steps 1-5 are a
    new episode with the same id 1. Slot 0's stack wraps to slot 5 (step 5, id 1): the seed
    rejects only ``> ep``, so the draw is kept (keras-gym stacks frames 6 and 1 there); the
    front-end returns step 0's own stack, its first frame repeated (fix 2)."""
    buf = ExperienceReplayBuffer(Env(2), 6, batch_size=1, bootstrap_n=0, gamma=0.5)
    ref = KerasGymReference(Env(2), 6, batch_size=1, bootstrap_n=0, gamma=0.5)
    for g in range(6):
        for b in (buf, ref):
            b.add(state(g, 2, 0 if g == 0 else 1), g % 3, 1.0, g == 0, 1)
    buf.random, ref.random = FixedDraw(0), FixedDraw(0)  # type: ignore[assignment]
    np.testing.assert_array_equal(ref.sample()[0][0, 0], [[6, 1], [-6, -1]])  # the seed's
    S, A, Rn, In, S_next, A_next = buf.sample()
    np.testing.assert_array_equal(S[0, 0], [[1, 1], [-1, -1]])
    np.testing.assert_array_equal(A, [[1, 0, 0]])
    np.testing.assert_array_equal(Rn, [0.0])  # bootstrap_n=0: an empty window, In = gamma**0
    np.testing.assert_array_equal(In, [1.0])
    np.testing.assert_array_equal(S_next, S)  # and ks = js
    np.testing.assert_array_equal(A_next, A)


@settings(max_examples=30, deadline=None)
@given(
    episodes=st.lists(st.tuples(st.integers(1, 4), st.integers(1, 3)), min_size=1, max_size=6),
    n=st.integers(0, 2),
    k=st.integers(2, 3),
    capacity=st.integers(2, 8),
)
def test_draws_kept_as_the_seed_keeps_them_whatever_the_ids(
    episodes: list[tuple[int, int]], n: int, k: int, capacity: int
) -> None:
    """Episodes (each ending ``done``) with ids in any order, larger or smaller than the last:
    every slot whose window is added is kept exactly when the seed keeps it (its
    ``np.any(self._e[js[:-1]] > ep)`` over the ring; fixes 1 and 3 reject nothing here)."""
    ours = ExperienceReplayBuffer(Env(k), capacity, batch_size=1, bootstrap_n=n, gamma=0.5)
    ref = KerasGymReference(Env(k), capacity, batch_size=1, bootstrap_n=n, gamma=0.5)
    g = 0
    for length, episode_id in episodes:
        first = g
        for t in range(length):
            for buf in (ours, ref):
                buf.add(state(g, k, first), g % 3, 1.0, t == length - 1, episode_id)
            g += 1
    M = capacity + n
    for j in range(min(g, M) if len(ref) else 0):
        if n and j + M * ((g - 1 - j) // M) + n > g - 1:
            continue  # step t + n not added: the front-end rejects it (fix 1)
        ref.random, ours.random = FixedDraw(j), FixedDraw(j)  # type: ignore[assignment]
        kept = []
        for buf in (ref, ours):
            try:
                buf.sample()
                kept.append(True)
            except RuntimeError:
                kept.append(False)
        assert kept[0] == kept[1], (j, kept)
