"""Frame stacks laid out stack-last: ``rlreplay.assemble.stack_frames_last`` and
``get_transitions(ids, stack_layout="last")`` give, bit for bit, the stack-first stacks with
their stack axis moved last, C-contiguous (every pad mode, n-step, dtype and stack length)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rlreplay as rr
from rlreplay.assemble import stack_frames, stack_frames_last

Array = np.ndarray[Any, Any]

LAYOUTS = [  # (dtype, frame shape, stack length): word kernels, 8 frames, element kernel
    (np.uint8, (6, 5), 4),
    (np.uint8, (7,), 2),
    (np.uint8, (3, 2), 8),
    (np.uint16, (5,), 4),
    (np.uint16, (3,), 2),
    (np.float32, (4,), 2),
    (np.float32, (2, 3), 4),
    (np.float64, (3,), 3),
    (np.int8, (2, 2), 3),
    (np.bool_, (5,), 4),
    (np.complex64, (2,), 2),
    (np.complex128, (2,), 4),
    (np.uint8, (), 4),
    (np.float32, (3,), 1),
    (np.uint8, (3,), 5),
]


def slow_stacks(
    col: Array, base: Array, t: Array, ep_start: Array, k: int, C: int, zero_pad: bool
) -> Array:
    """The stack-last stacks, one frame at a time (the obvious reference)."""
    out = np.empty((*t.shape, *col.shape[1:], k), col.dtype)
    for idx in np.ndindex(*t.shape):
        b = idx[-1]
        for j in range(k):
            tau = int(t[idx]) - (k - 1) + j
            if tau < ep_start[b]:
                frame = (
                    np.zeros(col.shape[1:], col.dtype)
                    if zero_pad
                    else col[base[b] + ep_start[b] % C]
                )
            else:
                frame = col[base[b] + tau % C]
            out[(*idx, Ellipsis, j)] = frame
    return out


@pytest.mark.parametrize(("dtype", "frame", "k"), LAYOUTS)
@pytest.mark.parametrize("zero_pad", [True, False])
def test_stack_frames_last_is_the_transposed_stack(
    dtype: Any, frame: tuple[int, ...], k: int, zero_pad: bool
) -> None:
    rng = np.random.default_rng(k * 7 + len(frame))
    E, C, B = 3, 20, 13
    col = rng.integers(-100, 200, (E * C, *frame)).astype(dtype)
    if np.dtype(dtype).kind == "c":
        col = col + 1j * rng.integers(-9, 9, col.shape)
    base = rng.integers(0, E, B) * C
    t = rng.integers(0, 60, B)
    t = np.stack([t, t + rng.integers(1, 4, B)])  # (2, B): current and next stacks
    ep_start = t[0] - rng.integers(0, 2 * k + 1, B)
    got = stack_frames_last(col, base, t, ep_start, k, C, zero_pad)
    first = stack_frames(col.__getitem__, base, t, ep_start, k, C, zero_pad)
    assert got.flags.c_contiguous and got.dtype == col.dtype
    assert got.shape == (2, B, *frame, k)
    assert got.tobytes() == np.ascontiguousarray(np.moveaxis(first, 2, -1)).tobytes()
    assert got.tobytes() == slow_stacks(col, base, t, ep_start, k, C, zero_pad).tobytes()
    one = stack_frames_last(col, base, t[1], ep_start, k, C, zero_pad)  # a (B,) batch
    assert one.tobytes() == got[1].tobytes()


def test_stack_frames_last_reads_any_column() -> None:
    """A column the kernels do not read (not C-contiguous; big-endian) goes through NumPy."""
    rng = np.random.default_rng(1)
    wide = rng.integers(0, 255, (40, 6, 2), np.uint8)
    col = wide[:, :, 0]  # strided rows
    base, t, ep = np.zeros(5, np.int64), np.arange(3, 8), np.array([0, 4, 4, 6, 7])
    for c in (col, col.astype(">u2")):
        want = slow_stacks(np.ascontiguousarray(c), base, t, ep, 4, 40, True)
        got = stack_frames_last(c, base, t, ep, 4, 40, True)
        assert got.tobytes() == want.tobytes() and got.dtype == c.dtype
    empty = stack_frames_last(col, base[:0], t[:0], ep[:0], 4, 40, True)
    assert empty.shape == (0, 6, 4)


def filled(
    cls: Any, stack_pad: str, n_step: int, dtype: Any, k: int, **kw: Any
) -> tuple[Any, Array]:
    """A buffer of two envs with frames of ``dtype``, episodes ended at random (terminated or
    truncated, with final observations), wrapped; and its sampleable ids."""
    rng = np.random.default_rng(n_step * 10 + k)
    fields = {"obs": rr.Field((4, 3), dtype, observation=True), "action": rr.Field((), np.int64)}
    buf = cls(64, fields, num_envs=2, n_step=n_step, frame_stack=k, stack_pad=stack_pad,
              seed=0, **kw)  # fmt: skip
    for step in range(90):
        obs = rng.integers(0, 250, (2, 4, 3)).astype(dtype)
        end = rng.random(2) < 0.12
        buf.add(
            obs=obs, action=np.array([step, -step]), reward=rng.random(2),
            terminated=end & (rng.random(2) < 0.5), truncated=end,
            next_obs=rng.integers(0, 250, (2, 4, 3)).astype(dtype),
        )  # fmt: skip
    return buf, buf.sampleable_ids()


@pytest.mark.parametrize("stack_pad", ["zero", "first"])
@pytest.mark.parametrize("n_step", [1, 3])
@pytest.mark.parametrize(("dtype", "k"), [(np.uint8, 4), (np.float32, 2), (np.int16, 3)])
@pytest.mark.parametrize("cls", [rr.ReplayBuffer, rr.PrioritizedReplayBuffer])
def test_get_transitions_stack_last(
    cls: Any, dtype: Any, k: int, n_step: int, stack_pad: str
) -> None:
    buf, ids = filled(cls, stack_pad, n_step, dtype, k)
    first = buf.get_transitions(ids)
    last = buf.get_transitions(ids, stack_layout="last")
    assert first.terminated.any() and first.truncated.any()  # final observations read
    assert set(first) == set(last)
    for key in first:
        a, b = first[key], last[key]
        if key in ("obs", "next_obs"):
            assert b.flags.c_contiguous and b.shape == (ids.size, 4, 3, k)
            a = np.moveaxis(a, 1, -1)
        assert a.dtype == b.dtype and a.shape == b.shape, key
        assert np.ascontiguousarray(a).tobytes() == b.tobytes(), key
    assert buf.get_transitions(ids, stack_layout="first").obs.tobytes() == first.obs.tobytes()


def test_get_transitions_stack_last_memmap(tmp_path: Path) -> None:
    buf, ids = filled(rr.ReplayBuffer, "zero", 2, np.uint8, 4, storage="memmap", path=tmp_path)
    first, last = buf.get_transitions(ids), buf.get_transitions(ids, stack_layout="last")
    for key in ("obs", "next_obs"):
        assert np.moveaxis(first[key], 1, -1).tobytes() == last[key].tobytes()


def test_stack_layout_without_stacks_and_refused() -> None:
    buf, ids = filled(rr.ReplayBuffer, "zero", 1, np.uint8, 1)  # no stacks: nothing moves
    last = buf.get_transitions(ids, stack_layout="last")
    assert last.obs.shape == (ids.size, 4, 3)
    assert last.obs.tobytes() == buf.get_transitions(ids).obs.tobytes()
    with pytest.raises(rr.ConfigError, match="stack_layout"):
        buf.get_transitions(ids, stack_layout="middle")
