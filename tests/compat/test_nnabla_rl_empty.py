"""nnabla-rl front-end on empty buffers and zero-length inputs, as nnabla-rl 0.16.0 behaves.

Every expected result or exception type below is what nnabla-rl 0.16.0's own code does (read
in ``nnabla_rl/replay_buffer.py`` and ``nnabla_rl/replay_buffers/*.py``, and checked side by
side with that code; the prioritized cases also against its transcription in
``tests/compat/_nnabla_rl_reference.py``). The code lines that decide each case are quoted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rlreplay.compat.nnabla_rl.replay_buffers as RB
from rlreplay.compat.nnabla_rl.replay_buffer import ReplayBuffer
from tests.compat import _nnabla_rl_reference as ref


def experience(t: int) -> tuple[Any, ...]:
    s = np.full(2, t, np.float32)
    return (s, np.array([t % 3]), float(t), 1.0, s + 1, {"t": t})


def prioritized(variant: str, capacity: int = 4) -> Any:
    return RB.PrioritizedReplayBuffer(capacity, variant=variant, seed=0)


VARIANTS = ["proportional", "rank_based"]
ZERO_ERRORS: list[Any] = [[], np.zeros(0), np.zeros((0, 1))]


# ---------------------------------------------------------------- prioritized: update_priorities
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("errors", ZERO_ERRORS, ids=["list", "(0,)", "(0,1)"])
def test_update_with_no_errors_ends_the_sample(variant: str, errors: Any) -> None:
    """``for index, error in zip(indices, errors)`` pairs nothing, then
    ``self._last_sampled_indices = None``: nothing changes, the next sample is allowed."""
    buf = prioritized(variant)
    for t in range(3):
        buf.append(experience(t))
    buf.sample(2)
    buf.update_priorities(errors)
    _, info = buf.sample(2)  # no RuntimeError: the pending sample ended
    if variant == "proportional":  # every mass still the initial max (1.0): equal weights
        np.testing.assert_array_equal(info["weights"], np.ones((2, 1)))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("shape", [(3,), (3, 1)])
def test_extra_errors_are_left_out(variant: str, shape: tuple[int, ...]) -> None:
    """``zip`` stops at the shorter: errors past the sampled experiences are ignored."""
    mine, theirs = _pair(variant == "rank_based")
    for t in range(4):
        mine.append(experience(t))
        theirs.append(experience(t))
    errors = np.array([0.5, 0.1, 0.9]).reshape(shape)
    for _ in range(3):
        (a, wa), (b, wb) = mine.sample(2), theirs.sample(2)
        assert [e[2] for e in a] == [e[2] for e in b]
        np.testing.assert_array_equal(wa["weights"], wb["weights"])
        mine.update_priorities(errors)
        theirs.update_priorities(errors)


def _pair(rank_based: bool) -> tuple[Any, Any]:
    cls = (
        "RankBasedPrioritizedReplayBuffer" if rank_based else "ProportionalPrioritizedReplayBuffer"
    )
    mine = getattr(RB, cls)(4, seed=3)
    theirs = getattr(ref, cls)(4)
    theirs._rng = np.random.default_rng(3)
    return mine, theirs


@pytest.mark.parametrize("variant", VARIANTS)
def test_update_with_nothing_sampled(variant: str) -> None:
    """``zip(None, errors)``: ``TypeError``, also with no errors."""
    buf = prioritized(variant)
    buf.append(experience(0))
    with pytest.raises(TypeError):
        buf.update_priorities([])
    with pytest.raises(TypeError):
        buf.update_priorities([0.5])


def test_rank_based_scalar_errors_keep_the_sample() -> None:
    """A scalar is not iterable (``TypeError``); the sample stays pending, as there."""
    buf = prioritized("rank_based")
    buf.append(experience(0))
    buf.sample(1)
    with pytest.raises(TypeError):
        buf.update_priorities(0.5)
    with pytest.raises(RuntimeError, match="without updating priority"):
        buf.sample(1)
    buf.update_priorities([0.5])
    buf.sample(1)


# ---------------------------------------------------------------- prioritized: sampling
@pytest.mark.parametrize("rank_based", [False, True])
def test_pending_sample_draws_before_it_is_refused(rank_based: bool) -> None:
    """``sample`` draws, then ``sample_indices`` raises ``RuntimeError`` for the pending sample:
    the refused call uses the generator as nnabla-rl's does, so later draws stay the same."""
    mine, theirs = _pair(rank_based)
    for t in range(4):
        mine.append(experience(t))
        theirs.append(experience(t))
    for buf in (mine, theirs):
        buf.sample(2)
        with pytest.raises(RuntimeError, match="without updating priority"):
            buf.sample(2)
        buf.update_priorities([0.2, 0.4])
    (a, wa), (b, wb) = mine.sample(2), theirs.sample(2)
    assert [e[2] for e in a] == [e[2] for e in b]
    np.testing.assert_array_equal(wa["weights"], wb["weights"])


@pytest.mark.parametrize(
    ("variant", "error"),
    [("proportional", ValueError), ("rank_based", ZeroDivisionError)],
)
def test_sample_zero_while_pending(variant: str, error: type[Exception]) -> None:
    """``sample(0)`` fails as it does without a pending sample (proportional: no draws, then
    ``Indices are empty``; rank-based: ``(len(boundaries) + 1) / k``) before the pending check."""
    buf = prioritized(variant)
    buf.append(experience(0))
    buf.sample(1)
    with pytest.raises(error):
        buf.sample(0)


@pytest.mark.parametrize("variant", VARIANTS)
def test_sample_indices_on_empty(variant: str) -> None:
    """Empty indices: ``Indices are empty``; ``[0]`` reads the ring: ``KeyError``; with
    ``num_steps=0`` nothing is read and the weights look the slot up (rank-based: the heap map
    holds None, ``None + 1`` is a ``TypeError``)."""
    buf = prioritized(variant)
    with pytest.raises(ValueError, match="Indices are empty"):
        buf.sample_indices([])
    with pytest.raises(KeyError):
        buf.sample_indices([0])
    if variant == "rank_based":
        with pytest.raises(TypeError):
            buf.sample_indices([0], 0)
    else:
        with np.errstate(all="ignore"):
            experiences, info = buf.sample_indices([0], 0)
        assert experiences == () and info["weights"].shape == (1, 1)


# ---------------------------------------------------------------- trajectory buffers
@pytest.mark.parametrize("bound", [None, 3])
def test_empty_trajectory_buffer_reads(bound: int | None) -> None:
    """``_cumsum_experiences = [0]``: index 0 finds no count above it (``ValueError``); a
    negative index reads trajectory 0 of the ring (``KeyError``) or deque (``IndexError``)."""
    buf = RB.TrajectoryReplayBuffer(num_trajectories=bound, seed=0)
    with pytest.raises(ValueError, match="out of range"):
        buf.sample_indices([0])
    with pytest.raises(KeyError if bound else IndexError):
        buf[-1]
    with pytest.raises(KeyError if bound else IndexError):
        buf.get_trajectory(0)
    with pytest.raises(ValueError, match="Indices are empty"):
        buf.sample_indices_trajectory([])
    with pytest.raises(ValueError):
        buf.sample_trajectories(1)
    with pytest.raises(ValueError, match="Indices are empty"):
        buf.sample_indices_portion([])


@pytest.mark.parametrize("bound", [None, 3])
def test_empty_trajectory(bound: int | None) -> None:
    """``append_trajectory([])`` stores an empty trajectory: one trajectory, no experience."""
    buf = RB.TrajectoryReplayBuffer(num_trajectories=bound, seed=0)
    buf.append_trajectory([])
    assert buf.trajectory_num == 1 and len(buf) == 0
    assert buf.get_trajectory(0) == []
    trajectories, info = buf.sample_indices_trajectory([0])
    assert trajectories == [] and info["weights"].shape == (1, 1)
    trajectories, info = buf.sample_trajectories(1)
    assert trajectories == [] and info["weights"].shape == (1, 1)
    with pytest.raises(ValueError, match="out of range"):
        buf[0]
    with pytest.raises(IndexError):  # trajectory 0 is [], and [][-1] fails
        buf[-1]
    buf.append_trajectory([experience(0)])
    assert len(buf) == 1 and buf[0][2] == 0.0
    assert buf.get_trajectory(0) == [] and buf.get_trajectory(1)[0][2] == 0.0


# ---------------------------------------------------------------- every buffer, empty
EMPTY: dict[str, Callable[[], Any]] = {
    "replay": lambda: ReplayBuffer(seed=0),
    "replay_bounded": lambda: ReplayBuffer(3, seed=0),
    "replacement": lambda: RB.ReplacementSamplingReplayBuffer(3, seed=0),
    "decorable": lambda: RB.DecorableReplayBuffer(3, lambda e: e),
    "hindsight": lambda: RB.HindsightReplayBuffer(lambda *a: 0.0, capacity=3, seed=0),
    "atari": lambda: RB.MemoryEfficientAtariBuffer(3, stacked_frames=2),
    "proportional": lambda: prioritized("proportional"),
    "rank_based": lambda: prioritized("rank_based"),
    "trajectory": lambda: RB.TrajectoryReplayBuffer(seed=0),
}


@pytest.mark.parametrize("name", list(EMPTY))
def test_every_buffer_empty(name: str) -> None:
    """On an empty buffer: ``append_all([])`` adds nothing; ``sample_indices([])`` raises
    ``Indices are empty``; ``update_priorities([])`` does nothing on the non-prioritized
    buffers (``pass``) and is a ``TypeError`` on the prioritized ones (``zip(None, ...)``);
    ``sample(0)`` raises ``ValueError`` (prioritized: ``RuntimeError``, ``Insufficient buffer
    length``, checked first)."""
    buf = EMPTY[name]()
    buf.append_all([])
    assert len(buf) == 0
    with pytest.raises(ValueError, match="Indices are empty"):
        buf.sample_indices([])
    if name in ("proportional", "rank_based"):  # zip(None, ...)
        with pytest.raises(TypeError):
            buf.update_priorities([])
    else:
        buf.update_priorities([])
    prioritized = name in ("proportional", "rank_based")
    with pytest.raises(RuntimeError if prioritized else ValueError), np.errstate(all="ignore"):
        buf.sample(0)
    assert len(buf) == 0


@pytest.mark.parametrize("repeat", [True, False])
def test_buffer_iterator_over_empty_buffer(repeat: bool) -> None:
    """``next``: the slice is short, so (repeat) ``np.append`` of two empty slices samples
    ``sample_indices([])``, or (no repeat) the epoch ends and the batch is still sampled:
    ``Indices are empty`` both ways; the next call ends the epoch (``StopIteration``)."""
    it = RB.BufferIterator(ReplayBuffer(3, seed=0), 2, shuffle=False, repeat=repeat)
    with pytest.raises(ValueError, match="Indices are empty"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)
