"""Hypothesis state machine: keras-gym's ExperienceReplayBuffer front-end against keras-gym.

:class:`KerasGymMachine` drives :class:`rlreplay.compat.keras_gym.ExperienceReplayBuffer` next
to the step model of ``tests/compat/_models_keras_gym.py`` (the seed's buffer with the fixes
of ``docs/migrating/keras_gym.md``), with ``num_frames`` 1..3 (``(1, 2, k)`` stacks),
``bootstrap_n`` 0..3, capacities that wrap and batch sizes 1..4. Rules:

* ``add`` of episodes: ``done`` or cut by a new ``episode_id``, the same id again after a
  ``done`` (fix 4) or a ``clear`` (fix 6);
* refused adds, each storing nothing: an ``episode_id`` past int32 (``OverflowError``, fix 5),
  a stack of the wrong size (``NumpyArrayCheckError``), a float action (``AssertionError``), an
  action outside the space (``ValueError``);
* ``sample``: every row ``(S, A, Rn, In, S_next, A_next)`` is the model's row of a step the
  seed's ring may draw with a known window (its last frame names the step), compared in full:
  after a ``done`` too, ``S_next``/``A_next`` are what the seed reads at step ``t + n`` (the
  next episode's, or the ring slot a step not added yet wraps to); fewer than ``batch_size``
  transitions: ``InsufficientCacheError``;
  nothing drawable: ``RuntimeError``, and where enough is drawable (a failure chance below
  10^-9 for ``10 * batch_size`` attempts), a batch;
* ``clear``;

and after every rule ``len`` and ``bool``. The default profile takes 8 sequences of 20 rules;
``-m slow`` 10^4.
"""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from scipy import stats

from rlreplay.compat.keras_gym import (
    ExperienceReplayBuffer,
    InsufficientCacheError,
    NumpyArrayCheckError,
)
from tests.compat._models_keras_gym import ACTIONS, KerasGymModel
from tests.machines import run_machine, run_machine_long

GAMMA = 0.5  # powers of 0.5 and these rewards: n-step sums are exact
REWARDS = st.sampled_from([0.0, 0.5, 1.0, 2.0, -1.0])
NAMES = ("S", "A", "Rn", "In", "S_next", "A_next")


class Env:
    """keras-gym's buffer reads only ``action_space`` and ``num_frames`` from its env."""

    def __init__(self, num_frames: int) -> None:
        self.action_space = gymnasium.spaces.Discrete(ACTIONS)
        self.num_frames = num_frames


class KerasGymMachine(RuleBasedStateMachine):
    @initialize(k=st.integers(1, 3), n=st.integers(0, 3), capacity=st.integers(1, 8),
                batch=st.integers(1, 4), seed=st.integers(0, 2**16))  # fmt: skip
    def build(self, k: int, n: int, capacity: int, batch: int, seed: int) -> None:
        self.buf = ExperienceReplayBuffer(Env(k), capacity, batch_size=batch, bootstrap_n=n,
                                          gamma=GAMMA, random_seed=seed)  # fmt: skip
        self.m = KerasGymModel(capacity, n, k, GAMMA)
        self.batch = batch
        self.episode_id = 0
        self.rows_checked = 0

    # ---------------------------------------------------------------- rules
    @rule(length=st.integers(1, 6), done=st.booleans(), same_id=st.booleans(),
          rewards=st.lists(REWARDS, min_size=6))  # fmt: skip
    def add_episode(self, length: int, done: bool, same_id: bool, rewards: list[float]) -> None:
        # A new id cuts the running episode; the same id goes on with it, unless a done or a
        # clear ended it (then it starts a new one: fixes 4 and 6).
        if not same_id:
            self.episode_id += 1
        for t in range(length):
            args = self.m.add(rewards[t], done and t == length - 1, self.episode_id)
            self.buf.add(*args)

    @rule(which=st.integers(0, 3))
    def refused_add(self, which: int) -> None:
        k = self.m.k
        s = np.zeros((1, 2, k), np.float32) if k > 1 else np.zeros(2, np.float32)
        if which == 0:
            with pytest.raises(OverflowError):
                self.buf.add(s, 0, 0.0, False, 2**31)
        elif which == 1 and k > 1:
            with pytest.raises(NumpyArrayCheckError):
                self.buf.add(np.zeros((1, 2, k + 1), np.float32), 0, 0.0, False, 0)
        elif which == 2:
            with pytest.raises(AssertionError):
                self.buf.add(s, 1.0, 0.0, False, self.episode_id)
        else:
            with pytest.raises(ValueError):
                self.buf.add(s, ACTIONS, 0.0, False, self.episode_id)

    @rule()
    def clear(self) -> None:
        self.buf.clear()
        self.m.clear()

    @rule()
    def sample(self) -> None:
        m, b = self.m, self.batch
        if len(m) < b:
            with pytest.raises(InsufficientCacheError):
                self.buf.sample()
            return
        can = m.candidates()
        if not can:
            with pytest.raises(RuntimeError, match="couldn't construct valid sample"):
                self.buf.sample()
            return
        try:
            out = self.buf.sample()
        except RuntimeError:
            # 10 * b draws over min(adds, ring) slots, of which len(can) are kept.
            p = len(can) / min(len(m.steps), m.ring)
            assert stats.binom.cdf(b - 1, 10 * b, p) > 1e-9, (len(can), p)
            return
        batch = dict(zip(NAMES, out, strict=True))
        assert all(len(v) == b for v in out)
        for row in range(b):
            last = batch["S"][row][..., -1] if m.k > 1 else batch["S"][row]
            p = m.position_of(int(np.asarray(last).reshape(-1)[0]) - 1)
            assert p in can, (p, can)
            want = m.row(p)
            for name in NAMES:
                np.testing.assert_array_equal(batch[name][row], want[name], err_msg=name)
            self.rows_checked += 1

    # ---------------------------------------------------------------- invariants
    @invariant()
    def sizes_match(self) -> None:
        if not hasattr(self, "m"):
            return
        if not self.m.steps and not self.m.total:
            return  # keras-gym: len() before the first add raises AttributeError
        assert len(self.buf) == len(self.m)
        assert bool(self.buf) == (len(self.m) > 0)


def test_keras_gym_state_machine() -> None:
    run_machine(KerasGymMachine, examples=8, steps=20)


@pytest.mark.slow
def test_keras_gym_state_machine_long() -> None:
    run_machine_long(KerasGymMachine)
