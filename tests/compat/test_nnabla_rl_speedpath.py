"""The nnabla-rl front-end's training-loop shortcuts give what the general paths give.

A DQN/Rainbow step is "append a few experiences, ``sample(32)``, ``update_priorities``"; the
front-end takes shortcuts there (``docs/migrating/nnabla_rl.md``, speed): staged runs of a
few steps go to the core one ``add`` each instead of one ``extend``
(``_staging.EXTEND_ROWS``), the rank-based draw hands its int64 positions on without a list,
an int64 position array is read without a copy, a NumPy error array is clipped with its own
method, and an update with nothing overwritten since its sample skips the overwrite test.
The reference is the same buffer taking the general paths (every run one ``extend``, the
positions as a list, the errors as a list), over Hypothesis sequences of appends (episode
ends, jumps, time limits, wrap-arounds), samples, updates and reads: the same experiences,
weights, priorities and random draws, in the same order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlreplay.compat.nnabla_rl._staging as staging
from rlreplay.compat.nnabla_rl.replay_buffers import (
    ProportionalPrioritizedReplayBuffer,
    RankBasedPrioritizedReplayBuffer,
)


class GeneralPending:
    """``_pending`` always through the overwrite test (never the nothing-overwritten one)."""

    _last_sampled: Any
    _last_first: int
    _slots: int
    _first: Callable[[], int]

    def _pending(self) -> Any:
        slots = super()._pending()  # type: ignore[misc]  # (raises when nothing is pending)
        last = self._last_sampled
        dropped = (last >= self._last_first) & (last < self._first())
        del slots
        return np.where(dropped, -1, last % self._slots)


class GeneralRank(GeneralPending, RankBasedPrioritizedReplayBuffer):
    """The rank-based buffer fed as before the shortcuts: positions and errors as lists."""

    def sample_indices(self, indices: Any, num_steps: int = 1) -> tuple[Any, dict[str, Any]]:
        if isinstance(indices, np.ndarray):
            indices = indices.tolist()
        return super().sample_indices(indices, num_steps)

    def update_priorities(self, errors: Any) -> None:
        super().update_priorities(np.asarray(errors).tolist())


class GeneralProportional(GeneralPending, ProportionalPrioritizedReplayBuffer):
    """The proportional buffer with its errors given as a list (``np.clip``'s own path)."""

    def update_priorities(self, errors: Any) -> None:
        super().update_priorities(np.asarray(errors).tolist())


def experience(t: int, op: str, prev_next: Any) -> tuple[Any, ...]:
    # a new episode after a jump: s is not the previous s_next
    s = np.full(3, -t, np.float32) if prev_next is None or op == "jump" else prev_next.copy()
    info: dict[str, Any] = {"t": t}
    if op == "timelimit":
        info["TimeLimit.truncated"] = True
    non_terminal = 0.0 if op == "terminal" else 1.0
    return (s, np.array([t % 3]), float(t) / 7, non_terminal, s + 1, info)


def episode_ends(buffer: Any) -> str:
    """Where the core's episodes end (steps to the end from each kept experience)."""
    if buffer._core is None or not len(buffer):
        return "no core"
    buffer._core_size()  # the staged appends are written (as before any read of the core)
    ids = np.arange(len(buffer)) + buffer._first_id() - buffer._core_offset  # the core's ids
    return repr(buffer._core.steps_to_episode_end(ids).tolist())


def run(
    make: Callable[[], Any], extend_rows: int, ops: list[tuple[str, int]], errors: Any
) -> list[str]:
    """Everything a user sees of ``ops`` (reprs of results, exceptions and random state)."""
    buffer = make()
    seen: list[str] = []
    prev_next = None
    saved = staging.EXTEND_ROWS
    staging.EXTEND_ROWS = extend_rows
    try:
        for t, (op, arg) in enumerate(ops):
            try:
                if op == "sample":
                    experiences, info = buffer.sample(num_samples=arg, num_steps=1 + t % 2)
                    seen.append(repr(experiences) + repr(info["weights"].tolist()))
                elif op == "update":
                    buffer.update_priorities(errors[:arg])
                elif op == "read":
                    seen.append(repr([buffer[i] for i in range(len(buffer))]))
                    seen.append(episode_ends(buffer))
                else:
                    e = experience(t, op, prev_next)
                    prev_next = e[4]
                    for _ in range(arg):
                        buffer.append(e)
                        e = experience(t, "next", e[4])
                        prev_next = e[4]
            except Exception as exc:  # the same errors, with the same messages
                seen.append(f"{type(exc).__name__}: {exc}")
        seen.append(repr(buffer._rng.bit_generator.state))
        seen.append(repr(len(buffer)))
        seen.append(episode_ends(buffer))
    finally:
        staging.EXTEND_ROWS = saved
    return seen


OPS = st.lists(
    st.tuples(
        st.sampled_from(
            ["next", "next", "jump", "terminal", "timelimit", "sample", "update", "read"]
        ),
        st.integers(1, 20),
    ),
    max_size=25,
)


@pytest.mark.parametrize(
    ("fast", "general"),
    [
        (RankBasedPrioritizedReplayBuffer, GeneralRank),
        (ProportionalPrioritizedReplayBuffer, GeneralProportional),
    ],
)
@settings(max_examples=30, deadline=None)
@given(capacity=st.integers(2, 40), ops=OPS, seed=st.integers(0, 2**16))
def test_loop_shortcuts_equal_the_general_paths(
    fast: type, general: type, capacity: int, ops: list[tuple[str, int]], seed: int
) -> None:
    errors = np.random.default_rng(seed).normal(size=20) * 2
    errors[seed % 20] = np.nan if seed % 3 == 0 else -0.0  # NaN and -0.0 clip as NumPy does
    expected = run(lambda: general(capacity, seed=seed), 10**9, ops, errors)
    got = run(lambda: fast(capacity, seed=seed), 0, ops, errors)
    assert got == expected


@settings(max_examples=20, deadline=None)
@given(capacity=st.integers(2, 60), ops=OPS, seed=st.integers(0, 2**16))
def test_staged_runs_added_one_by_one_equal_one_extend(
    capacity: int, ops: list[tuple[str, int]], seed: int
) -> None:
    errors = np.random.default_rng(seed).random(20)
    make = lambda: RankBasedPrioritizedReplayBuffer(capacity, seed=seed)  # noqa: E731
    assert run(make, 10**9, ops, errors) == run(make, 0, ops, errors)
