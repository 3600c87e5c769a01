"""keras-gym's ExperienceReplayBuffer front-end: seed behaviour, golden tables, core agreement.

Every step ``t`` of these trajectories carries a frame whose value is ``t + 1`` (0 is a slot
not written yet), so a sampled row names its transition by the last frame of ``S``. The exact
comparison with the seed's keras-gym code (ported) is in ``test_keras_gym_reference``;
keras-gym 0.2.17's own tests are in ``keras_gym_upstream``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlreplay as rr
import rlreplay.compat.keras_gym as km
from rlreplay.compat.keras_gym import ExperienceReplayBuffer, InsufficientCacheError
from rlreplay.compat.keras_gym.base.errors import (
    ActionSpaceError,
    KerasGymError,
    NumpyArrayCheckError,
    SampleConstructionError,
    SpaceError,
)

G = 0.5  # powers of 0.5 are exact, so n-step sums compare exactly


class FakeEnv:
    """keras-gym's buffer reads only ``action_space`` and ``num_frames`` from its env."""

    def __init__(self, action_space: Any, num_frames: int | None = None) -> None:
        self.action_space = action_space
        if num_frames is not None:
            self.num_frames = num_frames


def discrete(n: int = 3, num_frames: int | None = None) -> FakeEnv:
    return FakeEnv(gymnasium.spaces.Discrete(n), num_frames)


def box(num_frames: int | None = None) -> FakeEnv:
    return FakeEnv(gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32), num_frames)


def state(t: int, k: int) -> np.ndarray:
    """The state added at step ``t``: a (1, 1, k) stack whose last frame is ``t + 1``.

    The earlier frames of the stack are -1: the buffer must ignore them.
    """
    if k == 1:
        return np.full((1, 1), t + 1.0)
    s = np.full((1, 1, k), -1.0)
    s[..., -1] = t + 1
    return s


def one_hot(i: int, n: int = 3) -> np.ndarray:
    return np.eye(n)[i]


# ---------------------------------------------------------------------- a reference model
@dataclass
class Trajectory:
    """Steps ``(done, episode_id)``; reward ``t + 1``, action ``t % 3``, frame ``t + 1``."""

    steps: list[tuple[bool, int]] = field(default_factory=list)

    def feed(self, buf: ExperienceReplayBuffer, k: int) -> None:
        for t, (done, eid) in enumerate(self.steps):
            buf.add(state(t, k), t % 3, float(t + 1), done, eid)

    def expected(self, n: int, k: int, gamma: float) -> dict[int, dict[str, Any]]:
        """keras-gym's valid transitions (no overwriting), keyed by the frame value ``t + 1``.

        An episode starts at the first step, after a done step, and at a change of
        episode_id; a step that is not done and is followed by another episode is a cut. A
        transition is valid when its window ``t .. t+m-1`` ends at a done step (``m <= n``)
        or spans ``n`` steps of which none is a cut and whose bootstrap step ``t + n`` exists.
        """
        T = len(self.steps)
        start = [0] * T
        for t in range(1, T):
            new = self.steps[t - 1][0] or self.steps[t - 1][1] != self.steps[t][1]
            start[t] = t if new else start[t - 1]
        cut = [not self.steps[t][0] and t + 1 < T and start[t + 1] == t + 1 for t in range(T)]

        def frames(u: int, s0: int) -> list[float]:
            return [max(v, s0) + 1.0 for v in range(u - k + 1, u + 1)]

        rows: dict[int, dict[str, Any]] = {}
        for t in range(T):
            rn, done, ok = 0.0, False, True
            for j in range(n):
                if t + j >= T or cut[t + j]:
                    ok = False
                    break
                rn += gamma**j * (t + j + 1)
                if self.steps[t + j][0]:
                    done = True
                    break
            if not ok or (not done and t + n >= T):
                continue
            row: dict[str, Any] = {"S": frames(t, start[t]), "A": t % 3, "Rn": rn, "done": done}
            # keras-gym reads the state and action at t + n even after a done (the next
            # episode's; a slot not written yet reads zeros here): In = 0 masks them
            nxt = [v if v <= T else 0.0 for v in frames(t + n, start[t])]
            row.update(In=0.0 if done else gamma**n, S_next=nxt, A_next=(t + n) % 3)
            row.update(A_next_written=t + n < T)
            rows[t + 1] = row
        return rows


def check_rows(
    out: tuple[np.ndarray, ...], expected: dict[int, dict[str, Any]], k: int
) -> set[int]:
    """Assert every sampled row is a valid transition with the expected content."""
    S, A, Rn, In, S_next, A_next = out
    seen = set()
    for b in range(S.shape[0]):
        frames = S[b].reshape(-1) if k > 1 else S[b].reshape(1)
        key = int(frames[-1])
        assert key in expected, f"sampled an invalid transition (frame {key})"
        row = expected[key]
        seen.add(key)
        assert frames.tolist() == row["S"]
        np.testing.assert_array_equal(A[b], one_hot(row["A"]))
        assert Rn[b] == row["Rn"]
        assert In[b] == row["In"]
        nxt = S_next[b].reshape(-1) if k > 1 else S_next[b].reshape(1)
        assert nxt.tolist() == row["S_next"]
        a_next = one_hot(row["A_next"]) if row["A_next_written"] else np.zeros(3)
        np.testing.assert_array_equal(A_next[b], a_next)
    return seen


def sample_until(buf: ExperienceReplayBuffer, rounds: int) -> list[tuple[np.ndarray, ...]]:
    return [buf.sample() for _ in range(rounds)]


# ---------------------------------------------------------------------- import paths
def test_module_paths_mirror_keras_gym() -> None:
    from rlreplay.compat.keras_gym.base import errors
    from rlreplay.compat.keras_gym.caching import experience_replay

    assert km.caching.ExperienceReplayBuffer is ExperienceReplayBuffer
    assert experience_replay.ExperienceReplayBuffer is ExperienceReplayBuffer
    assert errors.InsufficientCacheError is InsufficientCacheError
    assert km.base.errors.NumpyArrayCheckError is NumpyArrayCheckError


def test_errors_are_keras_gym_and_rlreplay_errors() -> None:
    assert issubclass(InsufficientCacheError, KerasGymError)
    assert issubclass(InsufficientCacheError, rr.EmptyBufferError)
    assert issubclass(NumpyArrayCheckError, rr.ShapeError)
    assert issubclass(ActionSpaceError, SpaceError) and issubclass(SpaceError, KerasGymError)
    assert issubclass(ActionSpaceError, rr.ReplayError)
    assert issubclass(ActionSpaceError, ValueError)
    # keras-gym raises a plain RuntimeError("couldn't construct valid sample")
    assert issubclass(SampleConstructionError, RuntimeError)


def test_compat_uses_only_public_core_api() -> None:
    """The front-end reaches the core through public methods only (issue 13)."""
    import pathlib
    import re

    root = pathlib.Path(km.__file__).parent
    for path in root.rglob("*.py"):
        text = path.read_text()
        assert not re.search(r"core\)?\._", text), f"{path}: private core access"


# ---------------------------------------------------------------------- constructor
def test_constructor_defaults_and_attributes() -> None:
    env = discrete()
    buf = ExperienceReplayBuffer(env, 100)
    assert (buf.env, buf.capacity, buf.batch_size, buf.bootstrap_n) == (env, 100, 32, 1)
    assert (buf.gamma, buf.random_seed, buf.num_frames) == (0.99, None, 1)
    assert buf.action_space_is_discrete and not buf.action_space_is_box
    assert buf.num_actions == 3
    assert len(buf) == 0 and not buf


def test_constructor_casts_sizes_like_keras_gym() -> None:
    # keras-gym: self.capacity = int(capacity); self.batch_size = int(batch_size); ...
    buf = ExperienceReplayBuffer(discrete(), 1e6, batch_size=8.0, bootstrap_n=np.int64(3))  # type: ignore[arg-type]
    assert (buf.capacity, buf.batch_size, buf.bootstrap_n) == (1_000_000, 8, 3)
    assert type(buf.capacity) is int
    buf = ExperienceReplayBuffer(discrete(), 2.5, gamma="0.5")  # type: ignore[arg-type]
    assert (buf.capacity, buf.gamma) == (2, 0.5)  # int() and float(), nothing more
    assert ExperienceReplayBuffer(discrete(), 10, gamma=1.5).gamma == 1.5  # keras-gym: no check


def test_constructor_raises_what_keras_gym_raises() -> None:
    with pytest.raises(ValueError):  # int("big")
        ExperienceReplayBuffer(discrete(), "big")  # type: ignore[arg-type]
    with pytest.raises(ValueError):  # np.random.RandomState(-1)
        ExperienceReplayBuffer(discrete(), 10, random_seed=-1)
    # keras-gym checks nothing else: a negative n is taken as it is (test_keras_gym_negative_n)
    assert ExperienceReplayBuffer(discrete(), 10, bootstrap_n=-1).bootstrap_n == -1


def test_n_is_later_keras_gyms_name_for_bootstrap_n() -> None:
    buf = ExperienceReplayBuffer(discrete(), 10, 4, n=3)
    assert buf.n == buf.bootstrap_n == 3
    assert ExperienceReplayBuffer(discrete(), 10, 4, 2).n == 2


def test_num_frames_is_found_through_wrappers() -> None:
    class Env(gymnasium.Env[np.ndarray, np.int64]):
        observation_space = gymnasium.spaces.Box(0, 255, (2, 2, 4), np.uint8)
        action_space = gymnasium.spaces.Discrete(2)
        num_frames = 4

    wrapped = gymnasium.Wrapper(gymnasium.Wrapper(Env()))
    assert not hasattr(wrapped, "num_frames")  # gymnasium wrappers do not forward it
    assert ExperienceReplayBuffer(wrapped, 10).num_frames == 4
    assert ExperienceReplayBuffer(discrete(), 10).num_frames == 1


def test_box_action_space_properties() -> None:
    buf = ExperienceReplayBuffer(box(), 10)
    assert buf.action_space_is_box and not buf.action_space_is_discrete
    with pytest.raises(ActionSpaceError, match="Discrete"):
        _ = buf.num_actions


# ---------------------------------------------------------------------- shapes and dtypes
def test_sample_shapes_discrete_vector_states() -> None:
    buf = ExperienceReplayBuffer(discrete(4), 100, batch_size=5, random_seed=0)
    for t in range(12):
        buf.add(np.full(3, t, np.float32), t % 4, 1.0, t == 11, 0)
    S, A, Rn, In, S_next, A_next = buf.sample()
    assert S.shape == S_next.shape == (5, 3) and S.dtype == S_next.dtype == np.float32
    assert A.shape == A_next.shape == (5, 4) and A.dtype == A_next.dtype == np.float64
    assert Rn.shape == In.shape == (5,) and Rn.dtype == In.dtype == np.float64
    np.testing.assert_array_equal(A.sum(axis=1), 1.0)  # one-hot


def test_sample_shapes_box_actions_keep_their_dtype() -> None:
    buf = ExperienceReplayBuffer(box(), 100, batch_size=6, bootstrap_n=2, random_seed=0)
    for t in range(10):
        buf.add(np.full((2, 2), t, np.uint8), np.array([t, -t], np.float32) / 10, 0.5, False, 0)
    S, A, Rn, In, S_next, A_next = buf.sample()
    assert S.shape == S_next.shape == (6, 2, 2) and S.dtype == np.uint8
    assert A.shape == A_next.shape == (6, 2) and A.dtype == A_next.dtype == np.float32
    assert Rn.shape == In.shape == (6,)
    t = S[:, 0, 0].astype(int)
    np.testing.assert_allclose(A, np.stack([t, -t], 1) / 10, rtol=1e-6)
    np.testing.assert_allclose(A_next, np.stack([t + 2, -(t + 2)], 1) / 10, rtol=1e-6)
    np.testing.assert_array_equal(S_next[:, 0, 0], t + 2)


@pytest.mark.parametrize("frame_shape", [(3, 2), (3, 2, 3)])
def test_frame_stacks_are_stored_as_last_frames(frame_shape: tuple[int, ...]) -> None:
    buf = ExperienceReplayBuffer(discrete(num_frames=4), 100, batch_size=8, random_seed=0)
    for t in range(20):
        s = np.full((*frame_shape, 4), 255, np.uint8)
        s[..., -1] = t
        buf.add(s, 0, 1.0, False, 0)
    S, _, _, _, S_next, _ = buf.sample()
    assert S.shape == S_next.shape == (8, *frame_shape, 4) and S.dtype == np.uint8
    assert S.flags.c_contiguous
    last = S[(slice(None),) + (0,) * len(frame_shape) + (-1,)].astype(int)
    for b in range(8):
        stack = S[(b,) + (0,) * len(frame_shape)].astype(int)
        # keras-gym repeats the episode's first frame before the episode starts
        np.testing.assert_array_equal(stack, np.maximum(np.arange(last[b] - 3, last[b] + 1), 0))
        nxt = S_next[(b,) + (0,) * len(frame_shape)].astype(int)
        np.testing.assert_array_equal(nxt, np.maximum(np.arange(last[b] - 2, last[b] + 2), 0))


def test_frame_stack_shape_is_checked() -> None:
    # keras-gym: check_numpy_array(s, axis_size=num_frames, axis=-1) raises
    buf = ExperienceReplayBuffer(discrete(num_frames=4), 100)
    with pytest.raises(NumpyArrayCheckError, match=r"size\(s\) 4 along axis -1"):
        buf.add(np.zeros((2, 2, 3)), 0, 0.0, False, 0)
    buf.add(np.zeros((2, 2, 4)), 0, 0.0, False, 0)
    with pytest.raises(ValueError, match="broadcast"):  # self._s[self._i] = s
        buf.add(np.zeros((3, 2, 4)), 0, 0.0, False, 0)


def test_other_stacks_are_stored_whole_as_keras_gym_does() -> None:
    """keras-gym's _extract_last_frame builds NumpyArrayCheckError("expected ndim equal to 3
    or 4") for other stacks but does not raise it: the whole stack is stored as the frame."""
    buf = ExperienceReplayBuffer(discrete(num_frames=2), 100, batch_size=3, random_seed=0)
    for t in range(6):
        buf.add(np.array([[t, t + 0.5]] * 3), 0, 1.0, t == 5, 0)  # shape (3, 2)
    S, _, _, _, S_next, _ = buf.sample()
    assert S.shape == S_next.shape == (3, 3, 2, 2)  # (B, *s.shape, num_frames)
    t = S[:, 0, 0, -1]
    np.testing.assert_array_equal(S[:, 0, 1, -1], t + 0.5)
    np.testing.assert_array_equal(S[:, 0, 0, 0], np.maximum(t - 1, 0))


def test_discrete_actions_are_one_hot_encoded_as_keras_gym_does() -> None:
    """keras-gym's _one_hot_encode_discrete (0.2.17's, where the seed's mixins are not
    printed): a 1-d array of num_actions entries is stored as given; anything else must be an
    int scalar (AssertionError) in range (ValueError from one_hot); a list fails at
    ``a.size`` (AttributeError)."""
    buf = ExperienceReplayBuffer(discrete(3), 100, batch_size=4, random_seed=0)
    actions: list[Any] = [np.int64(1), True, np.array([0.0, 0.0, 1.0]), np.uint8(0), 2, 1]
    for t, a in enumerate(actions):
        buf.add(np.array([t + 1.0]), a, 0.0, t == 5, 0)
    bad: list[tuple[Any, type[Exception]]] = [
        (3, ValueError), (-1, ValueError), (1.0, AssertionError),
        (np.array(0, np.uint8), AssertionError), (np.array([1, 0]), AssertionError),
        ([2], AttributeError), ([0, 1, 0], AttributeError),
    ]  # fmt: skip
    for a, error in bad:
        with pytest.raises(error):
            buf.add(np.zeros(1), a, 0.0, False, 0)
    assert len(buf) == 5
    # True is action 1; the seed's keras-gym draws any stored step (the last one is done)
    expected = {1: 1, 2: 1, 3: 2, 4: 0, 5: 2, 6: 1}
    seen = set()
    for _ in range(5):
        S, A, *_ = buf.sample()
        for b in range(4):
            np.testing.assert_array_equal(A[b], one_hot(expected[int(S[b, 0])]))
            seen.add(int(S[b, 0]))
    assert seen == set(expected)


def test_added_arrays_are_copied() -> None:
    buf = ExperienceReplayBuffer(box(), 100, batch_size=2, random_seed=0)
    s, a = np.zeros(2), np.zeros(2, np.float32)
    for _ in range(3):
        buf.add(s, a, 0.0, False, 0)
        s += 1.0  # the caller reuses its arrays
        a += 1.0
    S, A, *_ = buf.sample()
    np.testing.assert_array_equal(S[:, 0], A[:, 0])
    assert set(S[:, 0].tolist()) <= {0.0, 1.0}


# ---------------------------------------------------------------------- casting (issue 13)
def keras_gym_assign(value: Any, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """What keras-gym stores: ``self._s[self._i] = s`` into its preallocated array."""
    arr = np.zeros((2, *shape), dtype)
    arr[1] = value
    return arr[1]


def test_states_are_cast_as_numpy_assignment_casts() -> None:
    """The first state fixes shape and dtype (keras-gym's _init_cache: ``np.empty(n +
    s.shape, s.dtype)``); later states of any dtype are assigned into it, unsafely."""
    buf = ExperienceReplayBuffer(discrete(), 100, batch_size=4, random_seed=0)
    values: list[Any] = [np.zeros(3, np.uint8), np.zeros(3), [1.7, 2.2, 200.9], 5, (7, 8, 9)]
    for t, s in enumerate(values):
        buf.add(s, 0, 1.0, t == 4, 0)  # float64 zeros, a list, a scalar (broadcast), a tuple
    rows = {tuple(r) for out in sample_until(buf, 10) for r in out[0].tolist()}
    want = {tuple(keras_gym_assign(s, (3,), np.uint8).tolist()) for s in values}
    assert rows == want and buf.sample()[0].dtype == np.uint8


def test_box_actions_rewards_and_done_are_cast_like_keras_gym() -> None:
    """keras-gym: ``self._a = np.zeros(n + space.shape, space.dtype)``, ``self._r`` float,
    ``self._d`` bool; every add assigns into them."""
    env = FakeEnv(gymnasium.spaces.Box(-10, 10, (2,), np.int32))
    buf = ExperienceReplayBuffer(env, 100, batch_size=2, random_seed=0)
    actions: list[Any] = [np.array([1.7, -2.9]), [3.5, 4.0], 2.2]
    rewards: list[Any] = [np.float32(0.5), 1, True]
    dones: list[Any] = [0, np.int8(0), 1.0]
    for t in range(3):
        buf.add(np.array([t + 1.0]), actions[t], rewards[t], dones[t], 0)
    for S, A, Rn, In, _, _ in sample_until(buf, 5):
        assert A.dtype == np.int32 and A.shape == (2, 2)
        for b in range(2):
            t = int(S[b, 0]) - 1  # n = 1: Rn is the step's own reward
            np.testing.assert_array_equal(A[b], keras_gym_assign(actions[t], (2,), np.int32))
            assert Rn[b] == keras_gym_assign(rewards[t], (), float)
            assert In[b] == (0.0 if t == 2 else 0.99)  # done=1.0 is True


def test_python_and_numpy_scalars_as_states() -> None:
    buf = ExperienceReplayBuffer(discrete(), 100, batch_size=2, random_seed=0)
    for t, s in enumerate([np.float64(1.0), 2, 3.5, np.array(4.0)]):
        buf.add(s, 0, 1.0, t == 3, 0)
    S, *_ = buf.sample()
    assert S.shape == (2,) and S.dtype == np.float64  # frames of shape (), as keras-gym


# ---------------------------------------------------------------------- n-step golden table
def test_nstep_golden_table() -> None:
    """n = 3, gamma = 0.5; episode 0 is done after 5 steps, episode 1 runs (5 more steps).

    | t | frame | rewards in window | Rn                     | In    | S_next | A_next |
    |---|-------|-------------------|------------------------|-------|--------|--------|
    | 0 | 1     | 1 2 3             | 1 + 1 + 0.75 = 2.75    | 0.125 | 4      | a_3    |
    | 1 | 2     | 2 3 4             | 2 + 1.5 + 1 = 4.5      | 0.125 | 5      | a_4    |
    | 2 | 3     | 3 4 5 (done)      | 3 + 2 + 1.25 = 6.25    | 0     | -      | -      |
    | 3 | 4     | 4 5 (done)        | 4 + 2.5 = 6.5          | 0     | -      | -      |
    | 4 | 5     | 5 (done)          | 5                      | 0     | -      | -      |
    | 5 | 6     | 6 7 8             | 6 + 3.5 + 2 = 11.5     | 0.125 | 9      | a_8    |
    | 6 | 7     | 7 8 9             | 7 + 4 + 2.25 = 13.25   | 0.125 | 10     | a_9    |
    steps 7..9 have no complete window yet.
    """
    buf = ExperienceReplayBuffer(discrete(), 100, batch_size=7, bootstrap_n=3, gamma=G)
    buf.random_seed = 3  # keras-gym's RandomStateMixin: a new RandomState
    for t in range(10):
        buf.add(np.array([t + 1.0]), t % 3, float(t + 1), t == 4, 0 if t <= 4 else 1)
    assert len(buf) == 7
    table = {
        1: (2.75, 0.125, 4.0, 0),
        2: (4.5, 0.125, 5.0, 1),
        3: (6.25, 0.0, 6.0, 2),  # done: keras-gym's S_next/A_next are step t + 3's anyway
        4: (6.5, 0.0, 7.0, 0),
        5: (5.0, 0.0, 8.0, 1),
        6: (11.5, 0.125, 9.0, 2),
        7: (13.25, 0.125, 10.0, 0),
    }
    seen = set()
    for _ in range(20):
        S, A, Rn, In, S_next, A_next = buf.sample()
        for b in range(7):
            key = int(S[b, 0])
            rn, i_n, s_next, a_next = table[key]
            seen.add(key)
            assert (Rn[b], In[b]) == (rn, i_n)
            np.testing.assert_array_equal(A[b], one_hot((key - 1) % 3))
            assert S_next[b, 0] == s_next
            np.testing.assert_array_equal(A_next[b], one_hot(a_next))
    assert seen == set(table)


# ---------------------------------------------------------------------- episode boundaries
def test_new_episode_id_cuts_the_previous_episode() -> None:
    """Episode 0 (steps 0..5) is never done; episode 1 starts at step 6 (n = 2, k = 2).

    Windows of steps 4 and 5 reach the cut (keras-gym has no state to bootstrap from), and
    step 6's stack repeats its own first frame instead of episode 0's last one.
    """
    traj = Trajectory([(False, 0)] * 6 + [(False, 1)] * 6)
    buf = ExperienceReplayBuffer(discrete(num_frames=2), 100, batch_size=8, bootstrap_n=2)
    traj.feed(buf, 2)
    expected = traj.expected(2, 2, buf.gamma)
    assert sorted(expected) == [1, 2, 3, 4, 7, 8, 9, 10]
    assert expected[7]["S"] == [7.0, 7.0]
    seen = set()
    for out in sample_until(buf, 10):
        seen |= check_rows(out, expected, 2)
    assert seen == set(expected)


def test_done_ends_the_episode_even_if_the_id_stays() -> None:
    traj = Trajectory([(False, 0), (False, 0), (True, 0), (False, 0), (False, 0), (False, 0)])
    buf = ExperienceReplayBuffer(discrete(num_frames=3), 100, batch_size=4, random_seed=1)
    traj.feed(buf, 3)
    expected = traj.expected(1, 3, buf.gamma)
    assert expected[4]["S"] == [4.0, 4.0, 4.0]  # padded with its own first frame
    seen = set()
    for out in sample_until(buf, 10):
        seen |= check_rows(out, expected, 3)
    assert seen == set(expected)


def test_cut_episodes_shorter_than_n_leave_nothing_to_sample() -> None:
    buf = ExperienceReplayBuffer(discrete(), 100, batch_size=2, bootstrap_n=3, random_seed=0)
    for t in range(12):
        buf.add(np.array([t + 1.0]), 0, 1.0, False, t // 2)  # episodes of 2 steps, never done
    assert len(buf) == 9
    with pytest.raises(RuntimeError, match="couldn't construct valid sample"):  # as keras-gym
        buf.sample()


def test_a_window_past_a_cut_into_a_done_is_never_sampled() -> None:
    """keras-gym sums such a window (its cut check runs only when no done was met): Rn would
    mix two episodes' rewards. The front-end rejects it like every window reaching a cut."""
    buf = ExperienceReplayBuffer(discrete(), 100, batch_size=4, bootstrap_n=3, gamma=G,
                                 random_seed=0)  # fmt: skip
    steps = [(False, 1), (False, 1), (True, 2), (False, 3), (False, 3), (False, 3), (True, 3)]
    traj = Trajectory(steps)
    traj.feed(buf, 1)
    expected = traj.expected(3, 1, G)
    assert sorted(expected) == [3, 4, 5, 6, 7]  # steps 0 and 1 reach the cut after step 1
    seen = set()
    for out in sample_until(buf, 10):
        seen |= check_rows(out, expected, 1)
    assert seen == set(expected)


def test_a_rejected_add_changes_nothing() -> None:
    buf = ExperienceReplayBuffer(discrete(), 100, batch_size=1, random_seed=0)
    buf.add(np.array([1.0]), 0, 1.0, False, 0)
    buf.add(np.array([2.0]), 1, 1.0, False, 0)
    with pytest.raises(ValueError, match="broadcast"):
        buf.add(np.array([1.0, 2.0]), 0, 1.0, False, 1)  # new id, but a bad state
    assert len(buf) == 1
    buf.add(np.array([3.0]), 2, 1.0, False, 0)  # the episode goes on: no cut was stored
    seen = {float(buf.sample()[0][0, 0]) for _ in range(30)}
    assert seen == {1.0, 2.0}


# done and a new episode id each with probability 1/5: episodes of a few steps, some cut
_flag = st.integers(0, 4).map(lambda x: x == 0)


@settings(max_examples=80, deadline=None)
@given(
    steps=st.lists(st.tuples(_flag, _flag), min_size=1, max_size=40),
    n=st.integers(1, 3),
    k=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_matches_reference_model(steps: list[tuple[bool, bool]], n: int, k: int, seed: int) -> None:
    """Random done flags and episode-id changes against the reference :class:`Trajectory`."""
    eid, traj = 0, Trajectory()
    for done, new_id in steps:
        eid += new_id
        traj.steps.append((done, eid))
    env = discrete(num_frames=k)
    buf = ExperienceReplayBuffer(env, 100, batch_size=4, bootstrap_n=n, gamma=G, random_seed=seed)
    traj.feed(buf, k)
    assert len(buf) == max(0, len(steps) - n)
    assert bool(buf) == (len(buf) > 0)
    expected = traj.expected(n, k, G)
    valid_share = len(expected) / max(1, len(steps))
    try:
        out = buf.sample()
    except (InsufficientCacheError, SampleConstructionError):
        # too few adds, or (keras-gym's own limit of 10 * batch_size draws) mostly cut windows
        assert len(buf) < 4 or not expected or valid_share < 0.5
        return
    check_rows(out, expected, k)


# ---------------------------------------------------------------------- len, bool, clear
def test_len_bool_and_capacity_count_like_keras_gym() -> None:
    buf = ExperienceReplayBuffer(discrete(), 5, batch_size=2, bootstrap_n=2)
    assert len(buf) == 0 and not buf
    lens = []
    for t in range(12):
        buf.add(np.array([t + 1.0]), 0, 1.0, False, 0)
        lens.append(len(buf))
    assert lens == [0, 0, 1, 2, 3, 4, 5, 5, 5, 5, 5, 5]  # max(0, min(adds, 5 + 2) - 2)
    assert buf


@pytest.mark.parametrize(("n", "k"), [(1, 1), (2, 1), (2, 3), (3, 4)])
def test_full_buffer_samples_exactly_capacity_recent_transitions(n: int, k: int) -> None:
    capacity = 5
    buf = ExperienceReplayBuffer(
        discrete(num_frames=k), capacity, batch_size=5, bootstrap_n=n, gamma=G, random_seed=0
    )
    T = 50
    Trajectory([(False, 0)] * T).feed(buf, k)
    # the newest `capacity` transitions whose window is complete: t = T-n-capacity .. T-n-1
    expected = Trajectory([(False, 0)] * T).expected(n, k, G)
    recent = {key: expected[key] for key in range(T - n - capacity + 1, T - n + 1)}
    seen = set()
    for out in sample_until(buf, 40):
        seen |= check_rows(out, recent, k)  # never a window or stack over the overwrite edge
    assert seen == set(recent)


def test_clear_empties_and_restarts_the_episode() -> None:
    buf = ExperienceReplayBuffer(discrete(num_frames=2), 10, batch_size=2, random_seed=0)
    Trajectory([(False, 0)] * 6).feed(buf, 2)
    assert len(buf) == 5
    buf.clear()
    assert len(buf) == 0 and not buf
    with pytest.raises(InsufficientCacheError):
        buf.sample()
    for t in range(10, 14):  # the same episode id goes on after the clear
        buf.add(state(t, 2), t % 3, float(t + 1), False, 0)
    assert len(buf) == 3
    S = np.concatenate([buf.sample()[0] for _ in range(10)])
    # nothing from before the clear; the first kept frame pads the first stack
    assert {tuple(row) for row in S[:, 0, 0].tolist()} == {(11, 11), (11, 12), (12, 13)}


# ---------------------------------------------------------------------- errors
def test_insufficient_cache_error() -> None:
    buf = ExperienceReplayBuffer(discrete(), 100, batch_size=3)
    with pytest.raises(InsufficientCacheError, match="insufficient cached data"):
        buf.sample()  # nothing added
    for t in range(3):
        buf.add(np.array([t + 1.0]), 0, 1.0, False, 0)
    assert len(buf) == 2
    with pytest.raises(rr.EmptyBufferError):  # the rlreplay name catches it too
        buf.sample()
    buf.add(np.array([4.0]), 0, 1.0, False, 0)
    assert buf.sample()[0].shape == (3, 1)


def test_episode_id_is_stored_as_int32_like_keras_gym() -> None:
    """keras-gym: self._e = np.zeros(n, 'int32'); self._e[self._i] = episode_id."""
    buf = ExperienceReplayBuffer(discrete(), 100, batch_size=2, random_seed=0)
    for t, eid in enumerate([1.5, 1.9, np.float32(1.0), np.int64(1), "1"]):  # all id 1
        buf.add(np.array([t + 1.0]), 0, 1.0, False, eid)
    S = np.concatenate([buf.sample()[0] for _ in range(20)])
    assert set(S[:, 0].tolist()) == {1.0, 2.0, 3.0, 4.0}  # one episode: no cut
    with pytest.raises(OverflowError):  # Python int beyond int32, as NumPy raises
        buf.add(np.zeros(1), 0, 0.0, False, 2**31)
    with pytest.raises(ValueError):
        buf.add(np.zeros(1), 0, 0.0, False, "one")
    assert len(buf) == 4


def test_random_seed_reseeds_at_any_time() -> None:
    """keras-gym's RandomStateMixin: setting random_seed creates random = RandomState(seed)."""
    a, b = fill(None), fill(5)
    assert isinstance(a.random, np.random.RandomState)
    a.random_seed = 5
    assert a.random_seed == 5
    for x, y in zip(a.sample(), b.sample(), strict=True):
        np.testing.assert_array_equal(x, y)


# ---------------------------------------------------------------------- from_value_function
def test_from_value_function() -> None:
    @dataclass
    class ValueFunction:  # keras-gym's value functions carry env, gamma and bootstrap_n
        env: Any
        gamma: float
        bootstrap_n: int

    vf = ValueFunction(discrete(num_frames=4), gamma=0.9, bootstrap_n=3)
    buf = ExperienceReplayBuffer.from_value_function(vf, capacity=50, batch_size=16)
    assert isinstance(buf, ExperienceReplayBuffer)
    assert (buf.env, buf.gamma, buf.bootstrap_n, buf.num_frames) == (vf.env, 0.9, 3, 4)
    assert (buf.capacity, buf.batch_size, buf.random_seed) == (50, 16, None)
    assert ExperienceReplayBuffer.from_value_function(vf, 50).batch_size == 32

    @dataclass
    class LaterValueFunction:  # later keras-gym releases call it n
        env: Any
        gamma: float
        n: int

    buf = ExperienceReplayBuffer.from_value_function(LaterValueFunction(discrete(), 0.5, 2), 9)
    assert (buf.bootstrap_n, buf.gamma, buf.capacity) == (2, 0.5, 9)


# ---------------------------------------------------------------------- reproducibility
def fill(seed: int | None) -> ExperienceReplayBuffer:
    buf = ExperienceReplayBuffer(
        discrete(num_frames=2), 200, batch_size=16, bootstrap_n=2, random_seed=seed
    )
    Trajectory([(t % 17 == 16, t // 17 + (t % 23 == 0)) for t in range(150)]).feed(buf, 2)
    return buf


def test_random_seed_reproduces_samples() -> None:
    a, b, c = fill(7), fill(7), fill(8)
    for _ in range(5):
        out_a, out_b, out_c = a.sample(), b.sample(), c.sample()
        for x, y in zip(out_a, out_b, strict=True):
            np.testing.assert_array_equal(x, y)
    assert not np.array_equal(out_a[0], out_c[0])


# ---------------------------------------------------------------------- agreement with the core
@pytest.mark.parametrize(("n", "k"), [(1, 1), (3, 1), (2, 4)])
def test_agrees_with_the_native_core(n: int, k: int) -> None:
    """The same trajectory in a plain rr.ReplayBuffer gives the same transitions by id."""
    capacity, gamma = 30, 0.5
    steps = [(t % 13 == 12, t // 13 + (t % 29 == 5)) for t in range(100)]
    buf = ExperienceReplayBuffer(
        discrete(num_frames=k), capacity, batch_size=25, bootstrap_n=n, gamma=gamma, random_seed=0
    )
    Trajectory(steps).feed(buf, k)
    native = rr.ReplayBuffer(
        capacity + n + k - 1,
        {
            "obs": rr.Field((1, 1), np.float64),
            "action": rr.Field((3,), np.float64),
            "reward": rr.Field((), np.float64),
        },
        n_step=n,
        gamma=gamma,
        frame_stack=k,
        stack_pad="first",
        next_fields=("action",),
    )
    blank = np.zeros((1, 1))
    for t, (done, eid) in enumerate(steps):
        if t and not steps[t - 1][0] and steps[t - 1][1] != eid:  # a cut
            native.end_episode(0, next_obs=blank)
        frame = state(t, k)[..., -1] if k > 1 else state(t, k)
        native.add(obs=frame, action=one_hot(t % 3), reward=float(t + 1),
                   terminated=done, truncated=False, next_obs=blank)  # fmt: skip
    for _ in range(3):
        S, A, Rn, In, S_next, A_next = buf.sample()
        ref = native.get_transitions(buf._last_ids)
        assert not ref.truncated.any()  # windows reaching a cut are never sampled
        to_keras = (lambda x: np.moveaxis(x, 1, -1)) if k > 1 else (lambda x: x)
        np.testing.assert_array_equal(S, to_keras(ref.obs))
        np.testing.assert_array_equal(A, ref.action)
        np.testing.assert_array_equal(Rn, ref.reward)  # powers of 0.5: exact
        np.testing.assert_array_equal(In, ref.discount)
        live = ~ref.terminated  # after a done keras-gym reads the next episode's step
        np.testing.assert_array_equal(S_next[live], to_keras(ref.next_obs)[live])
        np.testing.assert_array_equal(A_next[live], ref.next_action[live])


def test_pickles_like_keras_gyms_plain_array_buffer() -> None:
    """keras-gym's buffer holds NumPy arrays and a RandomState, so users pickle it."""
    import pickle

    buf = fill(3)
    copy = pickle.loads(pickle.dumps(buf))
    assert len(copy) == len(buf) and copy.random_seed == 3
    for _ in range(3):
        for x, y in zip(buf.sample(), copy.sample(), strict=True):
            np.testing.assert_array_equal(x, y)
    copy.add(state(150, 2), 0, 1.0, False, 99)  # and it goes on taking steps
    assert len(copy) == len(buf) + 1
    empty = pickle.loads(pickle.dumps(ExperienceReplayBuffer(discrete(), 10)))
    assert len(empty) == 0


def test_batch_size_zero_fails_at_sample_as_keras_gyms_stack_does() -> None:
    buf = ExperienceReplayBuffer(discrete(), 10, batch_size=0)
    with pytest.raises(InsufficientCacheError):  # keras-gym: not initialized yet
        buf.sample()
    buf.add(np.zeros(1), 0, 0.0, False, 0)
    with pytest.raises(ValueError, match="at least one array"):  # np.stack([])
        buf.sample()
    # keras-gym's ring has capacity + bootstrap_n slots: with 0 its first write
    # `self._s[0] = s` raises IndexError; below 0, np.zeros raises ValueError.
    with pytest.raises(IndexError):
        ExperienceReplayBuffer(discrete(), -1).add(np.zeros(1), 0, 0.0, False, 0)
    with pytest.raises(IndexError):
        ExperienceReplayBuffer(discrete(), 0, bootstrap_n=0).add(np.zeros(1), 0, 0.0, False, 0)
    with pytest.raises(ValueError, match="negative dimensions"):
        ExperienceReplayBuffer(discrete(), -3).add(np.zeros(1), 0, 0.0, False, 0)


def test_capacity_zero_stores_as_keras_gyms_one_slot_ring() -> None:
    """capacity=0, bootstrap_n=1: keras-gym's ring has one slot, adds work, and
    len() = max(0, num_transitions - 1) stays 0, so sample() raises InsufficientCacheError."""
    buf = ExperienceReplayBuffer(discrete(), 0, batch_size=1)
    for t in range(5):
        buf.add(np.zeros(1), 0, 0.0, t == 4, 0)
        assert len(buf) == 0
    with pytest.raises(InsufficientCacheError):
        buf.sample()


def test_bootstrap_n_zero_as_keras_gym() -> None:
    """keras-gym (seed 002, sample): with bootstrap_n=0, ls is empty so Rn = 0 and
    In = gamma**0 = 1, ks = js so S_next/A_next are S/A, and len() counts every stored
    slot (num_transitions - 0), the newest step of a running episode included."""
    buf = ExperienceReplayBuffer(discrete(num_frames=2), 4, batch_size=4, bootstrap_n=0,
                                 random_seed=0)  # fmt: skip
    for t in range(6):
        s = np.zeros((1, 1, 2))
        s[..., -1] = t + 1
        buf.add(s, t % 2, 5.0, False, 0)
    assert len(buf) == 4
    batches = [buf.sample() for _ in range(16)]
    S, A, Rn, In, S_next, A_next = (np.concatenate(x) for x in zip(*batches, strict=True))
    assert batches[0][0].shape == batches[0][4].shape == (4, 1, 1, 2)
    np.testing.assert_array_equal(Rn, np.zeros(64))
    np.testing.assert_array_equal(In, np.ones(64))
    np.testing.assert_array_equal(S_next, S)
    np.testing.assert_array_equal(A_next, A)
    assert set(S[:, 0, 0, -1].tolist()) == {3.0, 4.0, 5.0, 6.0}  # the newest add, 6, too
    np.testing.assert_array_equal(S[:, 0, 0, 0], S[:, 0, 0, -1] - 1)  # the previous frame
    np.testing.assert_array_equal(A.argmax(axis=1), (S[:, 0, 0, -1].astype(int) - 1) % 2)


def test_num_frames_zero_and_negative_as_keras_gym() -> None:
    """keras-gym: num_frames=0 makes check_numpy_array demand an empty last axis; an
    ndim-3 state then fails at s[:, :, -1] (IndexError), another ndim is stored whole; the
    stack indices js are empty, so S is (B, *s.shape, 0) and A has no rows. A negative
    num_frames fails every add's check."""
    buf = ExperienceReplayBuffer(discrete(num_frames=0), 10, batch_size=3, random_seed=0)
    with pytest.raises(NumpyArrayCheckError):
        buf.add(np.zeros((2, 1)), 0, 1.0, False, 0)
    with pytest.raises(IndexError):
        buf.add(np.zeros((2, 2, 0)), 0, 1.0, False, 0)
    for t in range(5):
        buf.add(np.zeros((2, 0)), 1, 2.0, t == 4, 0)
    S, A, Rn, In, S_next, A_next = buf.sample()
    assert S.shape == S_next.shape == (3, 2, 0, 0) and A.shape == A_next.shape == (0, 3)
    np.testing.assert_array_equal(Rn, np.full(3, 2.0))
    assert set(In.tolist()) <= {0.0, 0.99}
    negative = ExperienceReplayBuffer(discrete(num_frames=-1), 10)
    with pytest.raises(NumpyArrayCheckError):
        negative.add(np.zeros((2, 1)), 0, 1.0, False, 0)


def test_num_frames_none_builds_and_adds_but_never_samples() -> None:
    """Seed 002 (keras-gym 0.2.17): ``self.num_frames = get_env_attr(env, 'num_frames', 1)``
    keeps ``None``; ``add`` runs ``check_numpy_array(s, axis_size=None, axis=-1)``, which
    checks only that ``s`` is an array, then takes the last frame of a 3-d/4-d ``s``; every
    ``sample()`` past the size check fails at ``np.arange(self.num_frames - 1, -1, -1)``
    with ``TypeError``."""
    env = FakeEnv(gymnasium.spaces.Discrete(3))
    env.num_frames = None  # type: ignore[assignment]
    buf = ExperienceReplayBuffer(env, 10, batch_size=2)
    assert buf.num_frames is None
    with pytest.raises(InsufficientCacheError):
        buf.sample()
    with pytest.raises(NumpyArrayCheckError):  # not a NumPy array
        buf.add([1.0, 2.0], 0, 1.0, False, 0)
    for t in range(4):
        buf.add(np.full((2, 2, 5), float(t)), t % 3, 1.0, t == 3, 0)  # any last-axis size
    assert len(buf) == 3
    with pytest.raises(TypeError, match="num_frames"):
        buf.sample()
    with pytest.raises(rr.ConfigError):
        buf.sample()
    buf.batch_size = 0  # keras-gym: no draw, then np.stack of an empty list
    with pytest.raises(ValueError, match="need at least one array"):
        buf.sample()
