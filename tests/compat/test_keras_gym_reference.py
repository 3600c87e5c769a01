"""keras-gym 0.2.17's own ExperienceReplayBuffer (ported) against the front-end.

:class:`KerasGymReference` is ``keras_gym/caching/experience_replay.py`` of keras-gym 0.2.17
(MIT licence, (c) Kristian Holsheimer), with its mixins written out (``RandomStateMixin``:
``random = np.random.RandomState(random_seed)``; ``_one_hot_encode_discrete`` for int
actions) and one change: its frame cache is ``np.zeros`` instead of ``np.empty``. Beside the
ring it keeps a *shadow*: per slot, the number of the add it holds and the true episode (a
``done``, a new id without ``done`` or a ``clear`` starts one), from which each ``sample``
records which of its kept draws read data that is not there (the fixes of
``docs/migrating/keras_gym.md``). Same seed, same adds: the front-end must return exactly
keras-gym's batches and leave the generator exactly where keras-gym leaves it, except in
those rows (frame stacks) or, after a draw the front-end rejects, from then on.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlreplay.compat.keras_gym import ExperienceReplayBuffer


class KerasGymReference:
    """keras-gym 0.2.17's buffer, line for line, plus the shadow (marked ``# shadow``)."""

    def __init__(self, env: Any, capacity: int, batch_size: int = 32, bootstrap_n: int = 1,
                 gamma: float = 0.99, random_seed: Any = None) -> None:  # fmt: skip
        self.env = env
        self.capacity = int(capacity)
        self.batch_size = int(batch_size)
        self.num_frames = getattr(env, "num_frames", 1)
        self.bootstrap_n = int(bootstrap_n)
        self.gamma = float(gamma)
        self.random = np.random.RandomState(random_seed)
        self._initialized = False
        self.history: list[int] = []  # shadow: true episode number of every add
        self.episode, self.running = 0, None  # shadow
        self.stream_fixed, self.rows_fixed = False, np.zeros(0, bool)  # shadow: last sample

    def add(self, s: Any, a: Any, r: Any, done: Any, episode_id: Any) -> None:
        s = self._extract_last_frame(s)
        if not self._initialized:
            self._s_dtype, self._s_shape = s.dtype, s.shape
            self._a_shape, self._a_dtype = (self.env.action_space.n,), "float"
            n = (self.capacity + self.bootstrap_n,)
            self._i = 0
            self._num_transitions = 0
            self._s = np.zeros(n + self._s_shape, self._s_dtype)  # np.empty in keras-gym
            self._a = np.zeros(n + self._a_shape, self._a_dtype)
            self._r = np.zeros(n, "float")
            self._d = np.zeros(n, "bool")
            self._e = np.zeros(n, "int32")
            self._g = np.full(n, -1)  # shadow: the add each slot holds
            self._initialized = True
        a = np.eye(self.env.action_space.n)[a]  # one_hot(a, num_actions) for 0 <= a < n
        self._s[self._i] = s
        self._a[self._i] = a
        self._r[self._i] = r
        self._d[self._i] = done
        self._e[self._i] = episode_id
        if self.running is not None and episode_id != self.running:  # shadow
            self.episode += 1
        self._g[self._i] = len(self.history)  # shadow
        self.history.append(self.episode)  # shadow
        self.episode, self.running = (
            (self.episode + 1, None) if done else (self.episode, episode_id)
        )
        self._i = (self._i + 1) % (self.capacity + self.bootstrap_n)
        if self._num_transitions < self.capacity + self.bootstrap_n:
            self._num_transitions += 1

    def clear(self) -> None:
        self._i = 0
        self._num_transitions = 0
        self.episode, self.running = self.episode + 1, None  # shadow

    def _extract_last_frame(self, s: Any) -> Any:
        if self.num_frames == 1:
            return s
        assert isinstance(s, np.ndarray) and s.shape[-1] == self.num_frames
        if s.ndim == 3:
            s = s[:, :, -1]
        elif s.ndim == 4:
            s = s[:, :, :, -1]
        return s

    def __len__(self) -> int:
        return max(0, self._num_transitions - self.bootstrap_n)

    def sample(self) -> tuple[np.ndarray, ...]:
        S, A, Rn, In, S_next, A_next = [], [], [], [], [], []  # type: ignore[var-annotated]
        rows_fixed = []  # shadow
        self.stream_fixed = False  # shadow
        for _attempt in range(10 * self.batch_size):
            J = len(self) - self.num_frames
            assert J > 0, "please insert more transitions before sampling"
            js = self.random.randint(J) + np.arange(self.num_frames)
            ks = js + self.bootstrap_n
            ls = np.arange(js[-1], ks[-1])
            js %= self.capacity + self.bootstrap_n
            ks %= self.capacity + self.bootstrap_n
            ls %= self.capacity + self.bootstrap_n
            ep = self._e[js[-1]]
            if any(self._e[j] > ep for j in js[:-1]):
                continue
            raw_js = js.copy()  # shadow
            for i, j in reversed(list(enumerate(js[:-1]))):
                if self._e[j] < ep:
                    js[i] = js[i + 1]
            rn = np.zeros(1)
            done = False
            for t, slot in enumerate(ls):  # `l` in keras-gym
                rn[0] += pow(self.gamma, t) * self._r[slot]
                done = self._d[slot]
                if done:
                    break
            if not done and any(self._e[k] != ep for k in ks):
                continue
            self._shadow_check(raw_js, js, ks, ls, bool(done), rows_fixed)  # shadow
            perm = np.roll(np.arange(self._s.ndim), -1)
            S.append(self._s[js].transpose(perm))
            A.append(self._a[js[-1:]])
            Rn.append(rn)
            S_next.append(self._s[ks].transpose(perm))
            A_next.append(self._a[ks[-1:]])
            In.append(np.zeros(1) if done else np.power([self.gamma], self.bootstrap_n))
            if len(S) == self.batch_size:
                break
        self.rows_fixed = np.array(rows_fixed, bool)  # shadow
        if len(S) < self.batch_size:
            raise RuntimeError("couldn't construct valid sample")
        out = [np.stack(S, axis=0), np.concatenate(A, axis=0), np.concatenate(Rn, axis=0),
               np.concatenate(In, axis=0), np.stack(S_next, axis=0),
               np.concatenate(A_next, axis=0)]  # fmt: skip
        if self.num_frames == 1:
            out[0], out[4] = np.squeeze(out[0], axis=-1), np.squeeze(out[4], axis=-1)
        return tuple(out)

    def _shadow_check(self, raw_js: Any, js: Any, ks: Any, ls: Any, done: bool,
                      rows_fixed: list[bool]) -> None:  # fmt: skip
        """Shadow: flag a kept draw that reads the wrong data.

        The stream differs (the front-end rejects the draw) when the window (and ``ks``
        unless done) reads a slot that does not hold the next add (fix 1: the write cursor
        is crossed) or another true episode (fix 3: a cut). Only ``S``/``S_next`` of the row
        differ when the stacks are not the true, first-frame padded ones (fixes 2 and 4).
        """
        g, ep = self._g[raw_js[-1]], self.history[self._g[raw_js[-1]]]
        steps = len(ls) if not done else next(u for u, sl in enumerate(ls) if self._d[sl]) + 1
        reads = [(sl, u) for u, sl in enumerate(ls[:steps])]
        if not done:
            reads.append((ks[-1], len(ls)))
        if any(self._g[sl] != g + u or self.history[self._g[sl]] != ep for sl, u in reads):
            self.stream_fixed = True
        first = g
        while first > 0 and self.history[first - 1] == ep:
            first -= 1
        k, n = self.num_frames, self.bootstrap_n
        wrong = [self._g[j] for j in js] != [max(g - k + 1 + c, first) for c in range(k)]
        if not done:
            wrong |= [self._g[j] for j in ks] != [max(g + n - k + 1 + c, first) for c in range(k)]
        rows_fixed.append(wrong)


class Env:
    def __init__(self, num_frames: int) -> None:
        self.action_space = gymnasium.spaces.Discrete(3)
        self.num_frames = num_frames


def frame(t: int, k: int) -> np.ndarray:
    """State of step ``t``: its frame is ``t + 1`` (``uint8`` stacks for ``k > 1``)."""
    if k > 1:
        s = np.zeros((1, 2, k), np.uint8)
        s[..., -1] = t + 1
        return s
    return np.full(2, t + 1.0, np.float32)


def assert_same(
    ours: ExperienceReplayBuffer, ref: KerasGymReference, got: tuple[np.ndarray, ...],
    expected: tuple[np.ndarray, ...]
) -> None:  # fmt: skip
    """Same batch except ``S``/``S_next`` of the rows keras-gym builds wrongly; same RNG."""
    ok = ~ref.rows_fixed
    for name, x, y in zip(("S", "A", "Rn", "In", "S_next", "A_next"), got, expected,
                          strict=True):  # fmt: skip
        assert x.shape == y.shape and x.dtype == y.dtype, name
        if name in ("S", "S_next"):
            x, y = x[ok], y[ok]
        np.testing.assert_array_equal(x, y, err_msg=name)
    mine, theirs = ours.random.get_state(), ref.random.get_state()
    assert np.array_equal(mine[1], theirs[1]) and mine[2:] == theirs[2:]


# (kind, done, id change): kind 0 clears, 1-5 sample, otherwise add; the id is kept (-2, 0,
# 2, 3), raised (1) or lowered (-1): cuts and repeated ids
operations = st.lists(
    st.tuples(st.integers(0, 19), st.booleans(), st.integers(-2, 3)), min_size=10, max_size=80
)


@settings(max_examples=100, deadline=None)
@given(
    ops=operations,
    n=st.integers(0, 3),
    k=st.integers(1, 3),
    capacity=st.integers(1, 14),
    batch_size=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_same_batches_and_draws_as_keras_gym(
    ops: list[tuple[int, bool, int]], n: int, k: int, capacity: int, batch_size: int, seed: int
) -> None:
    """Random adds (done or not; the id kept, raised, lowered: cuts, repeated ids), samples
    and clears, wrap-around included: every batch, error type and generator state is
    keras-gym's, except where its shadow flags a wrong read (then both are reseeded)."""
    args = dict(capacity=capacity, batch_size=batch_size, bootstrap_n=n, gamma=0.5,
                random_seed=seed)  # fmt: skip
    ours, ref = ExperienceReplayBuffer(Env(k), **args), KerasGymReference(Env(k), **args)
    t, eid = 0, 1
    for kind, done, change in ops:
        if kind > 5:  # add
            eid = max(0, eid + (change if change in (-1, 1) else 0))
            for buf in (ours, ref):
                buf.add(frame(t, k), t % 3, float(t + 1), done, eid)
            t += 1
        elif kind == 0:  # clear
            if ref._initialized:
                ref.clear()
            ours.clear()
        elif ref._initialized and len(ref) >= batch_size:
            assert len(ours) == len(ref)
            try:
                expected: Any = ref.sample()
            except (AssertionError, RuntimeError) as exc:
                expected = exc
            if ref.stream_fixed:
                ours.random_seed = seed
                ref.random = np.random.RandomState(seed)
                continue
            if isinstance(expected, Exception):
                with pytest.raises(type(expected)):
                    ours.sample()
                continue
            assert_same(ours, ref, ours.sample(), expected)


@pytest.mark.parametrize(("n", "k"), [(1, 3), (1, 2), (2, 2)])
def test_stacks_of_overwritten_frames_are_the_true_ones(n: int, k: int) -> None:
    """Fix 2: after the ring wrapped, the oldest slots' predecessors are overwritten by a
    newer episode with a smaller id; keras-gym then pads the stack with its last frame (or,
    with the same id, stacks the newer frames). The front-end returns the frames the agent
    saw, from the core's ``num_frames - 1`` extra steps; the draws, and so every other
    array, are keras-gym's."""
    capacity = 6
    args = dict(capacity=capacity, batch_size=4, bootstrap_n=n, gamma=0.5, random_seed=1)
    ours, ref = ExperienceReplayBuffer(Env(k), **args), KerasGymReference(Env(k), **args)
    t = 0
    for eid, length in ((5, capacity + n), (2, 2)):  # fills the ring, then a smaller id
        for u in range(length):
            for buf in (ours, ref):
                buf.add(frame(t, k), t % 3, float(t + 1), u == length - 1, eid)
            t += 1
    seen = 0
    for _ in range(20):
        expected = ref.sample()
        assert not ref.stream_fixed
        got = ours.sample()
        assert_same(ours, ref, got, expected)
        mine = got[0][:, 0, 0, :].astype(int)  # (B, k) frame numbers: consecutive, padded
        firsts = np.where(mine[:, -1] > capacity + n, capacity + n + 1, 1)[:, None]
        np.testing.assert_array_equal(
            mine, np.maximum(mine[:, -1:] - np.arange(k - 1, -1, -1), firsts)
        )
        seen += int(ref.rows_fixed.sum())
    assert seen > 0  # keras-gym did build such a stack
