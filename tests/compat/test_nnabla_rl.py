"""nnabla-rl replay buffers front-end: seed behaviour, exact round trips, core agreement.

Experiences are built so that a state names its step: ``s`` of step ``t`` of an episode
starting at ``start`` is ``full(2, start + t)`` and ``s_next`` is ``full(2, start + t + 1)``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

import rlreplay as rr
import rlreplay.compat.nnabla_rl as rl
import rlreplay.compat.nnabla_rl.replay_buffer as rb_module
from rlreplay.compat.nnabla_rl._stored import StoredTuple
from rlreplay.compat.nnabla_rl.replay_buffer import ReplayBuffer
from rlreplay.compat.nnabla_rl.replay_buffers import (
    DecorableReplayBuffer,
    HindsightReplayBuffer,
    MemoryEfficientAtariBuffer,
    MemoryEfficientAtariTrajectoryBuffer,
    PrioritizedReplayBuffer,
    TrajectoryReplayBuffer,
)

P_CHI = 1e-3  # seeded chi-square tests: fail only on a real mismatch of the law


# ---------------------------------------------------------------------------- helpers
def episode(
    n: int, start: float, *, end: str = "terminal", tuple_state: bool = False
) -> list[tuple[Any, ...]]:
    """``n`` experiences of one episode; ``end``: terminal, truncated, timelimit or open."""
    out = []
    for t in range(n):
        s: Any = np.full(2, start + t, np.float32)
        s_next: Any = np.full(2, start + t + 1, np.float32)
        if tuple_state:
            s = (s, np.array([start + t], np.int64))
            s_next = (s_next, np.array([start + t + 1], np.int64))
        last = t == n - 1
        info: dict[str, Any] = {"t": t, "start": start}
        if last and end == "timelimit":
            info["TimeLimit.truncated"] = True
        non_terminal = 0.0 if last and end == "terminal" else 1.0
        out.append((s, np.array([t % 3]), float(start + t), non_terminal, s_next, info))
    return out


def _kind(x: Any) -> type:
    return tuple if type(x) is StoredTuple else type(x)


def same(got: Any, want: Any) -> bool:
    """Exact equality, kinds included (arrays: dtype, shape and bytes; dicts: identity).

    A tuple may come back as the columnar store's ``StoredTuple`` (a tuple that compares as
    the appended one; tests/compat/test_nnabla_rl_stored.py).
    """
    if isinstance(want, tuple | list):
        return (
            _kind(got) is _kind(want)
            and len(got) == len(want)
            and all(same(g, w) for g, w in zip(got, want, strict=True))
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


def all_items(buffer: ReplayBuffer) -> list[Any]:
    return [buffer[i] for i in range(len(buffer))]


def key(experience: tuple[Any, ...]) -> float:
    """The step value that names an experience."""
    s = experience[0]
    return float((s[0] if isinstance(s, tuple) else s)[0])


def fill(buffer: ReplayBuffer, experiences: list[tuple[Any, ...]]) -> ReplayBuffer:
    buffer.append_all(experiences)
    return buffer


MIXED = (
    episode(4, 0)
    + episode(3, 100, end="truncated")
    + episode(2, 200, end="timelimit")
    + episode(5, 300, end="open")
)


# ---------------------------------------------------------------------------- module layout
def test_module_paths_mirror_nnabla_rl() -> None:
    import rlreplay.compat.nnabla_rl.replay_buffers.decorable_replay_buffer as dec
    import rlreplay.compat.nnabla_rl.replay_buffers.hindsight_replay_buffer as her
    import rlreplay.compat.nnabla_rl.replay_buffers.memory_efficient_atari_buffer as atari
    import rlreplay.compat.nnabla_rl.replay_buffers.prioritized_replay_buffer as per
    import rlreplay.compat.nnabla_rl.replay_buffers.trajectory_replay_buffer as traj

    assert rl.ReplayBuffer is rl.replay_buffer.ReplayBuffer is ReplayBuffer
    assert rl.replay_buffers.DecorableReplayBuffer is dec.DecorableReplayBuffer
    assert rl.replay_buffers.HindsightReplayBuffer is her.HindsightReplayBuffer
    assert rl.replay_buffers.MemoryEfficientAtariBuffer is atari.MemoryEfficientAtariBuffer
    assert atari.MemoryEfficientAtariTrajectoryBuffer is MemoryEfficientAtariTrajectoryBuffer
    assert rl.replay_buffers.PrioritizedReplayBuffer is per.PrioritizedReplayBuffer
    assert rl.replay_buffers.TrajectoryReplayBuffer is traj.TrajectoryReplayBuffer
    for cls in (
        DecorableReplayBuffer,
        HindsightReplayBuffer,
        MemoryEfficientAtariBuffer,
        PrioritizedReplayBuffer,
        TrajectoryReplayBuffer,
    ):
        assert issubclass(cls, ReplayBuffer)  # "All replay_buffers are derived from ReplayBuffer"
    assert issubclass(MemoryEfficientAtariTrajectoryBuffer, TrajectoryReplayBuffer)
    assert rl.replay_buffers.__all__ == sorted(rl.replay_buffers.__all__)


# ---------------------------------------------------------------------------- ReplayBuffer
def test_capacity_property_and_checks() -> None:
    assert ReplayBuffer().capacity is None
    assert ReplayBuffer(capacity=7).capacity == 7
    # nnabla-rl: ``assert capacity is None or capacity >= 0``, then ``RingBuffer(maxlen=capacity)``
    # builds ``[None for _ in range(maxlen)]`` (TypeError for a float) and its append computes
    # ``% maxlen`` (ZeroDivisionError for 0, at the first append).
    with pytest.raises(AssertionError, match="capacity"):
        ReplayBuffer(capacity=-1)
    with pytest.raises(ValueError, match="capacity"):  # also an rr.ConfigError
        ReplayBuffer(capacity=-1)
    for bad in (1.5, "3"):
        with pytest.raises(TypeError):
            ReplayBuffer(capacity=bad)  # type: ignore[arg-type]
    assert ReplayBuffer(capacity=True).capacity == 1
    empty = ReplayBuffer(capacity=0)
    assert empty.capacity == 0 and len(empty) == 0
    with pytest.raises(ZeroDivisionError):
        empty.append(episode(1, 0)[0])
    with pytest.raises(ZeroDivisionError):
        empty.append("any object")
    assert len(empty) == 0
    with pytest.raises(ValueError, match="seed"):
        ReplayBuffer(seed=-1)


@pytest.mark.parametrize("tuple_state", [False, True])
def test_append_round_trip_is_exact(tuple_state: bool) -> None:
    exps = (
        episode(4, 0, tuple_state=tuple_state)
        + episode(3, 10, end="truncated", tuple_state=tuple_state)
        + episode(2, 20, end="timelimit", tuple_state=tuple_state)
        + episode(3, 30, end="open", tuple_state=tuple_state)
    )
    buffer = fill(ReplayBuffer(), exps)
    assert len(buffer) == len(exps)
    got = all_items(buffer)
    for g, w in zip(got, exps, strict=True):
        assert same(g, w), (g, w)
    assert [type(g[3]) for g in got] == [float] * len(exps)  # non_terminal: a Python float
    assert [g[5] for g in got] == [w[5] for w in exps]


def test_round_trip_keeps_kinds_of_values_and_extras() -> None:
    s0, s1, s2 = (np.array([0.5, -0.0]), np.array([0.0, 1.0]), np.array([2.0, 3.0]))
    info0: dict[str, Any] = {"a": 1}
    info1: dict[str, Any] = {}
    exps = [
        (s0, (np.int64(2), np.array([0.1, 0.2])), np.float32(1.5), 1, s1, info0, "extra"),
        (s1, (np.int64(0), np.array([0.3, 0.4])), np.float32(2.5), True, s2, info1, "more"),
    ]
    buffer = fill(ReplayBuffer(), exps)
    buffer.append((s2, (np.int64(1), np.array([0.5, 0.6])), np.float32(3.5), 0.5, s0, info1, 0))
    exps.append(buffer[2])  # non_terminal 0.5: not terminal; kept as given, as nnabla-rl does
    assert buffer[2][3] == 0.5
    assert buffer._objects is None  # columnar: kinds and dtypes are those of the first one
    for i, e in enumerate(exps):
        got = buffer[i]
        assert same(got[0], e[0]) and same(got[1], e[1]) and same(got[2], e[2])
        assert got[3] is e[3]  # non_terminal as appended (nnabla-rl keeps the object)
        assert same(got[4], e[4]) and got[5] is e[5] and got[6] == e[6]


def test_signed_zero_and_nan_states_come_back_bit_exact() -> None:
    """A next ``s`` equal by value but not by bits to ``s_next`` is an episode boundary."""
    s0, nxt, s1 = np.array([1.0, np.nan]), np.array([0.0, np.nan]), np.array([-0.0, np.nan])
    exps = [(s0, np.zeros(1), 0.0, 1.0, nxt, {}), (s1, np.zeros(1), 0.0, 0.0, s0, {})]
    buffer = fill(ReplayBuffer(), exps)
    assert same(buffer[0][4], nxt) and not np.signbit(buffer[0][4][0])
    assert same(buffer[1][0], s1) and np.signbit(buffer[1][0][0])


def test_episode_boundaries_reach_the_core() -> None:
    """non_terminal == 0 -> terminated; TimeLimit info or a changed s -> truncated."""
    buffer = fill(ReplayBuffer(), MIXED)
    core = buffer._core
    assert core is not None
    ids = np.arange(len(core))
    # every experience is in the core at once; the open episode is still running
    assert len(core) == len(MIXED) == len(buffer)
    ends = core.steps_to_episode_end(ids).tolist()
    assert ends == [3, 2, 1, 0, 2, 1, 0, 1, 0, -1, -1, -1, -1, -1]
    batch = core.get_transitions(ids[:9])
    assert batch.terminated.tolist() == [False] * 3 + [True] + [False] * 5
    assert batch.truncated.tolist() == [False] * 6 + [True, False, True]


@pytest.mark.parametrize(
    "odd",
    [
        pytest.param(lambda s: (s, np.zeros(1), 0.0, 1.0, s), id="5-tuple without info"),
        pytest.param(lambda s: "not an experience", id="a string"),
        pytest.param(lambda s: (s, np.array([0]), 0.0, None, s, {}), id="non_terminal None"),
        pytest.param(
            lambda s: (np.zeros(3, np.float32), np.array([0]), 0.0, 1.0, s, {}), id="another shape"
        ),
        pytest.param(lambda s: (s, np.array([0]), 0.0, 1.0, (s, s), {}), id="s_next a tuple"),
        pytest.param(
            lambda s: (s.astype(np.complex64), np.array([0]), 0.0, 1.0, s, {}), id="another dtype"
        ),
        pytest.param(lambda s: (s, np.array([0.5]), 0.0, 1.0, s, {}), id="float action"),
        pytest.param(lambda s: [s, np.array([0]), 0.0, 1.0, s, {}], id="a list"),
        pytest.param(lambda s: (s, np.array([0]), 1, 1.0, s, {}), id="int reward"),
    ],
)
def test_any_experience_is_kept_as_appended_and_nothing_moves(odd: Any) -> None:
    """nnabla-rl's ``append`` is ``self._buffer.append(experience)``: any object is kept.

    An experience that does not fit the columnar layout moves the buffer to its object store;
    the experiences before it keep their positions and values, later ones follow.
    """
    start = episode(3, 0, end="open")
    buffer = fill(ReplayBuffer(capacity=5), start)
    assert buffer._objects is None
    exp = odd(np.zeros(2, np.float32))
    buffer.append(exp)
    assert buffer._objects is not None and buffer._core is None
    later = episode(3, 10)
    buffer.append_all(later)
    want = [*start, exp, *later][-5:]
    got = all_items(buffer)
    assert len(got) == 5
    assert same(got[0], want[0])  # moved from the core: equal copies, position kept
    for g, w in zip(got[1:], want[1:], strict=True):
        assert g is w  # the object store keeps the objects themselves


def test_first_experience_fixes_the_schema() -> None:
    buffer = ReplayBuffer()
    strings = (np.array(["a"]), np.zeros(1), 0.0, 1.0, np.array(["b"]), {})
    buffer.append(strings)  # no numeric layout: the object store from the start
    assert buffer._core is None and buffer[0] is strings
    buffer = ReplayBuffer()
    buffer.append(episode(1, 0)[0])
    core = buffer._core
    assert core is not None
    assert core.schema.fields["obs"] == rr.Field((2,), np.float32, observation=True)
    assert core.schema.fields["action"] == rr.Field((1,), np.int64)
    assert core.schema.fields["reward"] == rr.Field((), np.float64)


def test_getitem_indexing() -> None:
    buffer = fill(ReplayBuffer(), MIXED)
    assert same(buffer[-1], MIXED[-1]) and same(buffer[-len(MIXED)], MIXED[0])
    assert same(buffer[np.int64(2)], MIXED[2])
    for bad in (len(MIXED), -len(MIXED) - 1):
        with pytest.raises(IndexError):
            buffer[bad]
    with pytest.raises(TypeError):
        buffer[1.0]  # type: ignore[index]
    assert [key(e) for e in buffer] == [key(e) for e in MIXED]  # iteration protocol
    with pytest.raises(IndexError):
        ReplayBuffer()[0]


@pytest.mark.parametrize("objects", [False, True])
def test_bounded_buffer_raises_key_error_like_nnabla_rl_ring(objects: bool) -> None:
    """nnabla-rl's ``RingBuffer.__getitem__``: ``if index < 0 or index >= len(self): raise
    KeyError``; the unbounded buffer is a ``deque`` (negative positions from the end,
    ``IndexError``)."""
    exps: list[Any] = list(MIXED) + (["an object"] if objects else [])
    bounded = fill(ReplayBuffer(capacity=100), exps)
    assert (bounded._objects is not None) is objects
    n = len(exps)
    for bad in (-1, -n, n, n + 3):
        with pytest.raises(KeyError):
            bounded[bad]
        with pytest.raises(KeyError):
            bounded.sample_indices([0, bad])
    with pytest.raises(KeyError):
        bounded.sample_indices([n - 1], num_steps=2)
    assert len(list(bounded)) == n  # iteration stops at the end
    unbounded = fill(ReplayBuffer(), exps)
    assert unbounded[-1] is exps[-1] if objects else same(unbounded[-1], exps[-1])
    for bad in (n, -n - 1):
        with pytest.raises(IndexError):
            unbounded[bad]
    # deque reads ``buffer[index + j]``: -1 then 0 (the oldest), as nnabla-rl's sample_indices
    steps, _ = unbounded.sample_indices([-1], num_steps=2)
    assert same(steps[1][0], exps[0])


def test_append_all_equals_appends() -> None:
    a, b = ReplayBuffer(capacity=6), ReplayBuffer(capacity=6)
    a.append_all(MIXED)
    for e in MIXED:
        b.append(e)
    assert len(a) == len(b) == 6
    assert all(same(x, y) for x, y in zip(all_items(a), all_items(b), strict=True))


@pytest.mark.parametrize("capacity", [1, 2, 5, 9])
def test_bounded_capacity_keeps_the_newest(capacity: int) -> None:
    exps = MIXED + episode(6, 400) + episode(3, 500, end="open")
    buffer = ReplayBuffer(capacity=capacity)
    for n, e in enumerate(exps, 1):
        buffer.append(e)
        assert len(buffer) == min(n, capacity)
        want = exps[max(0, n - capacity) : n]
        assert all(same(g, w) for g, w in zip(all_items(buffer), want, strict=True))


def test_unbounded_capacity_grows_and_keeps_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rb_module, "_INITIAL_CAPACITY", 4)
    exps = [
        e
        for k in range(8)
        for e in episode(3 + k % 4, 100 * k, end=("terminal", "truncated")[k % 2])
    ]
    buffer = fill(ReplayBuffer(seed=1), exps)
    core = buffer._core
    assert core is not None and core.capacity >= len(exps) - 1 and core.capacity % 4 == 0
    assert buffer._generation > 1  # the core was rebuilt
    assert all(same(g, w) for g, w in zip(all_items(buffer), exps, strict=True))
    reference = fill(ReplayBuffer(), exps)._core
    assert reference is not None
    ids = np.arange(len(core))
    assert core.steps_to_episode_end(ids).tolist() == reference.steps_to_episode_end(ids).tolist()


def test_sample_structure_and_errors() -> None:
    buffer = fill(ReplayBuffer(seed=0), MIXED)
    experiences, info = buffer.sample(num_samples=4)
    assert isinstance(experiences, list) and len(experiences) == 4
    assert all(isinstance(e, tuple) and len(e) == 6 for e in experiences)
    assert info["weights"].shape == (4, 1) and info["weights"].dtype == np.float64
    assert np.all(info["weights"] == 1.0)
    # without replacement: every experience once when num_samples == len
    experiences, _ = buffer.sample(num_samples=len(MIXED))
    assert sorted(key(e) for e in experiences) == sorted(key(e) for e in MIXED)
    with pytest.raises(ValueError, match="num_samples"):
        buffer.sample(num_samples=len(MIXED) + 1)
    with pytest.raises(ValueError, match="num_samples"):
        buffer.sample(num_samples=len(MIXED) - 1, num_steps=3)
    for bad in (0, -1):
        with pytest.raises(ValueError, match="num_steps"):
            buffer.sample(num_samples=1, num_steps=bad)
    with pytest.raises(ValueError):
        buffer.sample(num_samples=0)
    with pytest.raises(ValueError):
        ReplayBuffer().sample()


def test_sample_num_steps_gives_consecutive_experiences() -> None:
    buffer = fill(ReplayBuffer(seed=3), MIXED)
    experiences, info = buffer.sample(num_samples=5, num_steps=3)
    assert isinstance(experiences, tuple) and len(experiences) == 3
    assert all(len(step) == 5 for step in experiences) and info["weights"].shape == (5, 1)
    position = {key(e): i for i, e in enumerate(MIXED)}
    for b in range(5):
        i = position[key(experiences[0][b])]
        assert i <= len(MIXED) - 3
        for j in range(3):
            assert same(experiences[j][b], MIXED[i + j])


def test_sample_indices() -> None:
    buffer = fill(ReplayBuffer(), MIXED)
    experiences, info = buffer.sample_indices([3, 0, 3, -1])
    assert [key(e) for e in experiences] == [key(MIXED[i]) for i in (3, 0, 3, -1)]
    assert info["weights"].shape == (4, 1)
    steps, _ = buffer.sample_indices(np.array([0, 4]), num_steps=2)
    assert isinstance(steps, tuple) and len(steps) == 2
    assert [[key(e) for e in lst] for lst in steps] == [[0, 100], [1, 101]]
    with pytest.raises(ValueError, match="Indices are empty"):
        buffer.sample_indices([])
    with pytest.raises(ValueError, match="num_steps"):
        buffer.sample_indices([0], num_steps=0)
    with pytest.raises(IndexError):
        buffer.sample_indices([len(MIXED) - 1], num_steps=2)
    with pytest.raises(TypeError):
        buffer.sample_indices([0.5])  # type: ignore[list-item]


def test_sample_indices_agree_with_core_transitions() -> None:
    exps = episode(5, 0) + episode(4, 50, end="truncated") + episode(3, 90)
    buffer = fill(ReplayBuffer(), exps)
    core = buffer._core
    assert core is not None and len(core) == len(exps)  # everything ended: nothing held
    ids = np.array([7, 0, 11, 4, 5])
    batch = core.get_transitions(ids)
    experiences, _ = buffer.sample_indices(ids)
    assert isinstance(experiences, list)
    for b, (s, a, r, non_terminal, s_next, info) in enumerate(experiences):
        assert np.array_equal(s, batch.obs[b]) and np.array_equal(s_next, batch.next_obs[b])
        assert np.array_equal(a, batch.action[b]) and r == batch.reward[b]
        assert non_terminal == (0.0 if batch.terminated[b] else 1.0)
        assert np.array_equal(a, core.get_field("action", ids[b : b + 1])[0])
        assert info is exps[int(ids[b])][5]


def test_seeded_sampling_is_reproducible_and_is_nnabla_rl_draw() -> None:
    a, b = fill(ReplayBuffer(seed=42), MIXED), fill(ReplayBuffer(seed=42), MIXED)
    for _ in range(3):
        ea, _ = a.sample(num_samples=5, num_steps=2)
        eb, _ = b.sample(num_samples=5, num_steps=2)
        assert [[key(e) for e in lst] for lst in ea] == [[key(e) for e in lst] for lst in eb]
    # nnabla-rl's draw: drng.choice(max_index, size=num_samples, replace=False)
    c = fill(ReplayBuffer(seed=7), MIXED)
    experiences, _ = c.sample(num_samples=6)
    want = np.random.default_rng(7).choice(len(MIXED), size=6, replace=False)
    assert [key(e) for e in experiences] == [key(MIXED[i]) for i in want]


def test_sample_is_uniform() -> None:
    buffer = fill(ReplayBuffer(seed=5), episode(10, 0, end="open"))
    counts = Counter(key(buffer.sample()[0][0]) for _ in range(3000))  # type: ignore[arg-type]
    observed = [counts[float(t)] for t in range(10)]
    assert chisquare(observed).pvalue > P_CHI


def test_update_priorities_is_a_no_op() -> None:
    buffer = fill(ReplayBuffer(), MIXED)
    buffer.update_priorities(np.ones(3))
    assert len(buffer) == len(MIXED)


@settings(max_examples=40, deadline=None)
@given(
    capacity=st.one_of(st.none(), st.integers(1, 9)),
    episodes=st.lists(
        st.tuples(
            st.integers(1, 5), st.sampled_from(["terminal", "truncated", "timelimit", "open"])
        ),
        min_size=1,
        max_size=8,
    ),
)
def test_against_a_list_model(capacity: int | None, episodes: list[tuple[int, str]]) -> None:
    """nnabla-rl's ring (or deque) of tuples is the reference model."""
    buffer = ReplayBuffer(capacity=capacity)
    model: list[tuple[Any, ...]] = []
    for k, (n, end) in enumerate(episodes):
        for e in episode(n, 100 * k, end=end):
            buffer.append(e)
            model.append(e)
            if capacity is not None:
                model = model[-capacity:]
            assert len(buffer) == len(model)
        assert all(same(g, w) for g, w in zip(all_items(buffer), model, strict=True))


# ---------------------------------------------------------------------------- Decorable
def test_decorable_buffer_decorates_every_item_handed_out() -> None:
    calls: list[float] = []

    def decor(e: tuple[Any, ...]) -> tuple[Any, ...]:
        calls.append(key(e))
        s, a, r, non_terminal, s_next, info = e
        return (s + 0.5, a, r, non_terminal, s_next, info)

    buffer = fill(DecorableReplayBuffer(capacity=None, decor_fun=decor), MIXED)
    assert buffer.capacity is None
    assert same(buffer[2][0], MIXED[2][0] + 0.5)
    experiences, _ = buffer.sample_indices([0, 1])
    assert [key(e) for e in experiences] == [0.5, 1.5]
    experiences, _ = buffer.sample(num_samples=3, num_steps=2)
    assert all(key(e) % 1 == 0.5 for step in experiences for e in step)
    assert same(buffer[2][0], MIXED[2][0] + 0.5)  # stored data unchanged
    assert len(calls) == 1 + 2 + 6 + 1
    # nnabla-rl stores decor_fun unchecked and calls it in __getitem__
    broken = DecorableReplayBuffer(10, decor_fun=None)  # type: ignore[arg-type]
    broken.append_all(MIXED)
    with pytest.raises(TypeError):
        broken[0]


def test_decor_fun_gets_any_experience_as_stored() -> None:
    """``decor_fun`` is called with ``self._buffer[item]``: the appended object itself."""
    seen: list[Any] = []

    def decor(e: Any) -> Any:
        seen.append(e)
        return ("decorated", e)

    buffer = DecorableReplayBuffer(capacity=4, decor_fun=decor, seed=0)
    objects: list[Any] = [3, {"s": 1}, (np.zeros(2), 1, 0.5, 1.0, np.ones(2)), ("mixed", 2.0)]
    buffer.append_all(objects)
    assert [buffer[i] for i in range(4)] == [("decorated", o) for o in objects]
    assert all(g is o for g, o in zip(seen, objects, strict=True))
    experiences, _ = buffer.sample(num_samples=4)
    assert sorted(id(e[1]) for e in experiences) == sorted(id(o) for o in objects)


# ---------------------------------------------------------------------------- Hindsight
def goal_episode(n: int, start: float, *, end: str = "terminal") -> list[tuple[Any, ...]]:
    """State ``(observation, desired_goal, achieved_goal)``; achieved goal of step t is t."""
    out = []
    goal = np.full(2, -1.0)
    for t in range(n):
        s = (np.full(3, start + t), goal, np.full(2, start + t, np.float64))
        s_next = (np.full(3, start + t + 1), goal, np.full(2, start + t + 1, np.float64))
        non_terminal = 0.0 if t == n - 1 and end == "terminal" else 1.0
        info = {"TimeLimit.truncated": t == n - 1 and end == "timelimit", "t": t}
        out.append((s, np.zeros(1), -1.0, non_terminal, s_next, info))
    return out


def her_reward(achieved: np.ndarray, goal: np.ndarray, info: dict[str, Any]) -> float:
    return 100.0 * float(achieved[0] - goal[0]) + info["t"]


def test_hindsight_append_checks() -> None:
    buffer = HindsightReplayBuffer(her_reward)
    s = np.zeros(2)
    with pytest.raises(RuntimeError, match="tuple observation"):
        buffer.append((s, np.zeros(1), 0.0, 1.0, s, {}))
    with pytest.raises(RuntimeError, match="3 elements"):
        buffer.append(((s, s), np.zeros(1), 0.0, 1.0, (s, s), {}))
    with pytest.raises(ValueError):
        buffer.append(((s, s, s), np.zeros(1), 0.0, 1.0, (s, s, s), None))
    HindsightReplayBuffer(her_reward, hindsight_prob=1.5)  # not checked, as in nnabla-rl
    assert HindsightReplayBuffer(her_reward).capacity is None
    assert len(buffer) == 0


def test_hindsight_prob_zero_returns_stored_experiences() -> None:
    exps = goal_episode(4, 0) + goal_episode(3, 10)
    buffer = fill(HindsightReplayBuffer(her_reward, hindsight_prob=0.0, seed=0), exps)
    assert all(same(g, w) for g, w in zip(all_items(buffer), exps, strict=True))
    experiences, info = buffer.sample(num_samples=7)
    assert sorted(key(e) for e in experiences) == sorted(key(e) for e in exps)
    assert info["weights"].shape == (7, 1)


def test_hindsight_relabels_with_future_goals_of_the_same_episode() -> None:
    exps = (
        goal_episode(4, 0) + goal_episode(5, 10, end="timelimit") + goal_episode(3, 20, end="open")
    )
    buffer = fill(HindsightReplayBuffer(her_reward, hindsight_prob=1.0, seed=1), exps)
    # episodes (first, last) by position: [0, 3], [4, 8] (ended by the time limit), [9, 11]
    # (still running: its goals come from the experiences appended so far, as in nnabla-rl)
    bounds = [(0, 3)] * 4 + [(4, 8)] * 5 + [(9, 11)] * 3
    for _ in range(20):
        experiences, _ = buffer.sample(num_samples=len(exps))
        assert isinstance(experiences, list)
        for s, _a, r, non_terminal, s_next, info in experiences:
            t = float(s[0][0])
            i = [key(e) for e in exps].index(t)
            want = exps[i]
            assert same(s[0], want[0][0]) and same(s[2], want[0][2]) and non_terminal == want[3]
            assert info is want[5]
            goal = s[1]
            assert same(s_next[1], goal)
            # the goal is the achieved goal of s_next at a step in [i, end] of the same episode
            futures = [exps[j][4][2] for j in range(i, bounds[i][1] + 1)]
            assert any(same(goal, g) for g in futures)
            assert r == her_reward(s_next[2], goal, info)


def test_hindsight_goal_steps_are_uniform() -> None:
    buffer = fill(HindsightReplayBuffer(her_reward, hindsight_prob=1.0, seed=2), goal_episode(4, 0))
    counts: Counter[float] = Counter()
    for _ in range(2000):
        experiences, _ = buffer.sample_indices([0])
        counts[float(experiences[0][0][1][0])] += 1  # type: ignore[index]
    assert sorted(counts) == [1.0, 2.0, 3.0, 4.0]
    assert chisquare([counts[g] for g in (1.0, 2.0, 3.0, 4.0)]).pvalue > P_CHI


def test_hindsight_sample_indices_errors_and_reproducibility() -> None:
    exps = goal_episode(4, 0) + goal_episode(4, 10)
    a = fill(HindsightReplayBuffer(her_reward, seed=9), exps)
    b = fill(HindsightReplayBuffer(her_reward, seed=9), exps)
    for _ in range(3):
        ea, _ = a.sample(num_samples=5)
        eb, _ = b.sample(num_samples=5)
        assert all(same(x[:5], y[:5]) for x, y in zip(ea, eb, strict=True))
    with pytest.raises(ValueError, match="Indices are empty"):
        a.sample_indices([])
    experiences, _ = a.sample_indices([0], num_steps=0)  # nnabla-rl reads one step
    assert len(experiences) == 1
    with pytest.raises(NotImplementedError):
        a.sample_indices([0], num_steps=2)
    with pytest.raises(NotImplementedError):
        a.sample(num_samples=2, num_steps=2)


def test_hindsight_unbounded_buffer_relabels_after_growing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rb_module, "_INITIAL_CAPACITY", 4)
    exps = [e for k in range(4) for e in goal_episode(4, 10 * k)]
    buffer = fill(HindsightReplayBuffer(her_reward, hindsight_prob=1.0, seed=4), exps)
    assert buffer._generation > 1 and len(buffer) == 16
    for _ in range(10):
        experiences, _ = buffer.sample(num_samples=16)
        for s, _a, r, _nt, s_next, info in experiences:
            t = float(s[0][0])
            end = t - t % 10 + 3  # last step of the episode
            assert t + 1 <= s[1][0] <= end + 1 and same(s_next[1], s[1])
            assert r == her_reward(s_next[2], s[1], info)


# ---------------------------------------------------------------------------- Atari
FRAME = (84, 84)  # the only frame nnabla-rl 0.16.0 stores (it asserts s.shape == (84, 84))


def atari_episode(frames: np.ndarray, *, end: str = "terminal", k: int = 4) -> list[Any]:
    """Experiences whose states are FrameStack stacks (first frame repeated after reset)."""

    def stack(t: int) -> np.ndarray:
        return np.stack([frames[max(j, 0)] for j in range(t - k + 1, t + 1)]) / 255.0

    n = len(frames) - 1
    return [
        (stack(t), np.array([t]), 1.0, 0.0 if t == n - 1 and end == "terminal" else 1.0,
         stack(t + 1), {"t": t})
        for t in range(n)
    ]  # fmt: skip


def random_frames(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(0, 256, (n, *FRAME), dtype=np.uint8)


def test_atari_buffer_round_trip_and_uint8_storage() -> None:
    rng = np.random.default_rng(0)
    exps = (
        atari_episode(random_frames(rng, 7))
        + atari_episode(random_frames(rng, 3), end="truncated")
        + atari_episode(random_frames(rng, 6), end="open")
    )
    buffer = fill(MemoryEfficientAtariBuffer(capacity=100), exps)
    assert buffer.capacity == 100 and len(buffer) == len(exps)
    for g, w in zip(all_items(buffer), exps, strict=True):
        assert g[0].dtype == np.float32 and g[0].shape == (4, *FRAME)
        assert same(g[0], w[0].astype(np.float32)) and same(g[4], w[4].astype(np.float32))
        assert same(g[1], w[1]) and g[2] == w[2] and g[3] == w[3] and g[5] is w[5]
    core = buffer._core
    assert core is not None
    assert core.schema.fields["obs"] == rr.Field(FRAME, np.uint8, observation=True)
    assert core.frame_stack == 4 and core.stack_pad == "first"
    experiences, info = buffer.sample(num_samples=5, num_steps=2)
    assert len(experiences) == 2 and info["weights"].shape == (5, 1)
    assert all(e[0].shape == (4, *FRAME) for step in experiences for e in step)


def test_atari_stacks_are_the_core_frame_stacks() -> None:
    rng = np.random.default_rng(1)
    exps = atari_episode(random_frames(rng, 6)) + atari_episode(random_frames(rng, 5))
    buffer = fill(MemoryEfficientAtariBuffer(capacity=50, stacked_frames=4), exps)
    core = buffer._core
    assert core is not None
    ids = np.arange(len(exps))
    batch = core.get_transitions(ids)
    experiences, _ = buffer.sample_indices(ids)
    for b, e in enumerate(experiences):
        assert np.array_equal(e[0], batch.obs[b].astype(np.float32) / 255.0)
        assert np.array_equal(e[4], batch.next_obs[b].astype(np.float32) / 255.0)
    # one uint8 frame per experience: the stored frame is the last frame of s
    assert np.array_equal(
        core.get_field("obs", ids), np.rint(np.stack([e[0][-1] for e in exps]) * 255)
    )


@pytest.mark.parametrize("capacity", [1, 3, 5])
def test_atari_oldest_experience_keeps_its_whole_stack(capacity: int) -> None:
    rng = np.random.default_rng(2)
    exps = atari_episode(random_frames(rng, 12), end="open", k=3)
    buffer = MemoryEfficientAtariBuffer(capacity=capacity, stacked_frames=3)
    for n, e in enumerate(exps, 1):
        buffer.append(e)
        want = exps[max(0, n - capacity) : n]
        assert len(buffer) == len(want)
        for g, w in zip(all_items(buffer), want, strict=True):
            assert same(g[0], w[0].astype(np.float32)) and same(g[4], w[4].astype(np.float32))


def test_atari_input_checks() -> None:
    stack = np.zeros((4, *FRAME))
    with pytest.raises(TypeError, match="capacity"):  # nnabla-rl: range(None) in its ring
        MemoryEfficientAtariBuffer(capacity=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="stacked_frames"):
        MemoryEfficientAtariBuffer(capacity=3, stacked_frames=0)
    buffer = MemoryEfficientAtariBuffer(capacity=10)
    buffer.append((stack, 0, 0.0, 1.0, stack, {}))
    # nnabla-rl stores (s * 255.0).astype(np.uint8): 0.5 -> 127 (truncated, not rounded)
    half = np.full((4, *FRAME), 0.5)
    action, reward = np.array([1.7]), np.float32(2)
    buffer.append((half, action, reward, 0.0, half, {}))  # a and r of other kinds than before
    assert buffer[1][0].dtype == np.float32 and np.all(buffer[1][0][-1] == np.float32(127 / 255))
    # nnabla-rl's ring keeps a and r as appended (only the frames are quantised)
    assert len(buffer) == 2 and buffer[1][1] is action and buffer[1][2] is reward


def quantized(state: Any) -> np.ndarray[Any, Any]:
    """nnabla-rl's (x * 255.0).astype(np.uint8), read back as float32 / 255."""
    return (np.asarray(state) * 255.0).astype(np.uint8).astype(np.float32) / np.float32(255)


# Atari states of other shapes, depths and dtypes (0.16.0's s[-1] frames, the object store):
# tests/compat/test_nnabla_rl_atari_frames.py


# Prioritized buffers: tests/compat/test_nnabla_rl_prioritized.py


# ---------------------------------------------------------------------------- Trajectory
TRAJS = [episode(3, 0), episode(5, 100, end="truncated"), episode(2, 200), episode(4, 300)]


def filled_traj(num_trajectories: int | None = None, seed: int = 0) -> TrajectoryReplayBuffer:
    buffer = TrajectoryReplayBuffer(num_trajectories=num_trajectories, seed=seed)
    for t in TRAJS:
        buffer.append_trajectory(t)
    return buffer


def test_trajectory_buffer_sizes_and_items() -> None:
    buffer = filled_traj()
    flat = [e for t in TRAJS for e in t]
    assert len(buffer) == 14 and buffer.trajectory_num == 4 and buffer.capacity is None
    assert all(same(g, w) for g, w in zip(all_items(buffer), flat, strict=True))
    for i, t in enumerate(TRAJS):
        assert same(buffer.get_trajectory(i), t)  # appended as a list: a list
    with pytest.raises(IndexError):
        buffer.get_trajectory(4)
    experiences, _ = buffer.sample_indices([0, 3, 13], num_steps=1)
    assert [key(e) for e in experiences] == [0.0, 100.0, 303.0]
    experiences, _ = buffer.sample(num_samples=14)
    assert sorted(key(e) for e in experiences) == sorted(key(e) for e in flat)


def test_trajectory_is_a_core_episode() -> None:
    buffer = filled_traj()
    core = buffer._core
    assert core is not None
    start = 0
    for t in TRAJS:
        ep = core.get_episode(start)
        assert ep.obs.shape[0] == len(t)
        assert np.array_equal(ep.obs, np.stack([e[0] for e in t]))
        assert np.array_equal(ep.next_obs, np.stack([e[4] for e in t]))
        start += len(t)
    assert core.get_episode(3).truncated[-1] and core.get_episode(0).terminated[-1]


def test_num_trajectories_drops_the_oldest() -> None:
    buffer = filled_traj(num_trajectories=2)
    assert buffer.capacity == 2 and buffer.trajectory_num == 2 and len(buffer) == 6
    assert same(buffer.get_trajectory(0), TRAJS[2]) and same(buffer[0], TRAJS[2][0])
    assert buffer._core is not None and len(buffer._core) == 6
    # nnabla-rl: ReplayBuffer(capacity=num_trajectories): the same rules as capacity
    with pytest.raises(AssertionError):
        TrajectoryReplayBuffer(num_trajectories=-1)
    with pytest.raises(ZeroDivisionError):
        TrajectoryReplayBuffer(num_trajectories=0).append_trajectory(TRAJS[0])


def test_sample_trajectories() -> None:
    buffer = filled_traj(seed=3)
    one, info = buffer.sample_trajectories()
    assert isinstance(one[0], tuple) and len(one[0]) == 6  # one trajectory, not a tuple of one
    assert info["weights"].shape == (1, 1)
    many, info = buffer.sample_trajectories(num_samples=4)
    assert len(many) == 4 and info["weights"].shape == (4, 1)
    assert sorted(key(t[0]) for t in many) == [0.0, 100.0, 200.0, 300.0]  # distinct
    with pytest.raises(ValueError, match="num_samples"):
        buffer.sample_trajectories(num_samples=5)
    with pytest.raises(ValueError):
        buffer.sample_trajectories(num_samples=0)
    trajs, _ = buffer.sample_indices_trajectory([1, 3])
    assert same(trajs, (TRAJS[1], TRAJS[3]))
    with pytest.raises(ValueError, match="Indices are empty"):
        buffer.sample_indices_trajectory([])


def test_sample_trajectories_portion() -> None:
    buffer = filled_traj(seed=4)
    portions, info = buffer.sample_trajectories_portion(num_samples=3, portion_length=2)
    assert len(portions) == 3 and info["weights"].shape == (3, 1)
    flat = [e for t in TRAJS for e in t]
    for p in portions:
        assert len(p) == 2 and key(p[1]) == key(p[0]) + 1  # consecutive, same trajectory
        i = [key(e) for e in flat].index(key(p[0]))
        assert same(p, flat[i : i + 2])  # a slice of a list
    with pytest.raises(RuntimeError, match="shorter than portion length"):
        for _ in range(50):  # the 2-experience trajectory is drawn sooner or later
            buffer.sample_trajectories_portion(num_samples=1, portion_length=3)
    # with replacement, as nnabla-rl's drng.choice(..., replace=True, p=lengths / total)
    portions, info = buffer.sample_trajectories_portion(num_samples=5, portion_length=2)
    assert len(portions) == 5 and info["weights"].shape == (5, 1)
    # nnabla-rl 0.16.0 slices trajectory[i : i + portion_length]: 0 gives empty portions
    portions, info = buffer.sample_trajectories_portion(num_samples=2, portion_length=0)
    assert portions == ([], []) and info["weights"].shape == (2, 1)


def test_sample_trajectories_portion_law() -> None:
    """Trajectory with probability proportional to its length, then a uniform start."""
    buffer = TrajectoryReplayBuffer(seed=5)
    buffer.append_trajectory(episode(2, 0))
    buffer.append_trajectory(episode(4, 100))
    counts: Counter[float] = Counter()
    for _ in range(1500):
        portions, _ = buffer.sample_trajectories_portion(num_samples=2, portion_length=2)
        counts.update(key(p[0]) for p in portions)
    starts = [0.0, 100.0, 101.0, 102.0]
    assert set(counts) == set(starts)
    expected = np.array([1 / 3, 2 / 9, 2 / 9, 2 / 9]) * 3000
    assert chisquare([counts[s] for s in starts], expected).pvalue > P_CHI


def test_sample_indices_portion_follows_the_seed_example() -> None:
    buffer = TrajectoryReplayBuffer()
    for k in range(10):
        buffer.append_trajectory(episode(5, 100 * k))
    portions, _ = buffer.sample_indices_portion([0, 1, 5, 6], portion_length=1)
    assert [key(p[0]) for p in portions] == [0.0, 1.0, 100.0, 101.0]
    portions, _ = buffer.sample_indices_portion([3, 9, 12], portion_length=3)
    # past a trajectory's end: its last portion_length experiences
    assert [[key(e) for e in p] for p in portions] == [
        [2.0, 3.0, 4.0], [102.0, 103.0, 104.0], [202.0, 203.0, 204.0]
    ]  # fmt: skip
    with pytest.raises(RuntimeError, match="shorter than portion length"):
        buffer.sample_indices_portion([0], portion_length=6)
    with pytest.raises(ValueError, match="Indices are empty"):
        buffer.sample_indices_portion([])
    with pytest.raises(ValueError, match="portion_length"):
        buffer.sample_indices_portion([0], portion_length=0)
    with pytest.raises(IndexError):
        buffer.sample_indices_portion([50])


def odd_trajectories() -> list[Any]:
    """Trajectories nnabla-rl stores as given (``self._buffer.append(trajectory)``)."""
    return [
        episode(2, 0) + episode(2, 10),  # non_terminal == 0 in the middle
        episode(2, 20, end="open") + episode(3, 30),  # s jumps from 22 to 30
        tuple(episode(3, 40, end="open")),  # a tuple, no terminal flag at all
        [],  # empty
        episode(1, 50, end="timelimit") + episode(2, 51, end="open"),  # a time limit inside
    ]


@pytest.mark.parametrize("num_trajectories", [None, 3])
def test_append_trajectory_stores_any_trajectory_as_given(num_trajectories: int | None) -> None:
    """Grouping, order and flags are the caller's: nothing is rejected, split or reordered."""
    trajs = odd_trajectories()
    buffer = TrajectoryReplayBuffer(num_trajectories=num_trajectories, seed=0)
    for t in trajs:
        buffer.append_trajectory(t)
    kept = trajs if num_trajectories is None else trajs[-num_trajectories:]
    flat = [e for t in kept for e in t]
    assert buffer._objects is None  # every experience fits the columnar layout
    assert buffer.trajectory_num == len(kept) and len(buffer) == len(flat)
    assert all(same(g, w) for g, w in zip(all_items(buffer), flat, strict=True))
    for i, t in enumerate(kept):
        assert same(buffer.get_trajectory(i), t)
    many, _ = buffer.sample_indices_trajectory(list(range(len(kept))))
    assert all(same(g, w) for g, w in zip(many, kept, strict=True))
    # portions stay inside the caller's trajectories, across their inner episode ends
    sizes = {len(t) for t in kept}
    owner = [i for i, t in enumerate(kept) for _ in t]
    for _ in range(20):
        portions, _ = buffer.sample_trajectories_portion(num_samples=2, portion_length=1)
        for p in portions:
            assert len(p) == 1
    if min(sizes - {0}) >= 2:
        portions, _ = buffer.sample_indices_portion(list(range(len(flat))), portion_length=2)
        for i, p in enumerate(portions):
            t = kept[owner[i]]
            j = min(i - owner.index(owner[i]), len(t) - 2)
            assert same(p, t[j : j + 2])


def test_append_trajectory_of_odd_objects_uses_the_object_store() -> None:
    buffer = filled_traj(num_trajectories=3)
    buffer.append_trajectory([1, "two", {"three": 3}])
    assert buffer._objects is not None and buffer.trajectory_num == 3
    assert same(buffer.get_trajectory(0), TRAJS[2]) and same(buffer.get_trajectory(1), TRAJS[3])
    assert buffer.get_trajectory(2) == [1, "two", {"three": 3}]
    buffer.append_trajectory(TRAJS[0])
    assert buffer.trajectory_num == 3 and same(buffer.get_trajectory(0), TRAJS[3])
    # in the object store nnabla-rl's very trajectory object comes back
    assert buffer.get_trajectory(2) is TRAJS[0]
    portions, _ = buffer.sample_indices_portion([4, 5, 6], portion_length=2)
    # past the trajectory's end: its last portion_length experiences (the seed's rule)
    assert portions == ([1, "two"], ["two", {"three": 3}], ["two", {"three": 3}])
    with pytest.raises(NotImplementedError):  # nnabla-rl: append raises NotImplementedError
        buffer.append(TRAJS[0][0])
    with pytest.raises(KeyError):
        buffer.get_trajectory(3)


def test_trajectory_append_builds_trajectories_at_episode_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(rb_module, "_INITIAL_CAPACITY", 4)
    buffer = TrajectoryReplayBuffer(num_trajectories=3)
    buffer.append_all(episode(3, 0) + episode(4, 10, end="truncated") + episode(2, 20, end="open"))
    # the 10 trajectory ended when 20 arrived (s changed); the 20 one is still being built
    assert buffer.trajectory_num == 2 and len(buffer) == 7
    buffer.append(episode(1, 30, end="timelimit")[0])  # ends 20 (s changed) and itself
    assert buffer.trajectory_num == 3 and len(buffer) == 4 + 2 + 1  # the 0 one was dropped
    last = episode(5, 40)
    buffer.append_trajectory(last)
    assert buffer.trajectory_num == 3 and len(buffer) == 2 + 1 + 5
    assert [key(buffer.get_trajectory(i)[0]) for i in range(3)] == [20, 30, 40]
    assert same(buffer.get_trajectory(2), last)


def test_trajectory_buffer_is_reproducible() -> None:
    a, b = filled_traj(seed=11), filled_traj(seed=11)
    pa, _ = a.sample_trajectories_portion(num_samples=3, portion_length=2)
    pb, _ = b.sample_trajectories_portion(num_samples=3, portion_length=2)
    assert [key(p[0]) for p in pa] == [key(p[0]) for p in pb]
    ta, _ = a.sample_trajectories(num_samples=2)
    tb, _ = b.sample_trajectories(num_samples=2)
    assert [key(t[0]) for t in ta] == [key(t[0]) for t in tb]


def test_atari_trajectory_buffer() -> None:
    rng = np.random.default_rng(6)
    trajs = [atari_episode(random_frames(rng, n)) for n in (5, 3, 7)]
    buffer = MemoryEfficientAtariTrajectoryBuffer(num_trajectories=2, seed=0)
    for t in trajs:
        buffer.append_trajectory(t)
    assert buffer.trajectory_num == 2 and len(buffer) == 2 + 6
    got = buffer.get_trajectory(0)
    for g, w in zip(got, trajs[1], strict=True):
        assert same(g[0], w[0].astype(np.float32)) and same(g[4], w[4].astype(np.float32))
    portions, _ = buffer.sample_trajectories_portion(num_samples=2, portion_length=2)
    assert all(p[0][0].shape == (4, *FRAME) for p in portions)
    experiences, _ = buffer.sample(num_samples=3)
    assert len(experiences) == 3
