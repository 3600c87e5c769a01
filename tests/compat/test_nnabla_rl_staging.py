"""Staged appends (``_staging``) store exactly what the one-by-one path stores.

The nnabla-rl front-end stages the usual experiences and writes them to the core in one
``extend`` before any read (so ``append`` costs about what nnabla-rl's list insert costs).
What a user sees must not change: nnabla-rl hands back every experience as appended, in
order, and the columnar store's episode ends (terminal, ``TimeLimit.truncated``, a changed
``s``) are those of the one-by-one path. The reference here is the same buffer with staging
turned off, over Hypothesis sequences that mix jumps, ends, odd objects and reads.
"""

from __future__ import annotations

import gc
import pickle
import weakref
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rlreplay.compat.nnabla_rl._staging import Staging
from rlreplay.compat.nnabla_rl.replay_buffer import ReplayBuffer
from rlreplay.compat.nnabla_rl.replay_buffers import (
    ProportionalPrioritizedReplayBuffer,
    RankBasedPrioritizedReplayBuffer,
)


class OneByOne(ReplayBuffer):
    """The same buffer without staging: each append goes to the core at once."""

    def _make_staging(self) -> Staging | None:
        return None


def step(t: int, op: str, prev_next: Any) -> tuple[Any, ...]:
    if prev_next is None:
        s = np.zeros(2, np.float32)
    elif op == "jump":
        s = np.full(2, -t, np.float32)  # not the previous s_next: a new episode
    else:
        s = prev_next.copy()
    info: dict[str, Any] = {"t": t}
    if op == "timelimit":
        info["TimeLimit.truncated"] = True
    non_terminal = 0.0 if op == "terminal" else 1.0
    return (s, np.array([t % 3]), float(t), non_terminal, s + 1, info)


def items(buffer: Any) -> list[str]:
    return [repr(buffer[i]) for i in range(len(buffer))]


@settings(max_examples=40, deadline=None)
@given(
    capacity=st.integers(1, 9),
    ops=st.lists(
        st.sampled_from(["next", "next", "next", "jump", "terminal", "timelimit", "read", "odd"]),
        max_size=40,
    ),
)
def test_staged_appends_equal_one_by_one(capacity: int, ops: list[str]) -> None:
    staged, plain = ReplayBuffer(capacity=capacity), OneByOne(capacity=capacity)
    prev_next = None
    for t, op in enumerate(ops):
        if op == "read":
            assert items(staged) == items(plain)
            continue
        e: Any = (t, "odd") if op == "odd" else step(t, op, prev_next)
        if op != "odd":
            prev_next = e[4]
        staged.append(e)
        plain.append(e)
    assert items(staged) == items(plain) and len(staged) == len(plain)
    staged._core_size()  # the staged appends are written (as before any read of the core)
    if staged._core is not None and plain._core is not None and len(staged):
        ids = np.arange(len(staged)) + staged._first_id()  # the buffers' ids (and the core's
        assert plain._core_offset == 0  # without staging)
        assert (
            staged._core.steps_to_episode_end(ids - staged._core_offset).tolist()
            == plain._core.steps_to_episode_end(ids).tolist()
        )


def test_staged_copies_survive_in_place_rewrites_and_batches_wrap() -> None:
    buffer = ReplayBuffer(capacity=300)  # more than one batch of staging rows
    buffer.append((np.zeros(3, np.float32), np.array([0]), -1.0, 1.0, np.zeros(3, np.float32), {}))
    assert buffer._staging is not None
    obs = np.zeros(3, np.float32)
    for t in range(700):
        s = obs.copy()
        obs[:] = t + 1  # the environment rewrites its array in place after each step
        buffer.append((s, np.array([0]), float(t), 1.0, obs, {}))
    assert len(buffer) == 300
    for i in (0, 150, 299):
        t = 400 + i
        assert np.array_equal(buffer[i][4], np.full(3, t + 1, np.float32)) and buffer[i][2] == t


def test_prioritized_buffers_sample_what_was_staged() -> None:
    for cls in (RankBasedPrioritizedReplayBuffer, ProportionalPrioritizedReplayBuffer):
        buffer = cls(50, seed=0)
        prev = None
        for t in range(120):
            e = step(t, "terminal" if t % 7 == 6 else "next", prev)
            prev = e[4]
            buffer.append(e)
        experiences, info = buffer.sample(8)
        assert all(int(e[2]) >= 70 for e in experiences) and info["weights"].shape == (8, 1)
        buffer.update_priorities(np.ones(8))


def check_core(staged: ReplayBuffer, plain: ReplayBuffer) -> None:
    """The staged buffer hands out what the one-by-one one does, and once its staged
    experiences reach the core, the core holds them: decoded, they are the handed tuples,
    and its episodes end where the one-by-one core's do."""
    assert items(staged) == items(plain) and len(staged) == len(plain)
    if not len(staged):
        return
    staged._core_size()  # the staged experiences are written (as before any read of the core)
    assert staged._staging is None or staged._staging.synced == staged._next_id
    ids = np.arange(len(staged)) + staged._first_id()
    assert [repr(e) for e in staged._from_core(ids)] == items(staged)
    assert staged._core is not None and plain._core is not None
    assert (
        staged._core.steps_to_episode_end(ids - staged._core_offset).tolist()
        == plain._core.steps_to_episode_end(ids).tolist()
    )


BURST = ["next", "timelimit", "next", "next", "terminal", "jump", "next"]


@settings(max_examples=60, deadline=None)
@given(
    capacity=st.integers(1, 6),
    ops=st.lists(
        st.sampled_from(["next", "jump", "terminal", "timelimit", "burst", "core", "pickle"]),
        max_size=25,
    ),
)
def test_long_runs_of_staged_appends_reach_the_core_as_one_by_one(
    capacity: int, ops: list[str]
) -> None:
    # a burst stages more experiences than the ring holds: the core starts anew from the ring
    staged, plain = ReplayBuffer(capacity=capacity), OneByOne(capacity=capacity)
    prev_next, t = None, 0
    for op in ops:
        if op == "core":
            check_core(staged, plain)
        elif op == "pickle":
            staged = pickle.loads(pickle.dumps(staged))
        else:
            for k in range(2 * capacity + 3 if op == "burst" else 1):
                kind = BURST[(t + k) % len(BURST)] if op == "burst" else op
                e = step(t, kind, prev_next)
                prev_next = e[4]
                staged.append(e)
                plain.append(e)
                t += 1
    check_core(staged, plain)
    staged.append((t, "odd"))  # to the object store: every kept experience moves, in order
    plain.append((t, "odd"))
    assert items(staged) == items(plain)


def test_a_training_loop_never_writes_the_core() -> None:
    # appends and samples read the tuples made at append: the core stays empty, however
    # many experiences pass through the ring
    buffer = ReplayBuffer(capacity=50, seed=0)
    prev = None
    for t in range(500):
        e = step(t, "terminal" if t % 37 == 36 else "next", prev)
        prev = e[4]
        buffer.append(e)
        if t >= 32 and t % 4 == 0:
            buffer.sample(32)
            assert buffer[len(buffer) - 1][2] == t
    assert buffer._core is not None and len(buffer._core) == 0 and len(buffer) == 50
    plain = OneByOne(capacity=50)
    prev = None
    for t in range(500):
        e = step(t, "terminal" if t % 37 == 36 else "next", prev)
        prev = e[4]
        plain.append(e)
    check_core(buffer, plain)  # the first read of the core brings it up to date
    assert buffer._core_offset == 500 - buffer._core.capacity


def test_equal_actions_share_one_read_only_copy() -> None:
    buffer = ReplayBuffer(capacity=10)
    a = np.array([1])
    s = np.zeros(2, np.float32)
    for t in range(3):
        buffer.append((s, a, float(t), 1.0, s, {}))
    a[0] = 7  # the environment reuses its action array: the stored actions keep their value
    buffer.append((s, a, 3.0, 1.0, s, {}))
    first, second, last = buffer[0][1], buffer[1][1], buffer[3][1]
    assert first is second and not first.flags.writeable and first.tolist() == [1]
    assert last.tolist() == [7] and last is not first


def test_a_staging_buffer_is_freed_with_its_last_reference() -> None:
    # the staging holds no reference to its buffer: the buffer and its core go at once, not
    # at the next garbage collection
    classes = (ReplayBuffer, RankBasedPrioritizedReplayBuffer, ProportionalPrioritizedReplayBuffer)
    for cls in classes:
        buffer = cls(10)
        prev = None
        for t in range(30):
            e = step(t, "next", prev)
            prev = e[4]
            buffer.append(e)
        assert buffer._staging is not None
        ref = weakref.ref(buffer)
        gc.disable()
        try:
            del buffer
            assert ref() is None
        finally:
            gc.enable()
