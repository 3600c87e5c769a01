"""Golden tables for frame stacks: trajectory -> expected stacked obs / next_obs."""

from __future__ import annotations

import numpy as np
import pytest

import rlreplay as rr


def make(k: int, n: int = 1, capacity: int = 64, pad: str = "zero") -> rr.ReplayBuffer:
    return rr.ReplayBuffer(
        capacity, {"obs": rr.Field((), np.uint8)}, frame_stack=k, n_step=n, stack_pad=pad, seed=0
    )


def episode(buf: rr.ReplayBuffer, frames: list[int], final: int, end: str) -> None:
    for i, f in enumerate(frames):
        last = i == len(frames) - 1
        buf.add(
            obs=f,
            reward=1.0,
            next_obs=final,
            terminated=last and end == "terminated",
            truncated=last and end == "truncated",
        )


def stacks(buf: rr.ReplayBuffer) -> tuple[list[list[int]], list[list[int]]]:
    b = buf.get_transitions(buf.sampleable_ids())
    return b.obs.tolist(), b.next_obs.tolist()


@pytest.mark.parametrize("end", ["terminated", "truncated"])
def test_stacks_after_an_episode_end(end: str) -> None:
    buf = make(3)
    episode(buf, [1, 2, 3], final=4, end=end)
    episode(buf, [11, 12], final=13, end=end)
    obs, nxt = stacks(buf)
    assert obs == [[0, 0, 1], [0, 1, 2], [1, 2, 3], [0, 0, 11], [0, 11, 12]]
    assert nxt == [[0, 1, 2], [1, 2, 3], [2, 3, 4], [0, 11, 12], [11, 12, 13]]


def test_episode_shorter_than_the_stack_first_padding() -> None:
    buf = make(4, pad="first")
    episode(buf, [5], final=6, end="terminated")
    episode(buf, [7, 8], final=9, end="truncated")
    obs, nxt = stacks(buf)
    assert obs == [[5, 5, 5, 5], [7, 7, 7, 7], [7, 7, 7, 8]]
    assert nxt == [[5, 5, 5, 6], [7, 7, 7, 8], [7, 7, 8, 9]]


def test_stacks_with_nstep_windows() -> None:
    buf = make(2, n=3)
    episode(buf, [1, 2, 3, 4, 5], final=6, end="terminated")
    b = buf.get_transitions(buf.sampleable_ids())
    assert b.obs.tolist() == [[0, 1], [1, 2], [2, 3], [3, 4], [4, 5]]
    assert b.next_obs.tolist() == [[3, 4], [4, 5], [5, 6], [5, 6], [5, 6]]
    assert b.steps.tolist() == [3, 3, 3, 2, 1]


def test_cut_episode_is_never_padded() -> None:
    """After overwriting, the oldest steps whose stack lost frames are not sampleable."""
    buf = make(3, capacity=8)  # 8 slots, one env
    episode(buf, list(range(1, 13)), final=13, end="terminated")  # 12 steps: 1..4 overwritten
    obs, _ = stacks(buf)
    # stored steps hold frames 5..12; those with frames 5 and 6 at the stack's bottom need 3, 4
    assert obs[0] == [5, 6, 7]
    assert all(0 not in row for row in obs)
    assert buf.num_sampleable == 6


def test_frames_stay_uint8_and_are_stored_once() -> None:
    buf = rr.ReplayBuffer(
        10_000, {"obs": rr.Field((84, 84), np.uint8), "action": rr.Field((), np.int64)},
        frame_stack=4,
    )  # fmt: skip
    frame = np.full((84, 84), 7, np.uint8)
    for t in range(300):
        buf.add(
            obs=frame, action=0, reward=0.0, next_obs=frame, terminated=t % 100 == 99,
            truncated=False,
        )  # fmt: skip
    b = buf.sample(8)
    assert b.obs.dtype == np.uint8 and b.obs.shape == (8, 4, 84, 84)
    assert b.next_obs.dtype == np.uint8 and b.next_obs.shape == (8, 4, 84, 84)
    one_copy = 10_000 * 84 * 84
    assert one_copy <= buf.nbytes <= 1.05 * one_copy
