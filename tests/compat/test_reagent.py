"""ReAgent's replay memory front-end: seed behaviour, a slot-level reference, core agreement.

Observations of step ``t`` of episode ``e`` hold ``100 * e + t + 1`` (0 is a padding row or a
placeholder), so a stacked state names its steps. ``RefReAgent`` is a direct transcription of
ReAgent's (Dopamine's) slot ring: padding rows, validity marks and reads of consecutive slots.
"""

from __future__ import annotations

import gzip
import os
import pickle
import random
import subprocess
import sys
import tempfile
from typing import Any

import gymnasium
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

import rlreplay as rr
import rlreplay.compat.reagent as rm
from rlreplay.compat.reagent import PrioritizedReplayBuffer, ReplayBuffer
from rlreplay.compat.reagent.circular_replay_buffer import (
    NotFoundError,
    ReplayElement,
    shape_type,
)
from rlreplay.compat.reagent.sum_tree import SumTree
from rlreplay.compat.reagent.utils import replay_buffer_to_pre_timeline_df

G = 0.5  # powers of 0.5 are exact, so n-step sums compare exactly
LOG_PROB = ReplayElement("log_prob", (), np.float32)


def obs_of(e: int, t: int, d: int = 2) -> np.ndarray:
    return np.full(d, 100 * e + t + 1, np.float32)


def make(cls: Any = ReplayBuffer, **kw: Any) -> Any:
    args: dict[str, Any] = dict(
        observation_shape=(2,),
        stack_size=1,
        replay_capacity=50,
        batch_size=4,
        update_horizon=1,
        gamma=G,
        observation_dtype=np.float32,
        seed=0,
    )
    args.update(kw)
    return cls(**args)


def fill(buf: Any, lengths: list[int], *, terminal_last: bool = True, extra: bool = False) -> None:
    """Episode ``e`` has ``lengths[e]`` steps: action ``t % 3``, reward ``t + 1``."""
    for e, n in enumerate(lengths):
        for t in range(n):
            args: list[Any] = [obs_of(e, t), t % 3, float(t + 1), terminal_last and t == n - 1]
            if extra:
                args.append(-float(100 * e + t))
            if isinstance(buf, PrioritizedReplayBuffer):
                args.append(1.0 + t)
            buf.add(*args)


class RefReAgent:
    """ReAgent's ring, slot by slot (obs dim 2, scalar action/reward, one extra)."""

    def __init__(self, cap: int, k: int, n: int, gamma: float) -> None:
        self.cap, self.k, self.n, self.gamma = cap, k, n, gamma
        self.obs = np.zeros((cap, 2), np.float32)
        self.action = np.zeros(cap, np.int32)
        self.reward = np.zeros(cap, np.float32)
        self.terminal = np.zeros(cap, np.uint8)
        self.extra = np.zeros(cap, np.float32)
        self.valid = np.zeros(cap, bool)
        self.add_count = 0
        self.in_episode = 0

    def cursor(self) -> int:
        return self.add_count % self.cap

    def _write(self, o: Any, a: int, r: float, term: bool, x: float) -> None:
        c = self.cursor()
        self.obs[c], self.action[c], self.reward[c] = o, a, r
        self.terminal[c], self.extra[c] = term, x
        self.add_count += 1

    def add(self, o: Any, a: int, r: float, term: bool, x: float) -> None:
        if self.add_count == 0 or self.terminal[(self.cursor() - 1) % self.cap]:
            self.in_episode = 0
            for _ in range(self.k - 1):
                self._write(np.zeros(2), 0, 0.0, False, 0.0)
        cur = self.cursor()
        self.valid[cur] = False
        if self.in_episode >= self.n:
            self.valid[(cur - self.n) % self.cap] = True
        self._write(o, a, r, term, x)
        self.in_episode += 1
        for i in range(self.k - 1):
            self.valid[(self.cursor() + i) % self.cap] = False
        if term:
            for i in range(min(self.n, self.in_episode)):
                self.valid[(self.cursor() - i - 1) % self.cap] = True

    def stack(self, s: int) -> np.ndarray:
        rows = [(s - self.k + 1 + j) % self.cap for j in range(self.k)]
        frames = self.obs[rows]  # (k, 2)
        return frames[-1] if self.k == 1 else np.moveaxis(frames, 0, -1)

    def transition(self, s: int) -> dict[str, Any]:
        window = [(s + j) % self.cap for j in range(self.n)]
        term = self.terminal[window].astype(bool)
        m = int(np.argmax(term)) + 1 if term.any() else self.n
        nxt = (s + m) % self.cap
        return {
            "state": self.stack(s),
            "action": self.action[s],
            "reward": sum(self.gamma**j * self.reward[window[j]] for j in range(m)),
            "next_state": self.stack(nxt),
            "next_action": self.action[nxt],
            "next_reward": self.reward[nxt],
            "terminal": bool(term[m - 1]),
            "log_prob": self.extra[s],
            "next_log_prob": self.extra[nxt],
        }


def drive(buf: Any, ref: RefReAgent, lengths: list[int], last_terminal: bool = True) -> None:
    for e, n in enumerate(lengths):
        for t in range(n):
            term = t == n - 1 and (last_terminal or e < len(lengths) - 1)
            args = (obs_of(e, t), t % 3, float(t + 1), term, -float(100 * e + t))
            buf.add(*args)
            ref.add(*args)


# ---------------------------------------------------------------------- package and types
def test_import_does_not_load_torch_or_pandas() -> None:
    code = (
        "import sys, rlreplay, rlreplay.compat.reagent as rm; "
        "assert 'torch' not in sys.modules and 'pandas' not in sys.modules, sys.modules.keys()"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_package_reexports_and_replay_element() -> None:
    assert rm.ReplayBuffer is rm.circular_replay_buffer.ReplayBuffer
    assert rm.PrioritizedReplayBuffer is rm.prioritized_replay_buffer.PrioritizedReplayBuffer
    assert issubclass(rm.PrioritizedReplayBuffer, rm.ReplayBuffer)
    assert rm.sum_tree.SumTree is SumTree
    assert ReplayElement is shape_type
    e = ReplayElement("x", (2,), np.float32)
    assert e._fields == ("name", "shape", "type") and e.shape == (2,)


def test_constructor_errors() -> None:
    with pytest.raises(ValueError, match="not enough capacity"):
        make(replay_capacity=4, stack_size=2, update_horizon=3)
    with pytest.raises(ValueError, match="taken"):
        make(extra_storage_types=[ReplayElement("state", (), np.float32)])
    with pytest.raises(ValueError):  # reagent 0.1: np.zeros(-1) raises ValueError
        make(stack_size=-1)
    with pytest.raises(TypeError):  # reagent 0.1: np.empty([10.0]) raises TypeError
        make(replay_capacity=10.0)


# ---------------------------------------------------------------------- adding
def test_padding_rows_add_count_cursor_and_full() -> None:
    buf = make(stack_size=3, replay_capacity=12)
    assert buf.is_empty() and not buf.is_full() and buf.add_count == 0 and buf.cursor() == 0
    buf.add(obs_of(0, 0), 0, 1.0, False)
    assert buf.add_count == 3 and buf.cursor() == 3  # 2 padding rows, then the step
    buf.add(obs_of(0, 1), 1, 2.0, True)
    assert buf.add_count == 4
    buf.add(obs_of(1, 0), 0, 1.0, False)  # new episode: 2 more padding rows
    assert buf.add_count == 7 and not buf.is_empty()
    for t in range(1, 6):
        buf.add(obs_of(1, t), 0, 1.0, False)
    assert buf.add_count == 12 and buf.cursor() == 0 and buf.is_full()
    buf.add(obs_of(1, 6), 0, 1.0, False)
    assert buf.add_count == 13 and buf.cursor() == 1


def test_add_checks_arguments_and_changes_nothing_on_error() -> None:
    buf = make(extra_storage_types=[LOG_PROB], stack_size=2)
    with pytest.raises(ValueError, match="Add expects 5"):
        buf.add(obs_of(0, 0), 0, 1.0, False)
    with pytest.raises(ValueError, match="shape"):
        buf.add(np.zeros(3, np.float32), 0, 1.0, False, 0.0)
    with pytest.raises(KeyError):
        buf.add(obs_of(0, 0), 0, 1.0, False, bogus=0.0)
    assert buf.add_count == 0 and buf.is_empty()
    buf.add(observation=obs_of(0, 0), action=0, reward=1.0, terminal=False, log_prob=-0.5)
    buf.add(obs_of(0, 1), 0, 1.0, True, log_prob=-0.25)
    batch = buf.sample_all_valid_transitions()
    assert batch.log_prob.reshape(-1).tolist() == [-0.5, -0.25]


def test_validity_around_the_cursor() -> None:
    # capacity 8, stack 2, horizon 2: one long episode wraps the ring.
    buf = make(stack_size=2, replay_capacity=8, update_horizon=2)
    for t in range(3):
        buf.add(obs_of(0, t), 0, 1.0, False)
    # slot 0 padding, slots 1..3 = steps 0..2; step 0's window (0, 1) and next state 2 known.
    assert [buf.is_valid_transition(i) for i in range(8)] == [0, 1, 0, 0, 0, 0, 0, 0]
    assert buf.size == 1
    for t in range(3, 12):
        buf.add(obs_of(0, t), 0, 1.0, False)
    cur = buf.cursor()  # 12 rows + 1 padding = 13 -> cursor 5
    assert cur == 5
    valid = [buf.is_valid_transition(i) for i in range(8)]
    # invalid: the newest 2 (window unknown) and the oldest stack_size - 1 = 1 past the cursor
    assert valid == [True, True, True, False, False, False, True, True]
    assert buf.size == 5
    buf.add(obs_of(0, 12), 0, 1.0, True)  # terminal: the last 2 steps become valid
    assert [buf.is_valid_transition(i) for i in range(8)] == [1, 1, 1, 1, 1, 1, 0, 1]


@settings(max_examples=25, deadline=None)
@given(
    k=st.integers(1, 3),
    n=st.integers(1, 3),
    cap=st.integers(8, 16),
    lengths=st.lists(st.integers(1, 7), min_size=1, max_size=6),
    last_terminal=st.booleans(),
)
def test_matches_reagent_slot_reference(
    k: int, n: int, cap: int, lengths: list[int], last_terminal: bool
) -> None:
    """Validity, counters and every valid transition agree with ReAgent's slot ring."""
    if cap < k + n:
        return
    buf = make(stack_size=k, update_horizon=n, replay_capacity=cap, extra_storage_types=[LOG_PROB])
    ref = RefReAgent(cap, k, n, G)
    drive(buf, ref, lengths, last_terminal)
    assert buf.add_count == ref.add_count and buf.cursor() == ref.cursor()
    assert [buf.is_valid_transition(i) for i in range(cap)] == ref.valid.tolist()
    assert buf.size == int(ref.valid.sum())
    if buf.size == 0:
        with pytest.raises(RuntimeError):
            buf.sample_index_batch(2)
        return
    batch = buf.sample_all_valid_transitions()
    slots = batch.indices.reshape(-1).tolist()
    assert slots == np.flatnonzero(ref.valid).tolist()
    for row, s in enumerate(slots):
        want = ref.transition(s)
        got = {name: getattr(batch, name)[row].numpy() for name in want}
        for name in ("state", "action", "reward", "terminal", "log_prob"):
            np.testing.assert_array_equal(got[name].reshape(np.shape(want[name])), want[name])
        if not want["terminal"]:  # ReAgent: undefined after a terminal
            for name in ("next_state", "next_action", "next_reward", "next_log_prob"):
                np.testing.assert_array_equal(
                    got[name].reshape(np.shape(want[name])), want[name], err_msg=name
                )


def test_agrees_with_the_native_core() -> None:
    """Same steps into rr.ReplayBuffer: the mapped ids give the same transitions."""
    lengths = [5, 3, 7, 4]
    buf = make(stack_size=3, update_horizon=2, replay_capacity=40)
    fill(buf, lengths)
    core = rr.ReplayBuffer(
        40,
        {"obs": rr.Field((2,), np.float32, observation=True), "action": rr.Field((), np.int32)},
        n_step=2,
        gamma=G,
        frame_stack=3,
        stack_pad="zero",
        next_fields=("action",),
    )
    for e, n in enumerate(lengths):
        for t in range(n):
            done = t == n - 1
            extra = {"next_obs": np.zeros(2, np.float32)} if done else {}
            core.add(
                obs=obs_of(e, t),
                action=t % 3,
                reward=float(t + 1),
                terminated=done,
                truncated=False,
                **extra,
            )
    batch = buf.sample_transition_batch(batch_size=64)
    ids = buf._slot_id[batch.indices.reshape(-1).numpy()]
    native = core.get_transitions(ids)
    np.testing.assert_array_equal(batch.reward.reshape(-1).numpy(), native.reward)
    np.testing.assert_array_equal(batch.terminal.reshape(-1).numpy(), native.terminated)
    np.testing.assert_array_equal(batch.state.numpy(), np.moveaxis(native.obs, 1, -1))
    np.testing.assert_array_equal(batch.next_state.numpy(), np.moveaxis(native.next_obs, 1, -1))
    np.testing.assert_array_equal(batch.next_action.reshape(-1).numpy(), native.next_action)


# ---------------------------------------------------------------------- sampling
def test_transition_batch_elements_shapes_and_dtypes() -> None:
    buf = make(extra_storage_types=[LOG_PROB, ReplayElement("mask", (3,), np.bool_)])
    for t in range(6):
        buf.add(obs_of(0, t), t % 3, 1.0, t == 5, -1.0, np.array([1, 0, 1], bool))
    names = [e.name for e in buf.get_transition_elements()]
    assert names == [
        "state",
        "action",
        "reward",
        "next_state",
        "next_action",
        "next_reward",
        "terminal",
        "indices",
        "step",
        "log_prob",
        "next_log_prob",
        "mask",
        "next_mask",
    ]
    assert buf.get_transition_elements(7)[0].shape == (7, 2, 1)
    batch = buf.sample_transition_batch()
    assert batch._fields == tuple(names)
    assert batch.state.shape == (4, 2) and batch.state.dtype == torch.float32  # 2-D: stack 1
    assert batch.action.shape == (4, 1) and batch.action.dtype == torch.int32
    assert batch.reward.shape == (4, 1) and batch.reward.dtype == torch.float32
    assert batch.terminal.shape == (4, 1) and batch.terminal.dtype == torch.bool
    assert batch.indices.shape == (4, 1) and batch.indices.dtype == torch.int64
    assert batch.step.shape == (4, 1) and batch.step.dtype == torch.int64
    assert batch.mask.shape == (4, 3) and batch.mask.dtype == torch.bool
    batch = buf.sample_transition_batch(batch_size=9)
    assert batch.state.shape == (9, 2)
    stacked = make(stack_size=4)
    fill(stacked, [6])
    assert stacked.sample_transition_batch().state.shape == (4, 2, 4)


def test_signatures() -> None:
    buf = make(extra_storage_types=[LOG_PROB])
    storage = buf.get_storage_signature()
    assert [e.name for e in storage] == ["observation", "action", "reward", "terminal", "log_prob"]
    assert storage[0].shape == (2,) and storage[3].type == np.uint8
    assert buf.get_add_args_signature() == storage
    p = make(PrioritizedReplayBuffer)
    assert p.get_add_args_signature()[-1] == ReplayElement("priority", (), np.float32)
    assert p.get_transition_elements()[-1].name == "sampling_probabilities"


def test_sample_index_batch_and_errors() -> None:
    buf = make(update_horizon=3)
    with pytest.raises(RuntimeError, match="no valid indices"):
        buf.sample_index_batch(2)
    for t in range(3):
        buf.add(obs_of(0, t), 0, 1.0, False)
    with pytest.raises(RuntimeError):  # 3 steps, horizon 3: nothing valid yet
        buf.sample_transition_batch()
    buf.add(obs_of(0, 3), 0, 1.0, False)
    idx = buf.sample_index_batch(5)
    assert idx.dtype == torch.int64 and idx.shape == (5,) and set(idx.tolist()) == {0}
    # Slot 3's window is not known yet: reagent 0.1 reads slots 3..5 as they are (4 and 5
    # never written: zeros) and returns that (values from 0.1's own code on the same adds).
    newest = buf.sample_transition_batch(batch_size=1, indices=torch.tensor([3]))
    assert newest.state.tolist() == [[4.0, 4.0]] and newest.reward.tolist() == [[1.0]]
    assert newest.next_state.tolist() == [[0.0, 0.0]] and newest.step.tolist() == [[3]]
    # reagent 0.1 reads the stacks modulo replay_capacity but the other elements as
    # _store[name][indices]: 50 is out of bounds there (IndexError); -50 is slot 0.
    with pytest.raises(IndexError, match="out of bounds"):
        buf.sample_transition_batch(batch_size=1, indices=[50])
    assert buf.sample_transition_batch(batch_size=1, indices=[-50]).state.tolist() == [[1.0, 1.0]]
    with pytest.raises(AssertionError):  # ReAgent: assert len(indices) == batch_size
        buf.sample_transition_batch(batch_size=2, indices=[0])


def test_padding_slot_indices_read_the_slots() -> None:
    # reagent 0.1 reads a padding slot as it reads any slot: a zero row, then the slots after
    # it (values from 0.1's own code on the same adds).
    buf = make(stack_size=2)
    fill(buf, [3])
    batch = buf.sample_transition_batch(batch_size=1, indices=[0])
    assert batch.state.tolist() == [[[0.0, 0.0], [0.0, 0.0]]]
    assert batch.next_state.tolist() == [[[0.0, 1.0], [0.0, 1.0]]]
    assert (batch.reward.tolist(), batch.next_reward.tolist()) == ([[0.0]], [[1.0]])
    assert batch.terminal.tolist() == [[False]] and batch.step.tolist() == [[1]]


def test_uniform_over_valid_slots_chi_square() -> None:
    buf = make(stack_size=2, replay_capacity=20, update_horizon=2, seed=3)
    fill(buf, [4, 6, 9])  # wraps; padding rows and the oldest slot are invalid
    valid = np.flatnonzero([buf.is_valid_transition(i) for i in range(20)])
    draws = np.concatenate([buf.sample_index_batch(500).numpy() for _ in range(8)])
    assert set(draws.tolist()) <= set(valid.tolist())
    counts = np.array([(draws == s).sum() for s in valid])
    assert stats.chisquare(counts).pvalue > 1e-3


def test_set_index_valid_status_masks_sampling() -> None:
    buf = make(max_sample_attempts=5)
    fill(buf, [10])
    assert buf.size == 10
    for i in range(9):
        buf.set_index_valid_status(i, False)
    buf.set_index_valid_status(3, False)  # twice: counted once
    assert buf.size == 1 and not buf.is_valid_transition(0)
    assert set(buf.sample_index_batch(64).tolist()) == {9}  # rejections, then exact draws
    buf.set_index_valid_status(2, True)
    assert buf.size == 2
    assert set(buf.sample_index_batch(200).tolist()) == {2, 9}
    buf.set_index_valid_status(30, True)  # a slot never written: drawn as 0.1 draws it
    assert buf.size == 3
    assert set(buf.sample_index_batch(100).tolist()) == {2, 9, 30}
    assert buf.sample_transition_batch(batch_size=1, indices=[30]).state.tolist() == [[0.0, 0.0]]


def test_seeded_sampling_repeats() -> None:
    a, b = make(seed=7), make(seed=7)
    fill(a, [5, 5])
    fill(b, [5, 5])
    assert a.sample_index_batch(16).tolist() == b.sample_index_batch(16).tolist()
    # Without seed=, reagent 0.1's draw: np.random.choice on NumPy's global generator at
    # sampling time (test_reagent_draws.py pins 0.1's batches).
    c, d = make(seed=None), make(seed=None)
    fill(c, [5])
    fill(d, [5])
    saved = np.random.get_state()  # noqa: NPY002 - ReAgent users seed the global state
    try:
        np.random.seed(11)  # noqa: NPY002
        first = c.sample_index_batch(16).tolist()
        np.random.seed(11)  # noqa: NPY002
        assert d.sample_index_batch(16).tolist() == first
    finally:
        np.random.set_state(saved)  # noqa: NPY002


def test_everything_as_stack_golden() -> None:
    buf = make(stack_size=3, return_everything_as_stack=True, extra_storage_types=[LOG_PROB])
    fill(buf, [4], extra=True)  # slots 0, 1 padding; steps 0..3 in slots 2..5
    batch = buf.sample_transition_batch(batch_size=2, indices=[3, 5])  # steps 1 and 3 (terminal)
    assert batch.action.tolist() == [[0, 0, 1], [1, 2, 0]]
    assert batch.reward.tolist() == [[0, 1, 2], [2, 3, 4]]  # raw rewards, not n-step sums
    # terminal is not stacked: ReAgent reads it at t+m-1 only, (B, 1)
    assert batch.terminal.tolist() == [[False], [True]]
    assert batch.step.tolist() == [[1], [1]]
    assert batch.next_action.tolist() == [[0, 1, 2], [2, 0, 0]]  # after a terminal: 0
    assert batch.next_reward.tolist() == [[1, 2, 3], [3, 4, 0]]
    assert batch.log_prob.tolist() == [[0, 0, -1], [-1, -2, -3]]
    assert batch.state[:, 0].tolist() == [[0, 1, 2], [2, 3, 4]]
    assert batch.next_state[:, 0].tolist() == [[1, 2, 3], [3, 4, 0]]


@pytest.mark.parametrize("cls", [ReplayBuffer, PrioritizedReplayBuffer])
def test_everything_as_stack_with_n_step_raises_after_the_draw(cls: Any) -> None:
    # reagent 0.1's sample_transition_batch draws the indices, then reaches the reward
    # element and raises NotImplementedError("Uncertain how to do this without double
    # counting..") when return_everything_as_stack meets update_horizon > 1.
    buf = make(cls, update_horizon=2, return_everything_as_stack=True)
    fill(buf, [6])
    twin = make(cls, update_horizon=2, return_everything_as_stack=True)
    fill(twin, [6])
    with pytest.raises(NotImplementedError, match="double counting") as info:
        buf.sample_transition_batch()
    assert isinstance(info.value, rr.ConfigError)
    with pytest.raises(NotImplementedError):
        buf.sample_transition_batch(batch_size=4, indices=[0, 1, 2, 3])
    twin.sample_index_batch(4)  # the failed call drew its indices first, as 0.1
    assert buf.sample_index_batch(4).tolist() == twin.sample_index_batch(4).tolist()
    # The timeline format returns the rewards step by step: nothing is double counted.
    timeline = make(cls, update_horizon=2, return_everything_as_stack=True,
                    return_as_timeline_format=True)  # fmt: skip
    fill(timeline, [6])
    assert len(timeline.sample_transition_batch(batch_size=4, indices=[0, 1, 2, 3]).reward) == 4


def test_timeline_format_golden() -> None:
    buf = make(update_horizon=3, return_as_timeline_format=True, extra_storage_types=[LOG_PROB])
    fill(buf, [4], extra=True)
    batch = buf.sample_transition_batch(batch_size=3, indices=[0, 2, 3])  # m = 3, 2, 1
    assert [r.tolist() for r in batch.reward] == [[1, 2, 3], [3, 4], [4]]
    assert [r.tolist() for r in batch.next_reward] == [[2, 3, 4], [4, 0], [0]]
    assert [a.tolist() for a in batch.next_action] == [[1, 2, 0], [0, 0], [0]]
    assert [s[:, 0].tolist() for s in batch.next_state] == [[2, 3, 4], [4, 0], [0]]
    assert [x.tolist() for x in batch.next_log_prob] == [[-1, -2, -3], [-3, 0], [0]]
    assert batch.state.shape == (3, 2) and batch.terminal.reshape(-1).tolist() == [0, 1, 1]
    stacked = make(update_horizon=2, stack_size=2, return_as_timeline_format=True)
    fill(stacked, [3])  # slot 0 padding; steps in 1..3
    batch = stacked.sample_transition_batch(batch_size=1, indices=[1])
    assert batch.next_state[0].shape == (2, 2, 2)
    assert batch.next_state[0][:, 0].tolist() == [[1, 2], [2, 3]]


# ---------------------------------------------------------------------- gymnasium
class FakeEnv:
    def __init__(self, action_space: Any) -> None:
        self.observation_space = gymnasium.spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.action_space = action_space


def test_create_from_env() -> None:
    buf = ReplayBuffer.create_from_env(
        FakeEnv(gymnasium.spaces.Discrete(4)),
        replay_memory_size=30,
        batch_size=2,
        update_horizon=2,
        seed=0,
    )
    sig = buf.get_storage_signature()
    assert sig[0] == ReplayElement("observation", (3,), np.float32)
    assert sig[1].shape == () and sig[1].type == np.int64
    assert sig[-1] == LOG_PROB
    box = PrioritizedReplayBuffer.create_from_env(
        FakeEnv(gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)),
        replay_memory_size=30,
        batch_size=2,
        store_log_prob=False,
    )
    assert [e.name for e in box.get_storage_signature()][-1] == "terminal"
    assert box.get_storage_signature()[1].shape == (2,)
    with pytest.raises(ValueError, match="not supported"):
        ReplayBuffer.create_from_env(
            FakeEnv(gymnasium.spaces.MultiBinary(2)), replay_memory_size=30, batch_size=2
        )


# ---------------------------------------------------------------------- checkpoints
def ckpt_names(buf: Any, it: int) -> set[str]:
    names = {f"$store$_{e.name}_ckpt.{it}.gz" for e in buf.get_storage_signature()}
    names |= {
        f"{n}_ckpt.{it}.gz" for n in ("add_count", "invalid_range", "_is_valid", "_is_padding")
    }
    return names


@pytest.mark.parametrize("cls", [ReplayBuffer, PrioritizedReplayBuffer])
def test_save_load_round_trip(tmp_path: Any, cls: Any) -> None:
    kw = dict(stack_size=2, update_horizon=2, replay_capacity=24, extra_storage_types=[LOG_PROB])
    buf = make(cls, seed=5, **kw)
    fill(buf, [6, 5, 9], extra=True)  # wraps the ring
    buf.set_index_valid_status(int(np.flatnonzero(buf._is_valid)[0]), False)
    if cls is PrioritizedReplayBuffer:
        buf.set_priority(np.arange(24, dtype=np.int32), np.arange(24.0))
    buf.save(tmp_path, 3)
    want = ckpt_names(buf, 3) | (
        {"sum_tree_ckpt.3.gz"} if cls is PrioritizedReplayBuffer else set()
    )
    assert set(os.listdir(tmp_path)) == want
    with gzip.open(tmp_path / "add_count_ckpt.3.gz") as f:
        assert int(np.load(f, allow_pickle=False)) == buf.add_count
    with gzip.open(tmp_path / "$store$_observation_ckpt.3.gz") as f:
        assert np.load(f, allow_pickle=False).shape == (24, 2)
    loaded = make(cls, seed=5, **kw)
    loaded.load(tmp_path, 3)
    assert loaded.add_count == buf.add_count and loaded.cursor() == buf.cursor()
    np.testing.assert_array_equal(loaded._is_valid, buf._is_valid)
    assert loaded.size == buf.size
    a, b = buf.sample_all_valid_transitions(), loaded.sample_all_valid_transitions()
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x.numpy(), y.numpy())
    fresh = make(cls, seed=5, **kw)  # same seed, same data: same samples
    fresh.load(tmp_path, 3)
    for x, y in zip(
        loaded.sample_transition_batch(8), fresh.sample_transition_batch(8), strict=True
    ):
        np.testing.assert_array_equal(x.numpy(), y.numpy())
    if cls is PrioritizedReplayBuffer:
        np.testing.assert_array_equal(
            loaded.get_priority(np.arange(24, dtype=np.int32)),
            buf.get_priority(np.arange(24, dtype=np.int32)),
        )
    # Adding on continues exactly as in the saved buffer.
    for target in (buf, loaded):
        fill(target, [3], extra=True)
    np.testing.assert_array_equal(loaded._is_valid, buf._is_valid)
    np.testing.assert_array_equal(
        loaded.sample_all_valid_transitions().state.numpy(),
        buf.sample_all_valid_transitions().state.numpy(),
    )


def test_load_without_validity_file_recomputes_reagents_marks(tmp_path: Any) -> None:
    kw = dict(stack_size=3, update_horizon=2, replay_capacity=20, extra_storage_types=[LOG_PROB])
    buf = make(**kw)
    ref = RefReAgent(20, 3, 2, G)
    drive(buf, ref, [5, 4, 8], last_terminal=False)
    buf.save(tmp_path, 0)
    os.remove(tmp_path / "_is_valid_ckpt.0.gz")  # what a ReAgent checkpoint looks like
    loaded = make(**kw)
    loaded.load(tmp_path, 0)
    assert loaded._is_valid.tolist() == ref.valid.tolist()


def test_checkpoint_rotation_and_missing_dir(tmp_path: Any) -> None:
    buf = make()
    fill(buf, [3])
    target = tmp_path / "new"
    for it in range(6):
        buf.save(target, it)
    iterations = {name.split(".")[-2] for name in os.listdir(target)}
    assert iterations == {"2", "3", "4", "5"}  # N - 4 deleted, as in Dopamine


def test_missing_files_raise_not_found(tmp_path: Any) -> None:
    buf = make()
    fill(buf, [3])
    with pytest.raises(NotFoundError, match="Missing"):
        buf.load(tmp_path, 0)
    buf.save(tmp_path, 0)
    os.remove(tmp_path / "$store$_reward_ckpt.0.gz")
    with pytest.raises(FileNotFoundError):
        buf.load(tmp_path, 0)
    with pytest.raises(rr.CheckpointError):
        buf.load(tmp_path, 0)
    assert buf.add_count == 3  # a failed load changes nothing


def test_pickled_files_are_refused(tmp_path: Any) -> None:
    buf = make()
    fill(buf, [3])
    buf.save(tmp_path, 0)
    with gzip.open(tmp_path / "add_count_ckpt.0.gz", "wb") as f:
        pickle.dump(3, f)
    with pytest.raises(rr.CheckpointError, match="pickle"):
        buf.load(tmp_path, 0)


# ---------------------------------------------------------------------- prioritized
def test_priorities_get_set_and_probabilities() -> None:
    buf = make(PrioritizedReplayBuffer, stack_size=2, replay_capacity=30)
    fill(buf, [4])  # slot 0 padding, steps 0..3 (priorities 1..4) in slots 1..4
    assert buf.get_priority(np.arange(6, dtype=np.int32)).tolist() == [0, 1, 2, 3, 4, 0]
    assert buf.get_priority(np.arange(6, dtype=np.int32)).dtype == np.float32
    buf.set_priority(np.array([1, 2], np.int32), np.array([0.0, 8.0]))
    buf.set_priority([0], [5.0])  # a padding row: kept as ReAgent's leaf, never drawn
    assert buf.get_priority([0, 1, 2]).tolist() == [5, 0, 8]
    assert buf.sum_tree.get(2) == 8.0 and buf.sum_tree.max_recorded_priority == 8.0
    with pytest.raises(ValueError):
        buf.set_priority([1], [-1.0])
    batch = buf.sample_transition_batch(batch_size=32)
    slots = batch.indices.reshape(-1).numpy()
    assert 1 not in slots.tolist()  # priority 0 is never drawn
    probs = batch.sampling_probabilities
    assert probs.shape == (32, 1) and probs.dtype == torch.float32
    core_prios = buf._core.get_priorities(buf._slot_id[slots])
    np.testing.assert_array_equal(probs.reshape(-1).numpy(), core_prios.astype(np.float32))


def test_prioritized_draws_follow_priorities() -> None:
    buf = make(PrioritizedReplayBuffer, seed=2, replay_capacity=20)
    fill(buf, [8])
    prios = np.array([1.0, 2.0, 3.0, 4.0, 0.5, 0.5, 1.0, 8.0])
    buf.set_priority(np.arange(8, dtype=np.int32), prios)
    draws = np.concatenate([buf.sample_index_batch(500).numpy() for _ in range(8)])
    counts = np.bincount(draws, minlength=8)
    expected = prios / prios.sum() * draws.size
    assert stats.chisquare(counts, expected).pvalue > 1e-3


def test_prioritized_add_priority_and_errors() -> None:
    buf = make(PrioritizedReplayBuffer, max_sample_attempts=3)
    buf.add(obs_of(0, 0), 0, 1.0, False, None)  # None: max_recorded_priority (1.0)
    buf.add(obs_of(0, 1), 0, 1.0, True, priority=3.0)
    assert buf.get_priority([0, 1]).tolist() == [1.0, 3.0]
    with pytest.raises(ValueError):
        buf.add(obs_of(0, 2), 0, 1.0, False, -2.0)
    assert buf.add_count == 2
    buf.set_priority([0, 1], [0.0, 0.0])
    with pytest.raises(RuntimeError, match="Max sample attempts"):
        buf.sample_index_batch(4)


def test_prioritized_overwritten_steps_leave_the_core_draws() -> None:
    buf = make(PrioritizedReplayBuffer, replay_capacity=6, update_horizon=1)
    fill(buf, [10])  # one long episode wraps the ring
    held = buf._slot_id[buf._slot_id >= 0]
    live = buf._core.sampleable_ids()
    gone = np.setdiff1d(live, held)
    assert (buf._core.get_priorities(gone) == 0).all()
    assert set(buf.sample_index_batch(100).tolist()) <= set(np.flatnonzero(buf._is_valid).tolist())


# ---------------------------------------------------------------------- sum tree
def test_sum_tree_documented_behaviour() -> None:
    tree = SumTree(4)
    for i, p in enumerate([0.5, 1.0, 0.5, 0.5]):
        tree.set(i, p)
    assert [lvl.tolist() for lvl in tree.nodes] == [[2.5], [1.5, 1.0], [0.5, 1.0, 0.5, 0.5]]
    assert tree.get(1) == 1.0 and tree.max_recorded_priority == 1.0
    assert [tree.sample(q) for q in (0.0, 0.19, 0.21, 0.59, 0.61, 0.81, 1.0)] == [
        0,
        0,
        1,
        1,
        2,
        3,
        3,
    ]
    assert [len(level) for level in SumTree(5).nodes] == [1, 2, 4, 8]
    tree.set(3, 7.0)
    assert tree.max_recorded_priority == 7.0


def test_sum_tree_errors() -> None:
    tree = SumTree(3)
    with pytest.raises(Exception, match="empty"):
        tree.sample()
    with pytest.raises(Exception, match="empty"):
        tree.stratified_sample(2)
    with pytest.raises(ValueError):
        tree.set(0, -1.0)
    tree.set(0, 2.0)
    tree.set(2, 0.5)
    with pytest.raises(Exception, match="query_value"):
        tree.sample(query_value=3.0)  # beyond the total sum
    with pytest.raises(ValueError):
        tree.sample(query_value=1.5)
    with pytest.raises(ValueError):
        SumTree(0)


def test_sum_tree_sampling_matches_the_core_tree() -> None:
    tree, core = SumTree(6), rr.SumTree(6)
    prios = np.array([0.0, 1.0, 2.0, 0.0, 3.0, 4.0])
    for i, p in enumerate(prios):
        tree.set(i, p)
    core.set(np.arange(6), prios)
    queries = np.linspace(0.0, 1.0, 41)
    got = [tree.sample(float(q)) for q in queries]
    assert got == core.find_prefix_sum(queries * core.total).tolist()
    random.seed(0)
    strat = tree.stratified_sample(5)
    random.seed(0)
    assert tree.stratified_sample(5) == strat and all(prios[i] > 0 for i in strat)
    random.seed(1)
    draws = [tree.sample() for _ in range(4000)]
    counts = np.bincount(draws, minlength=6)[[1, 2, 4, 5]]
    assert stats.chisquare(counts, prios[[1, 2, 4, 5]] / 10 * 4000).pvalue > 1e-3


# ---------------------------------------------------------------------- DataFrame export
def test_pre_timeline_df() -> None:
    """reagent 0.1's columns and values (more in test_reagent_timeline_df_forced.py)."""
    ids = [ReplayElement("mdp_id", (), np.int64), ReplayElement("sequence_number", (), np.int64)]
    buf = make(extra_storage_types=[*ids, LOG_PROB])
    for e, n in enumerate([3, 2]):
        for t in range(n):
            buf.add(obs_of(e, t), t % 3, float(t + 1), t == n - 1, e, t, -float(t))
    df = replay_buffer_to_pre_timeline_df(True, buf)
    assert list(df.columns) == [
        "ds",
        "state_features",
        "action",
        "mdp_id",
        "sequence_number",
        "action_probability",
        "reward",
        "metrics",
        "possible_actions_mask",
        "possible_actions",
    ]
    assert len(df) == buf.size == 5
    assert df.mdp_id.tolist() == [[0], [0], [0], [1], [1]]
    assert df.sequence_number.tolist() == [0, 1, 2, 0, 1]
    assert df.action.tolist() == ["0", "1", "2", "0", "1"]
    assert df.state_features[0] == {0: 1.0, 1: 1.0}
    assert df.reward.tolist() == [1.0, 2.0, 3.0, 1.0, 2.0]
    assert df.metrics[1] == {"reward": 2.0}
    assert df.action_probability[0] == pytest.approx(1.0)  # exp(-0)
    assert df.action_probability[1] == pytest.approx(np.exp(-1.0))
    assert df.possible_actions.tolist() == [["0", "1", "2"]] * 2 + [[]] + [["0", "1", "2"], []]
    with pytest.raises(RuntimeError):  # 0.1: sample_index_batch(0) of an empty buffer
        replay_buffer_to_pre_timeline_df(True, make())
    continuous = make(action_shape=(2,), action_dtype=np.float32, extra_storage_types=ids)
    continuous.add(obs_of(0, 0), np.array([0.5, -0.5], np.float32), 1.0, True, 0, 0)
    with pytest.raises(AttributeError):  # 0.1: batch.log_prob
        replay_buffer_to_pre_timeline_df(False, continuous)


@settings(max_examples=20, deadline=None)
@given(
    k=st.integers(1, 3),
    n=st.integers(1, 3),
    cap=st.integers(8, 14),
    lengths=st.lists(st.integers(1, 7), min_size=1, max_size=6),
    last_terminal=st.booleans(),
    keep_validity=st.booleans(),
)
def test_load_rebuilds_any_ring(
    k: int, n: int, cap: int, lengths: list[int], last_terminal: bool, keep_validity: bool
) -> None:
    """Saved and loaded (with or without the validity file), any ring samples as before."""
    if cap < k + n:
        return
    kw = dict(stack_size=k, update_horizon=n, replay_capacity=cap, extra_storage_types=[LOG_PROB])
    buf = make(**kw)
    ref = RefReAgent(cap, k, n, G)
    drive(buf, ref, lengths, last_terminal)
    with tempfile.TemporaryDirectory() as tmp:
        buf.save(tmp, 1)
        if not keep_validity:
            os.remove(os.path.join(tmp, "_is_valid_ckpt.1.gz"))
        loaded = make(**kw)
        loaded.load(tmp, 1)
    assert loaded._is_valid.tolist() == ref.valid.tolist()
    assert loaded.add_count == ref.add_count
    if buf.size:
        a, b = buf.sample_all_valid_transitions(), loaded.sample_all_valid_transitions()
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x.numpy(), y.numpy())
    drive(buf, ref, [3])
    drive(loaded, RefReAgent(cap, k, n, G), [3])
    assert loaded._is_valid.tolist() == buf._is_valid.tolist() == ref.valid.tolist()


def test_prioritized_probabilities_agree_with_the_native_core() -> None:
    """A native rr.PrioritizedReplayBuffer (alpha 1, eps 0) with the same steps and priorities
    draws ids with P(i) = p_i / sum p: exactly the adapter's priorities normalised."""
    buf = make(PrioritizedReplayBuffer, replay_capacity=20)
    fill(buf, [4, 3])
    prios = np.array([1.0, 2.0, 0.5, 4.0, 3.0, 0.25, 1.5])
    buf.set_priority(np.arange(7, dtype=np.int32), prios)
    native = rr.PrioritizedReplayBuffer(
        20, {"obs": rr.Field((2,), np.float32)}, alpha=1.0, beta=1.0, eps=0.0, seed=0
    )
    for e, n in enumerate([4, 3]):
        for t in range(n):
            done = t == n - 1
            native.add(
                obs=obs_of(e, t),
                reward=float(t + 1),
                terminated=done,
                truncated=False,
                **({"next_obs": np.zeros(2, np.float32)} if done else {}),
            )
    native.update_priorities(np.arange(7), prios)
    drawn = native.sample(16)
    slots = buf._slots_of_ids(drawn.ids)
    np.testing.assert_allclose(
        drawn.probabilities, buf.get_priority(slots.astype(np.int32)) / prios.sum()
    )
    batch = buf.sample_transition_batch(batch_size=len(slots), indices=slots)
    np.testing.assert_array_equal(
        batch.sampling_probabilities.reshape(-1).numpy(), prios[drawn.ids].astype(np.float32)
    )
    np.testing.assert_array_equal(batch.reward.reshape(-1).numpy(), drawn.reward)
