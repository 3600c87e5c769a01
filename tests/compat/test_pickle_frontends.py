"""Pickling and copying the front-ends' buffers, as the original libraries' buffers behave.

The oracles, driven side by side from /tmp (never imported here):

* nnabla-rl 0.16.0: every buffer is a plain Python object over ``RingBuffer``/``deque`` and
  sum/min trees of Python lists, so ``pickle`` and ``copy.deepcopy`` copy it by value (its
  draws come from the global ``nnabla_rl.random.drng`` before and after);
  ``DecorableReplayBuffer(capacity, decor_fun)`` pickles ``decor_fun`` by reference, so a
  lambda fails to pickle (``AttributeError: Can't pickle local object``) and deep-copies;
  ``copy.copy`` shares the data holder: an append through either object is seen by both.
* ReAgent 0.1: ``copy.deepcopy`` and ``copy.copy`` of ``ReplayBuffer`` and
  ``PrioritizedReplayBuffer`` work; ``pickle`` raises ``PicklingError``: ``__init__`` makes
  ``self._batch_type = collections.namedtuple("batch_type", ...)``, a class pickle cannot
  find by name. Unseeded draws come from NumPy's global generator.
* ALF: ``ReplayBuffer.__init__`` keeps ``threading.RLock()`` without ``allow_multiprocess``,
  so ``pickle`` and ``copy.deepcopy`` raise ``TypeError: cannot pickle '_thread.RLock'
  object``; ``copy.copy`` works.
* keras-gym 0.2.17: plain NumPy arrays: pickles and deep-copies.

Side by side (2026, scratch drivers): every nnabla-rl class's pickle/deepcopy copy gave the
same 6 further appends, draws and priority updates as 0.16.0's copy; ReAgent's deepcopy and
copy 0 differences in 5 draws (uniform, prioritized with ``set_priority``).
"""

from __future__ import annotations

import copy
import pickle
import random
from collections.abc import Callable
from typing import Any

import gymnasium
import numpy as np
import pytest
import torch

import rlreplay.compat.nnabla_rl.replay_buffers as RB
from rlreplay.compat.alf import TensorSpec
from rlreplay.compat.alf.replay_buffer import ReplayBuffer as AlfBuffer
from rlreplay.compat.keras_gym.caching import ExperienceReplayBuffer
from rlreplay.compat.nnabla_rl.replay_buffer import ReplayBuffer as NnablaBuffer
from rlreplay.compat.nnabla_rl.utils.reproductions import set_global_seed
from rlreplay.compat.reagent.circular_replay_buffer import ReplayBuffer as ReAgentBuffer
from rlreplay.compat.reagent.prioritized_replay_buffer import (
    PrioritizedReplayBuffer as ReAgentPrioritized,
)

COPIES: dict[str, Callable[[Any], Any]] = {
    "pickle": lambda b: pickle.loads(pickle.dumps(b)),
    "deepcopy": copy.deepcopy,
}


# ---------------------------------------------------------------------------- nnabla-rl
def exp(t: int) -> tuple[Any, ...]:
    s, s_next = np.full(2, t, np.float32), np.full(2, t + 1, np.float32)
    return (s, np.array([t % 3]), float(t % 4), 0.0 if t % 9 == 8 else 1.0, s_next, {"t": t})


def goal_exp(t: int) -> tuple[Any, ...]:
    g = np.full(2, -1.0)
    s = (np.full(3, float(t)), g, np.full(2, float(t)))
    s_next = (np.full(3, t + 1.0), g, np.full(2, t + 1.0))
    return (s, np.zeros(1), -1.0, 0.0 if t % 9 == 8 else 1.0, s_next, {})


def atari_exp(t: int) -> tuple[Any, ...]:
    frame = np.full((84, 84), t % 256, np.uint8)
    return (frame, t % 4, 1.0, 0.0 if t % 9 == 8 else 1.0, frame + 1, {})


def distance(achieved: Any, goal: Any, info: dict[str, Any]) -> float:
    return float(np.asarray(goal)[0] - np.asarray(achieved)[0])


def keep(experience: Any) -> Any:
    return experience


NNABLA: dict[str, tuple[Callable[[], Any], Callable[[int], Any]]] = {
    "ReplayBuffer": (lambda: NnablaBuffer(50), exp),
    "unbounded": (lambda: NnablaBuffer(), exp),
    "objects": (lambda: NnablaBuffer(50), lambda t: ("obj", t) if t % 7 == 3 else exp(t)),
    "Decorable": (lambda: RB.DecorableReplayBuffer(50, keep), exp),
    "Replacement": (lambda: RB.ReplacementSamplingReplayBuffer(50), exp),
    "Hindsight": (lambda: RB.HindsightReplayBuffer(distance, capacity=50), goal_exp),
    "Proportional": (lambda: RB.ProportionalPrioritizedReplayBuffer(50), exp),
    "RankBased": (lambda: RB.RankBasedPrioritizedReplayBuffer(50, sort_interval=7), exp),
    "Prioritized": (lambda: RB.PrioritizedReplayBuffer(50, variant="rank_based"), exp),
    "Atari": (lambda: RB.MemoryEfficientAtariBuffer(50), atari_exp),
    "ProportionalAtari": (lambda: RB.ProportionalPrioritizedAtariBuffer(50), atari_exp),
}


def filled(name: str) -> Any:
    make, step = NNABLA[name]
    buffer = make()
    for t in range(23):
        buffer.append(step(t))
    buffer.sample(2)
    if hasattr(buffer, "update_priorities"):
        buffer.update_priorities(np.array([0.3, 2.0]))
    for t in range(23, 26):  # staged, not yet written to the core
        buffer.append(step(t))
    return buffer


def plain(x: Any) -> Any:
    """Comparable form of what a buffer returns."""
    if isinstance(x, np.ndarray):
        return ("array", x.dtype.str, x.shape, x.tolist())
    if isinstance(x, list | tuple):
        return [plain(v) for v in x]
    if isinstance(x, dict):
        return sorted((k, plain(v)) for k, v in x.items())
    return x.item() if isinstance(x, np.generic) else x


def nnabla_future(buffer: Any, step: Callable[[int], Any], t0: int = 26) -> list[Any]:
    set_global_seed(7)
    out: list[Any] = [len(buffer), plain([buffer[i] for i in range(len(buffer))])]
    for t in range(t0, t0 + 6):
        buffer.append(step(t))
        experiences, info = buffer.sample(3)
        out.append(plain((experiences, info)))
        if "weights" in info:
            buffer.update_priorities(np.arange(1.0, 4.0) * (t % 3 + 1))
    return out


@pytest.mark.parametrize("how", sorted(COPIES))
@pytest.mark.parametrize("name", sorted(NNABLA))
def test_nnabla_rl_copies_hold_the_same_and_continue_the_same(name: str, how: str) -> None:
    original = filled(name)
    twin = COPIES[how](original)
    assert type(twin) is type(original)
    step = NNABLA[name][1]
    assert nnabla_future(twin, step) == nnabla_future(original, step)


def test_nnabla_rl_copies_are_independent_and_draw_from_the_global_generator() -> None:
    original = filled("ReplayBuffer")
    twin = pickle.loads(pickle.dumps(original))
    twin.append(exp(99))
    assert len(twin) == len(original) + 1 and original[len(original) - 1][0][0] == 25.0
    draws = []
    for buffer in (original, twin, original):
        set_global_seed(3)  # nnabla-rl's buffers draw from the global drng, copies too
        draws.append(plain(buffer.sample(4)[0]))
    assert draws[0] == draws[2]


def test_nnabla_rl_lambda_decor_fun_fails_to_pickle_as_in_nnabla_rl() -> None:
    buffer = RB.DecorableReplayBuffer(10, lambda e: e)
    for t in range(5):
        buffer.append(exp(t))
    with pytest.raises((AttributeError, pickle.PicklingError), match="lambda"):
        pickle.dumps(buffer)
    twin = copy.deepcopy(buffer)  # the copy module keeps functions
    assert plain(twin[4]) == plain(buffer[4]) and len(twin) == 5


@pytest.mark.parametrize("name", ["ReplayBuffer", "Proportional", "Prioritized", "Atari"])
def test_nnabla_rl_shallow_copy_shares_the_data_as_nnabla_rl(name: str) -> None:
    original = filled(name)
    alias = copy.copy(original)
    step = NNABLA[name][1]
    alias.append(step(40))
    assert len(alias) == len(original)
    assert plain(original[len(original) - 1]) == plain(alias[len(alias) - 1])
    if name != "Atari":  # (Atari gives stacks back)
        assert plain(original[len(original) - 1]) == plain(step(40))
    if "weights" not in original.sample(1)[1]:  # (prioritized draws also anneal beta)
        set_global_seed(1)
        through_alias = plain(alias.sample(3)[0])
        set_global_seed(1)
        assert plain(original.sample(3)[0]) == through_alias


# ---------------------------------------------------------------------------- ReAgent
def reagent(cls: type[Any]) -> Any:
    buffer = cls(observation_shape=(3,), stack_size=2, replay_capacity=30, batch_size=4,
                 update_horizon=2, gamma=0.9)  # fmt: skip
    for t in range(40):
        extra = (1.0 + t % 3,) if cls is ReAgentPrioritized else ()
        buffer.add(np.full(3, t, np.float32), t % 2, float(t), t % 7 == 6, *extra)
    return buffer


def reagent_future(buffer: Any) -> list[Any]:
    out = []
    for t in range(40, 45):
        extra = (2.0,) if isinstance(buffer, ReAgentPrioritized) else ()
        buffer.add(np.full(3, t, np.float32), t % 2, float(t), t % 7 == 6, *extra)
        # unseeded draws: NumPy's and Python's global generators
        np.random.seed(t)  # noqa: NPY002
        random.seed(t)
        batch = buffer.sample_transition_batch(batch_size=4)
        out.append({k: getattr(batch, k).numpy().tolist() for k in batch._fields})
        if isinstance(buffer, ReAgentPrioritized):
            ids = batch.indices.numpy().reshape(-1).astype(np.int32)
            buffer.set_priority(ids, np.arange(1.0, 1.0 + len(ids), dtype=np.float32))
    return out


@pytest.mark.parametrize("how", [copy.deepcopy, copy.copy])
@pytest.mark.parametrize("cls", [ReAgentBuffer, ReAgentPrioritized])
def test_reagent_copies_continue_as_the_original(cls: type[Any], how: Any) -> None:
    twin = how(reagent(cls))
    assert reagent_future(twin) == reagent_future(reagent(cls))
    if how is copy.deepcopy:  # independent: the original goes on as if never copied
        original = reagent(cls)
        twin = how(original)
        reagent_future(twin)
        assert reagent_future(original) == reagent_future(reagent(cls))


@pytest.mark.parametrize("cls", [ReAgentBuffer, ReAgentPrioritized])
def test_reagent_pickle_fails_as_in_reagent_0_1(cls: type[Any]) -> None:
    buffer = reagent(cls)
    with pytest.raises(pickle.PicklingError):
        pickle.dumps(buffer)
    assert len(reagent_future(buffer)) == 5  # still usable


# ---------------------------------------------------------------------------- keras-gym
class FakeEnv:
    """keras-gym's buffer reads only ``action_space`` and ``num_frames`` from its env."""

    def __init__(self, num_frames: int) -> None:
        self.action_space = gymnasium.spaces.Discrete(3)
        self.num_frames = num_frames


@pytest.mark.parametrize("how", sorted(COPIES))
@pytest.mark.parametrize(("frames", "n"), [(1, 1), (3, 2)])
def test_keras_gym_copies_after_adds(frames: int, n: int, how: str) -> None:
    buffer = ExperienceReplayBuffer(FakeEnv(frames), 20, batch_size=4, bootstrap_n=n,
                                    gamma=0.9, random_seed=3)  # fmt: skip
    shape = (1, 2, frames) if frames > 1 else (1, 2)
    for t in range(30):
        buffer.add(np.full(shape, t + 1.0), t % 3, 1.0, t % 8 == 7, t // 8)
    twin = COPIES[how](buffer)
    for b in (buffer, twin):
        b.add(np.full(shape, 31.0), 0, 1.0, False, 3)
    for x, y in zip(buffer.sample(), twin.sample(), strict=True):
        np.testing.assert_array_equal(x, y)


# ---------------------------------------------------------------------------- ALF
def test_alf_without_allow_multiprocess_fails_as_alf_on_its_rlock() -> None:
    buffer = AlfBuffer(TensorSpec((2,)), 2, max_length=4)
    buffer.add_batch(torch.ones(2, 2))
    for copier in COPIES.values():
        with pytest.raises(TypeError, match="RLock"):
            copier(buffer)
    alias = copy.copy(buffer)  # works in ALF too (a shallow copy pickles nothing)
    assert int(alias.total_size) == int(buffer.total_size) == 2
