"""Atari buffers given plain frames or stacks of any depth, as nnabla-rl 0.16.0 reads them.

Expected values transcribed from nnabla-rl 0.16.0 (Apache-2.0, Copyright Sony Group
Corporation), ``nnabla_rl/replay_buffers/memory_efficient_atari_buffer.py``, driven side by
side with the front-end: ``_append_to_buffer`` keeps a state of shape ``(84, 84)`` as the frame
(``if s.shape != (84, 84): s = s[-1]; s_next = s_next[-1]``), quantises floating frames only
(``if _is_float(s): s = _denormalize_state(s)``) and asserts ``s.shape == (84, 84)`` and
``s.shape == s_next.shape``; ``_getitem_from_buffer`` returns ``(stacked_frames, 84, 84)``
float32 stacks, the first frame repeated after a terminal (``if reset: states[0:tail_index] =
s``), and ``s_next`` as ``s[1:]`` followed by the experience's own ``s_next`` frame.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from rlreplay.compat.nnabla_rl.replay_buffers import (
    MemoryEfficientAtariBuffer,
    MemoryEfficientAtariTrajectoryBuffer,
    ProportionalPrioritizedAtariBuffer,
    RankBasedPrioritizedAtariBuffer,
)

BUFFERS = [
    MemoryEfficientAtariBuffer,
    ProportionalPrioritizedAtariBuffer,
    RankBasedPrioritizedAtariBuffer,
]


def frame(v: int, dtype: Any = np.float64) -> np.ndarray[Any, Any]:
    x = np.full((84, 84), v)
    return (x / 255.0).astype(dtype) if np.issubdtype(dtype, np.floating) else x.astype(dtype)


def episode(n: int, dtype: Any = np.float64, terminal: int = -1) -> list[tuple[Any, ...]]:
    return [
        (frame(t + 1, dtype), 0, 0.0, 0.0 if t == terminal else 1.0, frame(t + 2, dtype), {})
        for t in range(n)
    ]


def levels(state: np.ndarray[Any, Any]) -> list[float]:
    return np.round(state[:, 0, 0] * 255).tolist()


@pytest.mark.parametrize("cls", BUFFERS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.uint8, np.int64])
def test_plain_frames_come_back_as_stacks(cls: Any, dtype: Any) -> None:
    buffer = cls(10, stacked_frames=4)
    for e in episode(5, dtype):
        buffer.append(e)
    # 0.16.0: buffer[i][0] / [4], levels of frame 1.. (first frame repeated at the start)
    expected = [
        ([1, 1, 1, 1], [1, 1, 1, 2]),
        ([1, 1, 1, 2], [1, 1, 2, 3]),
        ([1, 1, 2, 3], [1, 2, 3, 4]),
        ([1, 2, 3, 4], [2, 3, 4, 5]),
        ([2, 3, 4, 5], [3, 4, 5, 6]),
    ]
    for i, (s, s_next) in enumerate(expected):
        e = buffer[i]
        assert len(e) == 6 and e[0].shape == (4, 84, 84) and e[0].dtype == np.float32
        assert (levels(e[0]), levels(e[4])) == (s, s_next)


def test_after_a_terminal_the_first_frame_is_repeated() -> None:
    buffer = MemoryEfficientAtariBuffer(10, stacked_frames=4)
    for e in episode(5, terminal=2):
        buffer.append((e[0], e[1], e[2], e[3], frame(4) if e[3] == 0.0 else e[4], e[5]))
    # 0.16.0: experience 3 follows the terminal experience 2, its stack restarts
    assert levels(buffer[2][0]) == [1, 1, 2, 3]
    assert levels(buffer[3][0]) == [4, 4, 4, 4] and levels(buffer[3][4]) == [4, 4, 4, 5]
    assert levels(buffer[4][0]) == [4, 4, 4, 5]


def test_overwritten_frames_still_complete_the_oldest_stack() -> None:
    buffer = MemoryEfficientAtariBuffer(3, stacked_frames=4)
    for e in episode(7):
        buffer.append(e)
    # 0.16.0: the removed experiences' frames stay in its sub_buffer
    assert [levels(buffer[i][0]) for i in range(3)] == [[2, 3, 4, 5], [3, 4, 5, 6], [4, 5, 6, 7]]


def test_stacks_of_another_depth_and_one_frame() -> None:
    shallow = MemoryEfficientAtariBuffer(10, stacked_frames=4)
    for t in range(3):  # stacks of 2 frames: 0.16.0 keeps s[-1] only
        s = np.stack([frame(max(t, 1)), frame(t + 1)])
        shallow.append((s, 0, 0.0, 1.0, np.stack([frame(t + 1), frame(t + 2)]), {}))
    assert levels(shallow[2][0]) == [1, 1, 2, 3]
    single = MemoryEfficientAtariBuffer(10, stacked_frames=1)
    for e in episode(2):
        single.append(e)
    assert single[1][0].shape == (1, 84, 84) and levels(single[1][4]) == [3]


def test_objects_path_reads_as_0_16_0() -> None:
    buffer = MemoryEfficientAtariBuffer(10, stacked_frames=4)
    for e in episode(2):
        buffer.append(e)
    big = np.full((84, 84), 300, np.int64)  # s_next read with .astype(float32): not wrapped
    buffer.append((frame(3), 0, 0.0, 1.0, big, {}, "dropped"))
    buffer.append([big, 0, 0.0, 1.0, frame(9, np.int64), {}])  # a list experience
    e = buffer[2]
    assert len(e) == 6 and levels(e[0]) == [1, 1, 2, 3] and levels(e[4]) == [1, 2, 3, 300]
    # 300 assigned into 0.16.0's uint8 stack wraps to 44
    assert levels(buffer[3][0]) == [1, 2, 3, 44] and levels(buffer[3][4]) == [2, 3, 44, 9]


@pytest.mark.parametrize("cls", BUFFERS)
def test_what_0_16_0_refuses(cls: Any) -> None:
    buffer = cls(10, stacked_frames=4)
    with pytest.raises(AssertionError):  # assert s.shape == (84, 84): s[-1] is (84,)
        buffer.append((np.zeros((2, 1, 84, 84)), 0, 0.0, 1.0, np.zeros((2, 1, 84, 84)), {}))
    with pytest.raises(AssertionError):  # assert s.shape == s_next.shape
        buffer.append((frame(1), 0, 0.0, 1.0, np.stack([frame(2)] * 4), {}))
    with pytest.raises(IndexError):  # s[-1] of an empty stack
        buffer.append((np.zeros((0, 84, 84)), 0, 0.0, 1.0, np.zeros((0, 84, 84)), {}))
    with pytest.raises(AttributeError):  # s.shape of a list
        buffer.append((frame(1).tolist(), 0, 0.0, 1.0, frame(2).tolist(), {}))
    with pytest.raises(ValueError):  # s, a, r, non_terminal, s_next, info, *_ = experience
        buffer.append((frame(1), 0, 0.0, 1.0, frame(2)))
    assert len(buffer) == 0  # nothing stored


@pytest.mark.parametrize(
    "shape",
    [(5, 4), (84, 83), (83, 84), (4, 5, 4), (4, 84, 83), (84, 84, 1), (84,), (1, 1, 84, 84)],
)
@pytest.mark.parametrize("cls", [*BUFFERS, MemoryEfficientAtariTrajectoryBuffer])
def test_frames_of_other_sizes_are_refused_as_0_16_0(cls: Any, shape: tuple[int, ...]) -> None:
    # 0.16.0's _append_to_buffer: ``if s.shape != (84, 84): s = s[-1]``, then
    # ``assert s.shape == (84, 84)``: a 2-D frame of another size (its last row is 1-D), a
    # stack of such frames (the last one is not (84, 84)) and (84, 84, 1) all raise
    # AssertionError, before anything is stored (side by side: /tmp/s13/atari.py).
    experience = (np.full(shape, 0.5), 0, 1.0, 1.0, np.full(shape, 0.25), {})
    buffer = cls() if cls is MemoryEfficientAtariTrajectoryBuffer else cls(10, stacked_frames=4)
    with pytest.raises(AssertionError, match=r"\(84, 84\)"):
        if cls is MemoryEfficientAtariTrajectoryBuffer:
            buffer.append_trajectory([experience])
        else:
            buffer.append(experience)
    assert len(buffer) == 0


@pytest.mark.parametrize("depth", [1, 7])
def test_stacks_of_any_depth_keep_their_last_84x84_frame(depth: int) -> None:
    # 0.16.0: a state that is not (84, 84) gives s[-1] (and s_next[-1]), so (N, 84, 84)
    # stacks of any depth N store their last frame; stacks read back (stacked_frames, 84, 84).
    buffer = MemoryEfficientAtariBuffer(10, stacked_frames=4)
    for t in range(3):
        s = np.stack([frame(100 + i) for i in range(depth - 1)] + [frame(t + 1)])
        buffer.append((s, 0, 0.0, 1.0, np.stack([frame(t + 2)] * depth), {}))
    assert levels(buffer[2][0]) == [1, 1, 2, 3] and levels(buffer[2][4]) == [1, 2, 3, 4]


def test_trajectory_of_plain_frames() -> None:
    buffer = MemoryEfficientAtariTrajectoryBuffer()
    buffer.append_trajectory(episode(5))
    trajectory = buffer.get_trajectory(0)
    # 0.16.0 stores each trajectory in a MemoryEfficientAtariBuffer(len(trajectory))
    assert [levels(e[0]) for e in trajectory[0:5]] == [
        [1, 1, 1, 1],
        [1, 1, 1, 2],
        [1, 1, 2, 3],
        [1, 2, 3, 4],
        [2, 3, 4, 5],
    ]


def appended_after_three(buffer: Any, s: Any, s_next: Any, then: int) -> list[Any]:
    """Frames 1..3 as float64, then ``(s, s_next)``, then float64 frame ``then``; the last two."""
    for e in episode(3):
        buffer.append(e)
    buffer.append((s, 10, 0.5, 1.0, s_next, {}))
    buffer.append((frame(then), 11, 0.5, 1.0, frame(then + 1), {}))
    return [(levels(buffer[i][0]), levels(buffer[i][4])) for i in (3, 4)]


@pytest.mark.parametrize("cls", BUFFERS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_an_object_frame_of_the_same_values_continues_the_stack(cls: Any, dtype: Any) -> None:
    # 0.16.0 (side by side, /tmp/s5f5/cases.py): an object frame is stored unquantised (not
    # _is_float), so it reads as uint8(4 / 255) == 0 in the stack, and the stack continues:
    # 0.16.0 cuts only after ``0 == non_terminal``. The front-end compares the stored values
    # (the quantised frame), so a change of representation alone starts no new episode.
    s, s_next = frame(4, dtype).astype(object), frame(5, dtype).astype(object)
    assert appended_after_three(cls(10), s, s_next, then=5) == [
        ([1, 2, 3, 0], [2, 3, 0, 0]),
        ([2, 3, 0, 5], [3, 0, 5, 6]),
    ]


@pytest.mark.parametrize("cls", BUFFERS)
@pytest.mark.parametrize(
    "s, s_next",
    [
        (frame(4, np.float32), frame(5, np.float32)),
        (frame(4, np.uint8), frame(5, np.uint8)),
        (frame(4, np.int64).astype(object), frame(5, np.int64).astype(object)),
    ],
    ids=["float32", "uint8", "object-int"],
)
def test_other_representations_of_the_same_frames_continue(cls: Any, s: Any, s_next: Any) -> None:
    # 0.16.0 (side by side): the same stacks as an all-float64 episode
    assert appended_after_three(cls(10), s, s_next, then=5) == [
        ([1, 2, 3, 4], [2, 3, 4, 5]),
        ([2, 3, 4, 5], [3, 4, 5, 6]),
    ]


def test_a_reset_to_another_object_frame_still_starts_a_stack() -> None:
    # Deliberate difference 2: 0.16.0 gives ([1, 2, 3, 0], [2, 3, 0, 0]) and
    # ([2, 3, 0, 10], [3, 0, 10, 11]) here, stacking the previous episode's frames in front of
    # the new observation 9 (read as uint8(9 / 255) == 0, as in 0.16.0's stacks).
    s, s_next = frame(9).astype(object), frame(10).astype(object)
    assert appended_after_three(MemoryEfficientAtariBuffer(10), s, s_next, then=10) == [
        ([0, 0, 0, 0], [0, 0, 0, 0]),
        ([0, 0, 0, 10], [0, 0, 10, 11]),
    ]


def test_stored_frame_and_same_frame() -> None:
    from rlreplay.compat.nnabla_rl.replay_buffers._atari_frames import same_frame, stored_frame

    assert stored_frame(frame(4)).dtype == np.uint8  # 0.16.0's quantised frame
    assert np.array_equal(stored_frame(frame(4).astype(object)), stored_frame(frame(4)))
    assert same_frame(frame(4, np.uint8), frame(4, np.float32))
    assert not same_frame(frame(4), frame(5).astype(object))
    assert not same_frame(frame(4), np.zeros((84, 83)))  # another shape
    odd = np.empty((2, 2), dtype=object)
    odd[:] = "x"  # not numbers: compared as they are
    assert same_frame(odd, odd.copy()) and not same_frame(odd, np.zeros((2, 2)))
