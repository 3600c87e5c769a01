"""Experiences from the nnabla-rl front-end's columnar store behave as nnabla-rl's stored objects.

nnabla-rl 0.16.0 keeps the appended experience objects (``ReplayBuffer.append`` puts the
object in its ring or deque; ``__getitem__`` and ``sample_indices`` return ``self._buffer[i]``),
so what a user does with a stored experience is what can be done with the appended tuple:
``experience == buffer[i]`` is True (Python's tuple ``==`` meets the same element objects and
its identity shortcut makes each pair equal, arrays included), it unpacks, it is a tuple, it
pickles, and ``nnabla_rl.utils.data.marshal_experiences`` stacks a list of them. nnabla-rl
0.9.0's own tests do ``assert experience == buffer[index]`` on sampled tuples of arrays
(ported in ``nnabla_rl_upstream/test_prioritized_replay_buffer.py``).
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlreplay.compat.nnabla_rl._stored import StoredTuple, stored_equal
from rlreplay.compat.nnabla_rl.replay_buffer import ReplayBuffer
from rlreplay.compat.nnabla_rl.replay_buffers import (
    DecorableReplayBuffer,
    PrioritizedReplayBuffer,
    TrajectoryReplayBuffer,
)
from rlreplay.compat.nnabla_rl.utils.data import marshal_experiences


def _experience(t: int, *, goal: bool = False) -> tuple[Any, ...]:
    s: Any = np.full(3, t, np.float32)
    s_next: Any = np.full(3, t + 1, np.float32)
    if goal:
        s = (s, np.zeros(2), np.full(2, float(t)))
        s_next = (s_next, np.zeros(2), np.full(2, t + 1.0))
    return (s, np.array([t % 2]), float(t), 1.0, s_next, {"t": t})


def _filled(buffer: Any, n: int, *, goal: bool = False) -> list[tuple[Any, ...]]:
    experiences = [_experience(t, goal=goal) for t in range(n)]
    for e in experiences:
        buffer.append(e)
    assert type(buffer[0]) is StoredTuple  # the columnar store: rebuilt tuples
    return experiences


@pytest.mark.parametrize("goal", [False, True])
@pytest.mark.parametrize("make", [lambda: ReplayBuffer(), lambda: ReplayBuffer(capacity=8)])
def test_stored_experience_equals_the_appended_one_either_side(make: Any, goal: bool) -> None:
    buffer = make()
    experiences = _filled(buffer, 6, goal=goal)
    for i, e in enumerate(experiences):
        assert e == buffer[i] and buffer[i] == e and buffer[i] == buffer[i]
        assert not (e != buffer[i]) and not (buffer[i] != e)  # noqa: SIM202 (tests !=)
        assert buffer[i] != experiences[(i + 1) % 6] and experiences[(i + 1) % 6] != buffer[i]
        assert buffer[i] in experiences  # list membership: ==, as with nnabla-rl's objects
        assert isinstance(buffer[i], tuple)
        _s, _a, r, _non_terminal, _s_next, info = buffer[i]
        assert info is e[5] and r == e[2]
        assert buffer[i][0] == e[0] if goal else np.array_equal(buffer[i][0], e[0])
    assert buffer[2] != [*experiences[2]]  # a tuple is never equal to a list, as in Python


def test_sampled_experiences_equal_buffer_at_their_indices() -> None:
    buffer = PrioritizedReplayBuffer(capacity=50, seed=3)
    _filled(buffer, 40)
    experiences, _ = buffer.sample(num_samples=8)
    for e in experiences:
        matches = [i for i in range(len(buffer)) if buffer[i] == e]
        assert len(matches) == 1  # every experience differs (its reward is t)
        assert e == buffer[matches[0]]
    buffer.update_priorities(np.zeros(8))
    again, _ = buffer.sample_indices([5, 7])
    assert again == [buffer[5], buffer[7]] and again[0] == _experience(5)
    first = ReplayBuffer(capacity=20, seed=1)
    kept = _filled(first, 10)
    sampled, _ = first.sample(num_samples=4, num_steps=2)
    for step in sampled:
        assert all(e in kept for e in step)


def test_pickle_marshal_and_reappend() -> None:
    buffer = ReplayBuffer(capacity=10)
    experiences = _filled(buffer, 5)
    loaded = pickle.loads(pickle.dumps(buffer[3]))
    assert loaded == experiences[3] and loaded == buffer[3] and isinstance(loaded, tuple)
    s, _a, r, _non_terminal, _s_next, info = marshal_experiences([buffer[i] for i in range(5)])
    assert s.shape == (5, 3) and r.shape == (5, 1) and info["t"].tolist() == [[t] for t in range(5)]
    other = ReplayBuffer(capacity=10)
    for i in range(5):
        other.append(buffer[i])  # copying experiences between buffers keeps them columnar
    assert type(other[0]) is StoredTuple  # still the columnar store
    assert all(other[i] == experiences[i] for i in range(5))


def test_copies_on_append_still_protect_stored_data() -> None:
    # deliberate difference 1: an environment that reuses its observation array
    buffer = ReplayBuffer(capacity=10)
    obs = np.zeros(3, np.float32)
    for t in range(3):
        s = obs.copy()
        obs[:] = t + 1  # in place
        buffer.append((s, np.array([0]), 0.0, 1.0, obs, {}))
    assert np.array_equal(buffer[0][4], np.full(3, 1, np.float32))
    assert buffer[0][4] is not obs and buffer[0] != buffer[1]


def test_hash_and_object_store_are_tuples_and_objects() -> None:
    assert hash(StoredTuple((1, "a"))) == hash((1, "a"))
    with pytest.raises(TypeError):
        hash(StoredTuple((np.zeros(2),)))  # an array is unhashable, as in a plain tuple
    decorable = DecorableReplayBuffer(capacity=4, decor_fun=lambda e: e)
    decorable.append(7)
    assert decorable[0] == 7  # the object store hands out the object itself
    trajectories = TrajectoryReplayBuffer()
    for e in _filled_list(4):
        trajectories.append(e)
    assert type(trajectories[0]) is StoredTuple
    assert len(trajectories) == 4 and trajectories[1] == _filled_list(4)[1]


def _filled_list(n: int) -> list[tuple[Any, ...]]:
    out = [_experience(t) for t in range(n)]
    return [(*e[:3], float(t < n - 1), *e[4:]) for t, e in enumerate(out)]


def test_nan_values_equal_their_copies() -> None:
    # nnabla-rl: the stored object is the appended one, so a NaN compares equal (identity)
    buffer = ReplayBuffer(capacity=4)
    e = (np.array([np.nan, 1.0]), np.array([0]), float("nan"), 1.0, np.ones(2), {})
    buffer.append(e)
    assert buffer[0] == e and e == buffer[0]


_values = st.recursive(
    st.one_of(
        st.integers(-5, 5),
        st.floats(allow_nan=True, width=32),
        st.text(max_size=2),
        st.builds(lambda n, v: np.full(n, v), st.integers(0, 3), st.integers(-2, 2)),
    ),
    lambda inner: st.one_of(
        st.tuples(inner, inner),
        st.lists(inner, max_size=3),
        st.dictionaries(st.text(max_size=1), inner, max_size=2),
    ),
    max_leaves=6,
)


@settings(max_examples=150, deadline=None)
@given(_values)
def test_stored_equal_holds_for_a_value_and_its_copy(value: Any) -> None:
    assert stored_equal(value, value) and stored_equal(value, pickle.loads(pickle.dumps(value)))
    wrapped = StoredTuple((value, 1))
    assert wrapped == (value, 1) and (value, 1) == wrapped and not (wrapped != (value, 1))  # noqa: SIM202
    assert wrapped != (value, 2)
