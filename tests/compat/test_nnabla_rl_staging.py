"""Staged appends (``_staging``) store exactly what the one-by-one path stores.

The nnabla-rl front-end stages the usual experiences and writes them to the core in one
``extend`` before any read (so ``append`` costs about what nnabla-rl's list insert costs).
What a user sees must not change: nnabla-rl hands back every experience as appended, in
order, and the columnar store's episode ends (terminal, ``TimeLimit.truncated``, a changed
``s``) are those of the one-by-one path. The reference here is the same buffer with staging
turned off, over Hypothesis sequences that mix jumps, ends, odd objects and reads.
"""

from __future__ import annotations

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
        ids = np.arange(len(staged)) + staged._first_id()
        assert (
            staged._core.steps_to_episode_end(ids).tolist()
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
