"""nnabla-rl front-end as a drop-in (issue 13): what nnabla-rl accepts, done as nnabla-rl does.

The reference model is nnabla-rl's own storage, whose code the seed describes: a
``RingBuffer`` (bounded) or ``deque`` (unbounded) of the appended objects, read back by
``self._buffer[index]``; ``sample_indices`` reads ``buffer[index + j]`` for each step ``j``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlreplay.compat.nnabla_rl._stored import StoredTuple
from rlreplay.compat.nnabla_rl.replay_buffer import ReplayBuffer
from rlreplay.compat.nnabla_rl.replay_buffers import (
    DecorableReplayBuffer,
    HindsightReplayBuffer,
    MemoryEfficientAtariBuffer,
    TrajectoryReplayBuffer,
)


def step(t: int, *, jump: bool = False, end: str = "") -> tuple[Any, ...]:
    """A fitting experience of step ``t`` (``s = t``, ``s_next = t + 1``, or a jump)."""
    s = np.full(2, float(t), np.float32)
    s_next = np.full(2, float(t + (7 if jump else 1)), np.float32)
    info: dict[str, Any] = {"t": t}
    if end == "timelimit":
        info["TimeLimit.truncated"] = True
    return (s, np.array([t % 3]), float(t), 0.0 if end == "terminal" else 1.0, s_next, info)


def _kind(x: Any) -> type:
    return tuple if type(x) is StoredTuple else type(x)


def equal(got: Any, want: Any) -> bool:
    """Equal values of the same kinds (arrays by dtype, shape and bytes; dicts by identity).

    The columnar store's ``StoredTuple`` (a tuple comparing as the appended one) is a tuple.
    """
    if isinstance(want, tuple | list):
        return (
            _kind(got) is _kind(want)
            and len(got) == len(want)
            and all(equal(g, w) for g, w in zip(got, want, strict=True))
        )
    if isinstance(want, np.ndarray):
        return (
            isinstance(got, np.ndarray)
            and got.dtype == want.dtype
            and got.shape == want.shape
            and got.tobytes() == want.tobytes()
        )
    if isinstance(want, dict):
        return got is want
    return type(got) is type(want) and bool(got == want)


ODD: list[Any] = [
    7,
    "text",
    {"s": np.zeros(2)},
    (np.zeros(2, np.float32), np.array([0]), 0.0, 1.0, np.ones(2, np.float32)),  # no info
    (np.zeros(2), np.array([0]), 0.0, 1.0, np.ones(2), {}),  # float64 states
    (np.zeros(2, np.float32), 1.5, 0.0, 1.0, np.ones(2, np.float32), {}),  # a Python action
    ("mixed", np.zeros(3), None),
]


@settings(max_examples=60, deadline=None)
@given(
    capacity=st.one_of(st.none(), st.integers(1, 7)),
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("fit"), st.sampled_from(["", "terminal", "timelimit", "jump"])),
            st.tuples(st.just("odd"), st.integers(0, len(ODD) - 1)),
        ),
        min_size=1,
        max_size=25,
    ),
    reads=st.lists(st.integers(-10, 10), max_size=5),
)
def test_any_sequence_of_experiences_against_nnabla_rl_storage(
    capacity: int | None, ops: list[tuple[str, Any]], reads: list[int]
) -> None:
    """Fitting and odd experiences in any order: positions, values and errors as nnabla-rl."""
    buffer = ReplayBuffer(capacity=capacity, seed=0)
    model: list[Any] = []
    for t, (kind, arg) in enumerate(ops):
        if kind == "fit":
            e = step(t, jump=arg == "jump", end="" if arg == "jump" else arg)
        else:
            e = ODD[arg]
        buffer.append(e)
        model.append(e)
        if capacity is not None:
            model = model[-capacity:]
        assert len(buffer) == len(model)
    assert all(equal(buffer[i], w) for i, w in enumerate(model))
    n = len(model)
    for i in reads:
        if capacity is None and -n <= i < n:
            assert equal(buffer[i], model[i])  # deque: negative positions from the end
        elif capacity is not None and 0 <= i < n:
            assert equal(buffer[i], model[i])
        else:
            with pytest.raises(KeyError if capacity is not None else IndexError):
                buffer[i]
    if n >= 2:
        steps, info = buffer.sample_indices([0, n - 2], num_steps=2)
        assert isinstance(steps, tuple) and info["weights"].shape == (2, 1)
        assert equal(steps[0][1], model[n - 2]) and equal(steps[1][1], model[n - 1])
        experiences, _ = buffer.sample(num_samples=n)  # distinct: every one once
        assert sorted(map(repr, experiences)) == sorted(map(repr, model))


def test_a_cut_episode_ends_in_the_core_with_its_own_s_next() -> None:
    """A changed ``s`` cuts the running episode by ``end_episode``: ``s_next`` is the final."""
    buffer = ReplayBuffer(capacity=10)
    first, second = step(0, jump=True), step(3)
    buffer.append(first)
    assert len(buffer) == 1
    buffer._core_size()  # what reads the core writes the staged appends first
    core = buffer._core
    assert core is not None and len(core) == 1
    assert core.steps_to_episode_end(np.array([0])).tolist() == [-1]
    buffer.append(second)
    assert len(buffer) == 2
    buffer._core_size()
    assert core.steps_to_episode_end(np.array([0, 1])).tolist() == [0, -1]
    batch = core.get_transitions(np.array([0]))
    assert batch.truncated.tolist() == [True] and not batch.terminated[0]
    assert np.array_equal(batch.next_obs[0], first[4])  # the final observation is s_next
    assert equal(buffer[0], first) and equal(buffer[1], second)


def test_non_terminal_comes_back_as_appended() -> None:
    """nnabla-rl hands back the appended tuple: ``non_terminal`` keeps its type and value."""
    values: list[Any] = [1.0, 1, True, np.float32(1.0), 0.5, 0, np.int64(0), False, 0.0]
    buffer = ReplayBuffer(capacity=20)
    for t, nt in enumerate(values):
        s, a, r, _, s_next, info = step(t)
        buffer.append((s, a, r, nt, s_next, info))
    assert buffer._objects is None  # numbers all fit the columnar store
    for i, nt in enumerate(values):
        assert buffer[i][3] is nt or (type(buffer[i][3]) is type(nt) and buffer[i][3] == nt)
    buffer._core_size()  # the staged experiences are written (as before any read of the core)
    core = buffer._core
    assert core is not None and buffer._core_offset == 0
    ends = core.steps_to_episode_end(np.arange(len(values))).tolist()
    assert ends[5:] == [0, 0, 0, 0]  # 0, int64 0, False and 0.0 are terminal: non_terminal == 0


def test_unbounded_object_store_and_columnar_agree() -> None:
    """The object store gives back what the columnar store gave, in the same order."""
    fits = [step(t) for t in range(6)]
    a, b = ReplayBuffer(seed=3), ReplayBuffer(seed=3)
    a.append_all(fits)
    b.append_all(fits)
    b.append("odd")  # b moves to its object store
    assert a._objects is None and b._objects is not None
    assert all(equal(b[i], a[i]) for i in range(6))
    ea, _ = a.sample_indices([4, 0, 2], num_steps=2)
    eb, _ = b.sample_indices([4, 0, 2], num_steps=2)
    assert all(equal(x, y) for x, y in zip(ea, eb, strict=True))


def test_decorable_buffer_object_store_decorates_as_stored() -> None:
    buffer = DecorableReplayBuffer(capacity=3, decor_fun=lambda e: [e], seed=0)
    last = step(2)
    buffer.append_all([step(0), 5, last])
    assert buffer[1] == [5] and buffer[2][0] is last
    experiences, _ = buffer.sample_indices([0, 1], num_steps=2)
    assert experiences[1][0] == [5]


def test_columnar_only_buffers_cast_as_numpy_assignment() -> None:
    """Where a value goes into a preallocated array, it is cast as ``arr[i] = value`` casts.

    (nnabla-rl's Atari buffer stores ``(s * 255.0).astype(np.uint8)``.)
    """
    frames = np.full((4, 84, 84), 0.999)  # 0.16.0 stores (84, 84) frames only
    atari = MemoryEfficientAtariBuffer(capacity=5)
    atari.append((frames, 0, 0.0, 1.0, frames, {}))
    atari.append((frames.astype(np.float32), np.int8(1), 1, 1.0, frames, {}))
    assert len(atari) == 2 and type(atari[1][1]) is np.int8 and atari[1][2] == 1  # as appended
    # (0.999 * 255.0).astype(np.uint8) == 254: truncated as nnabla-rl's astype
    assert np.all(atari[1][0] == np.float32(254 / 255))

    def reward(achieved: Any, goal: Any, info: Any) -> float:
        return 0.0

    # the hindsight buffer keeps experiences as appended (nnabla-rl's ring of objects)
    her = HindsightReplayBuffer(reward, hindsight_prob=0.0, capacity=4)
    goal = (np.zeros(3), np.zeros(2), np.zeros(2))
    her.append((goal, np.zeros(1), 0.0, 1.0, goal, {}))
    as_int = tuple(np.ones_like(g, np.int32) for g in goal)
    her.append((as_int, np.ones(1, np.float32), 1, 1.0, as_int, {}))
    got = her[1]
    assert got[0][0].dtype == np.int32 and type(got[2]) is int and got[2] == 1


def test_trajectory_buffer_append_then_odd_trajectory_keeps_everything_in_order() -> None:
    buffer = TrajectoryReplayBuffer(seed=0)
    buffer.append_all([step(0), step(1), step(2, end="terminal")])  # via append: one trajectory
    buffer.append(step(10))  # a running trajectory, not visible yet
    assert buffer.trajectory_num == 1 and len(buffer) == 3
    buffer.append_trajectory(("a", "b"))  # closes the running one, then the object store
    assert buffer._objects is not None
    assert buffer.trajectory_num == 3 and len(buffer) == 6
    assert buffer.get_trajectory(1)[0][0][0] == 10.0
    assert buffer.get_trajectory(2) == ("a", "b")
    trajectories, _ = buffer.sample_trajectories(num_samples=3)
    assert sorted(len(t) for t in trajectories) == [1, 2, 3]


def test_unseeded_buffers_draw_from_nnabla_rl_global_generator() -> None:
    """nnabla-rl's ``_random_indices``: ``rl.random.drng.choice(max_index, size=num_samples,
    replace=False)``; ``set_global_seed`` replaces ``drng`` with a seeded generator."""
    import rlreplay.compat.nnabla_rl.random as rl_random
    from rlreplay.compat.nnabla_rl.utils.reproductions import set_global_seed

    objects = list(range(10))
    set_global_seed(11)
    buffer = ReplayBuffer(capacity=10)
    buffer.append_all(objects)
    drawn, _ = buffer.sample(num_samples=4)
    want = np.random.default_rng(11).choice(10, size=4, replace=False)
    assert drawn == [objects[i] for i in want]
    rl_random.seed(11)  # the same state: the same draw, from any unseeded buffer
    other = TrajectoryReplayBuffer()
    other.append_trajectory(objects)
    again, _ = other.sample(num_samples=4)
    assert again == drawn
    own = ReplayBuffer(capacity=10, seed=11)  # seed=: a generator of its own
    own.append_all(objects)
    state = rl_random.drng.bit_generator.state
    assert own.sample(num_samples=4)[0] == drawn
    assert rl_random.drng.bit_generator.state == state  # drng untouched


@settings(max_examples=40, deadline=None)
@given(
    capacity=st.one_of(st.none(), st.integers(1, 6)),
    ops=st.lists(
        st.sampled_from(["step", "jump", "terminal", "timelimit", "trajectory"]), max_size=30
    ),
)
def test_cached_core_size_is_the_cores(capacity: int | None, ops: list[str]) -> None:
    """The adapter's cached ``len(core)`` (a speed-up) always equals the core's own."""
    import rlreplay.compat.nnabla_rl.replay_buffer as rb_module

    plain = ReplayBuffer(capacity=capacity)
    trajectories = TrajectoryReplayBuffer(num_trajectories=capacity)
    old = rb_module._INITIAL_CAPACITY
    rb_module._INITIAL_CAPACITY = 4  # unbounded buffers grow (the core is rebuilt) early
    try:
        for t, op in enumerate(ops):
            if op == "trajectory":
                trajectories.append_trajectory([step(10 * t + j) for j in range(t % 3 + 1)])
            else:
                e = step(t, jump=op == "jump", end=op if op in ("terminal", "timelimit") else "")
                plain.append(e)
                trajectories.append(e)
            for buffer in (plain, trajectories):
                if buffer._core is not None:
                    assert buffer._core_size() == len(buffer._core)
    finally:
        rb_module._INITIAL_CAPACITY = old
