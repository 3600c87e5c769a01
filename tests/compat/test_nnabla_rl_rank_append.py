"""The nnabla-rl prioritized buffers' fast append keeps nnabla-rl 0.16.0's behaviour.

``append`` stages the usual experience (checked and copied once) and leaves the heap pushes,
the heap sorts and the tree leaves to the next read. What a user sees must stay nnabla-rl's:
``RankBasedPrioritizedReplayBuffer.append`` is ``self._buffer.append(experience)`` (the heap
gets ``inf``), then ``self._appends_since_prev_sort += 1`` and ``sort_data()`` when it is a
multiple of ``sort_interval`` (nnabla_rl/replay_buffers/prioritized_replay_buffer.py, 0.16.0;
transcribed in ``tests/compat/_nnabla_rl_reference.py``), so a ``sort_interval`` of 0 raises
``ZeroDivisionError`` after storing the experience. The stored experiences are those of the
one-by-one path (the same buffer with staging turned off), for every kind of experience the
columnar store takes, small observations and large ones (several batches of staging rows)
alike.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlreplay.compat.nnabla_rl.replay_buffers.prioritized_replay_buffer as per
from rlreplay.compat.nnabla_rl._staging import Staging, same_rows
from rlreplay.compat.nnabla_rl._stored import StoredTuple
from rlreplay.compat.nnabla_rl.replay_buffer import ReplayBuffer
from tests.compat import _nnabla_rl_reference as ref
from tests.compat.test_nnabla_rl_prioritized import experience, pair, per_float


class FrozenInfo(Mapping[str, Any]):
    """An ``info`` that is a Mapping but not a dict (the general staging path reads it)."""

    def __init__(self, **items: Any) -> None:
        self._items = dict(items)

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"FrozenInfo({self._items!r})"


class UnstagedRank(per.RankBasedPrioritizedReplayBuffer):
    """The rank-based buffer with every append one by one (the reference path)."""

    def _make_staging(self) -> Staging | None:
        return None


def heap_items(buffer: Any, capacity: int) -> list[Any]:
    return [buffer._max_heap[h] for h in range(capacity)]


def ref_heap_items(buffer: Any, capacity: int) -> list[Any]:
    heap = buffer._buffer._max_heap
    return [
        None if heap[h] is None else (heap[h][0], per_float(heap[h][1])) for h in range(capacity)
    ]


# ------------------------------------------------------------------ heap pushes and sorts
@settings(max_examples=30, deadline=None)
@given(
    capacity=st.sampled_from([1, 2, 3, 5, 8]),
    sort=st.sampled_from([1, 2, 3, 4, 7]),
    bursts=st.lists(
        st.tuples(
            st.integers(0, 12),  # appends before the next read
            st.lists(st.sampled_from([0.0, 0.3, -0.7, 1.0, 0.1]), min_size=8, max_size=8),
        ),
        max_size=10,
    ),
    seed=st.integers(0, 2**16),
)
def test_sorts_of_a_burst_of_appends_are_nnabla_rls(
    capacity: int, sort: int, bursts: list[tuple[int, list[float]]], seed: int
) -> None:
    # runs of appends cross several sort points (sort_interval appends apart) between reads:
    # the heap must hold what nnabla-rl's holds after sorting at each of them
    mine, theirs = pair(True, capacity, seed, sort_interval=sort, reset_segment_interval=3)
    t = 0
    for appends, errors in bursts:
        for _ in range(appends):
            mine.append(experience(t))
            theirs.append(t)
            t += 1
        assert heap_items(mine, capacity) == ref_heap_items(theirs, capacity)
        k = min(len(theirs), 3)
        if k == 0:
            continue
        e_mine, i_mine = mine.sample(k)
        e_theirs, i_theirs = theirs.sample(k)
        assert [int(e[2]) for e in e_mine] == list(e_theirs)
        np.testing.assert_array_equal(i_mine["weights"], np.asarray(i_theirs["weights"]))
        mine.update_priorities(np.array(errors[:k]))
        theirs.update_priorities(np.array(errors[:k]))
    assert heap_items(mine, capacity) == ref_heap_items(theirs, capacity)


@pytest.mark.parametrize("sort", [-2, 3.0, 2.5])
def test_irregular_sort_intervals_sort_as_nnabla_rl(sort: Any) -> None:
    # nnabla-rl's count % sort_interval == 0 decides, whatever the interval's type or sign
    mine, theirs = pair(True, 6, 0, sort_interval=sort)
    for t in range(15):
        mine.append(experience(t))
        theirs.append(t)
        if t % 4 == 3:
            mine.sample(2)
            theirs.sample(2)
            mine.update_priorities(np.array([0.2, 0.9]))
            theirs.update_priorities(np.array([0.2, 0.9]))
    assert heap_items(mine, 6) == ref_heap_items(theirs, 6)


def test_sort_interval_zero_raises_after_storing_as_nnabla_rl() -> None:
    # nnabla-rl stores the experience, then computes count % 0
    mine = per.RankBasedPrioritizedReplayBuffer(4, sort_interval=0)
    theirs = ref.RankBasedPrioritizedReplayBuffer(4, sort_interval=0)
    for buffer, value in ((mine, experience(0)), (theirs, 0)):
        with pytest.raises(ZeroDivisionError):
            buffer.append(value)
        assert len(buffer) == 1
    assert int(mine[0][2]) == 0 and heap_items(mine, 4) == ref_heap_items(theirs, 4)


def test_append_count_includes_the_object_store() -> None:
    # an experience that leaves the columnar store still takes its ring slot and heap entry
    mine, theirs = pair(True, 4, 1, sort_interval=3)
    for t in range(9):
        value: Any = t if t in (2, 6) else experience(t)
        mine.append(value)
        theirs.append(t)
        assert mine._appended == t + 1
    assert heap_items(mine, 4) == ref_heap_items(theirs, 4)
    proportional, _ = pair(False, 4, 1)
    for t in range(6):
        proportional.append(experience(t) if t != 3 else "odd")
    assert proportional._sum_tree.sum() == 4.0 and proportional._appended == 6


# ------------------------------------------------------------------ staged = one by one
def odd_step(t: int, kind: str, s: Any, s_next: Any) -> Any:
    """Experiences the usual-layout push hands to the general one (or to the core)."""
    a, r = np.array([t % 3]), float(t)
    if kind == "np_nonterminal":
        return (s, a, r, np.float32(1.0), s_next, {})
    if kind == "int_nonterminal":
        return (s, a, r, 1, s_next, {})
    if kind == "mapping_info":
        return (s, a, r, 1.0, s_next, FrozenInfo(**{"TimeLimit.truncated": t % 2 == 0}))
    if kind == "seven":
        return (s, a, r, 1.0, s_next, {}, "extra")
    if kind == "stored":
        return StoredTuple((s, a, r, 1.0, s_next, {}))
    if kind == "equal_dtype":  # equal to the field's dtype, not the same object
        dt = np.dtype(s.dtype.str, metadata={"m": 1})
        return (s.astype(dt), a, r, 1.0, s_next.astype(dt), {})
    if kind == "int_reward":
        return (s, a, t, 1.0, s_next, {})
    return (t, "odd")


KINDS = ["next", "next", "next", "jump", "terminal", "timelimit", "read",
         "np_nonterminal", "int_nonterminal", "mapping_info", "seven", "stored",
         "equal_dtype", "int_reward", "odd"]  # fmt: skip


def key(value: Any) -> Any:
    """What a user can see of a stored value: kinds, dtypes, shapes, bytes (repr else)."""
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, tuple):
        return (type(value).__name__, tuple(key(v) for v in value))
    return (type(value).__name__, repr(value))


def items(buffer: Any) -> list[Any]:
    return [key(buffer[i]) for i in range(len(buffer))]


def run_pair(staged: Any, plain: Any, shape: tuple[int, ...], dtype: Any, ops: list[str]) -> None:
    prev_next: Any = None
    for t, op in enumerate(ops):
        if op == "read":
            assert items(staged) == items(plain)
            continue
        if prev_next is None or op == "jump":
            s = np.full(shape, (7 * t + 3) % 97, dtype)  # (usually) not the previous s_next
        else:
            s = prev_next.copy()
        s_next = (s + 1).astype(dtype)
        if op in ("next", "jump", "terminal", "timelimit"):
            info = {"TimeLimit.truncated": True} if op == "timelimit" else {}
            e: Any = (
                s,
                np.array([t % 3]),
                float(t),
                0.0 if op == "terminal" else 1.0,
                s_next,
                info,
            )
        else:
            e = odd_step(t, op, s, s_next)
        prev_next = s_next
        staged.append(e)
        plain.append(e)
        s_next[...] = 99  # an environment that rewrites its array in place
    assert len(staged) == len(plain) and items(staged) == items(plain)
    staged._core_size()  # the staged appends are written (as before any read of the core)
    if staged._core is not None and plain._core is not None and len(staged):
        ids = np.arange(len(staged)) + staged._first_id()  # the buffers' ids (and the core's
        assert plain._core_offset == 0  # without staging)
        assert (
            staged._core.steps_to_episode_end(ids - staged._core_offset).tolist()
            == plain._core.steps_to_episode_end(ids).tolist()
        )


@settings(max_examples=30, deadline=None)
@given(
    capacity=st.integers(1, 9),
    large=st.booleans(),
    ops=st.lists(st.sampled_from(KINDS), max_size=30),
)
def test_every_kind_of_experience_is_stored_as_one_by_one(
    capacity: int, large: bool, ops: list[str]
) -> None:
    shape, dtype = ((9, 5), np.float64) if large else ((2,), np.float32)  # 360 bytes: rows
    staged, plain = per.RankBasedPrioritizedReplayBuffer(capacity), UnstagedRank(capacity)
    run_pair(staged, plain, shape, dtype, ops)


@pytest.mark.parametrize("shape", [(84, 84), (16, 16, 3)])
def test_large_observations_fill_several_staging_batches(shape: tuple[int, ...]) -> None:
    # more appends than one batch of staging rows holds; episodes end and jump anywhere
    staged, plain = per.RankBasedPrioritizedReplayBuffer(400), UnstagedRank(400)
    staged.append(
        (np.zeros(shape, np.uint8), np.array([0]), 0.0, 1.0, np.ones(shape, np.uint8), {})
    )
    plain.append((np.zeros(shape, np.uint8), np.array([0]), 0.0, 1.0, np.ones(shape, np.uint8), {}))
    assert staged._staging is not None
    rng = np.random.default_rng(0)
    ops = rng.choice(["next"] * 30 + ["jump", "terminal", "timelimit"], size=700).tolist()
    ops[350] = "read"
    run_pair(staged, plain, shape, np.uint8, ops)
    assert staged._staging.rows < 700


def test_prioritized_and_plain_buffers_agree_on_large_observations() -> None:
    # the plain buffer stages through the same push (ReplayBuffer.append) as the prioritized
    buffers = [ReplayBuffer(50), per.ProportionalPrioritizedReplayBuffer(50, seed=0)]
    frame = np.zeros((84, 84), np.uint8)
    for t in range(120):
        nxt = np.full((84, 84), t + 1, np.uint8)
        for b in buffers:
            b.append((frame, np.array([t % 4]), 1.0, float(t % 9 != 8), nxt, {}))
        frame = nxt
    for i in (0, 25, 49):
        assert all(np.array_equal(b[i][0], np.full((84, 84), 70 + i, np.uint8)) for b in buffers)
        assert all(b[i][3] == float((70 + i) % 9 != 8) for b in buffers)


# ------------------------------------------------------------------ same_rows
def test_same_rows_compares_bytes() -> None:
    nan = np.float32(np.nan)
    a = np.array([[0.0, 1.0], [nan, 2.0], [-0.0, 3.0]], np.float32)
    b = np.array([[0.0, 1.0], [nan, 2.0], [0.0, 3.0]], np.float32)
    assert same_rows(a, b).tolist() == [True, True, False]  # NaN as itself, -0.0 not 0.0
    assert same_rows(a[:, :0], b[:, :0]).tolist() == [True] * 3
    assert same_rows(a[::-1], b[::-1]).tolist() == [False, True, True]
    odd = np.arange(12, dtype=np.uint8).reshape(4, 3)  # 3 bytes a row: byte compares
    assert same_rows(odd, odd.copy()).tolist() == [True] * 4
    other = odd.copy()
    other[2, 2] += 1
    assert same_rows(odd, other).tolist() == [True, True, False, True]
    assert same_rows(np.zeros(3, np.float32), np.zeros(3, np.float32)).tolist() == [True] * 3
    assert same_rows(np.zeros((0, 5)), np.zeros((0, 5))).shape == (0,)
