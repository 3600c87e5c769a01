"""Storage backends: memmap buffers behave exactly like memory buffers; frames are stored once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rlreplay as rr

FRAME = (84, 84)
FRAME_BYTES = 84 * 84


def atari_fields() -> dict[str, rr.Field]:
    return {"obs": rr.Field(FRAME, np.uint8), "action": rr.Field((), np.int64)}


def make(capacity: int, num_envs: int = 1, **kw: Any) -> rr.ReplayBuffer:
    return rr.ReplayBuffer(
        capacity, atari_fields(), num_envs=num_envs, n_step=3, frame_stack=4, seed=7, **kw
    )


def frames(start: int, T: int) -> np.ndarray:
    """T distinct-looking frames: the whole frame is t % 251, row 0 carries t // 251."""
    t = np.arange(start, start + T)
    out = np.empty((T, *FRAME), np.uint8)
    out[...] = (t % 251).astype(np.uint8)[:, None, None]
    out[:, 0, :] = (t // 251).astype(np.uint8)[:, None]
    return out


def feed(buf: rr.ReplayBuffer, seed: int, steps: int) -> None:
    """Episodes of 3..40 steps ending in termination or truncation, alternating envs, written
    step by step or with one extend call."""
    rng = np.random.default_rng(seed)
    t = 0
    episode = 0
    while t < steps:
        T = int(rng.integers(3, 41))
        env = episode % buf.num_envs
        obs = frames(seed * 100_000 + t, T + 1)
        action = rng.integers(0, 6, size=T)
        reward = rng.standard_normal(T).astype(np.float32)
        terminated = np.zeros(T, np.bool_)
        truncated = np.zeros(T, np.bool_)
        if rng.random() < 0.5:
            terminated[-1] = True
        else:
            truncated[-1] = True
        if rng.random() < 0.5:
            buf.extend(
                env_id=env,
                obs=obs[:-1],
                action=action,
                reward=reward,
                next_obs=obs[1:],
                terminated=terminated,
                truncated=truncated,
            )
        else:
            for j in range(T):
                one = {
                    "obs": obs[j],
                    "action": action[j],
                    "reward": reward[j],
                    "next_obs": obs[j + 1],
                    "terminated": terminated[j],
                    "truncated": truncated[j],
                }
                if buf.num_envs == 1:
                    buf.add(**one)
                else:
                    buf.add(env_ids=[env], **{k: np.asarray(v)[None] for k, v in one.items()})
        t += T
        episode += 1


def assert_same_batches(a: rr.Batch, b: rr.Batch) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].dtype == b[k].dtype, k
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def assert_same_stream(bufs: list[rr.ReplayBuffer], draws: int = 4, size: int = 32) -> None:
    for _ in range(draws):
        batches = [b.sample(size) for b in bufs]
        for other in batches[1:]:
            assert_same_batches(batches[0], other)


def assert_same_contents(a: rr.ReplayBuffer, b: rr.ReplayBuffer) -> None:
    ids = a.sampleable_ids()
    np.testing.assert_array_equal(ids, b.sampleable_ids())
    assert len(a) == len(b) and a.num_sampleable == b.num_sampleable
    assert_same_batches(a.get_transitions(ids), b.get_transitions(ids))


# --------------------------------------------------------------------------- memmap == memory
@pytest.mark.parametrize("num_envs", [1, 2])
def test_memmap_buffer_gives_the_same_samples_as_memory(num_envs: int, tmp_path: Path) -> None:
    store = tmp_path / "store"
    mem = make(256, num_envs)
    mm = make(256, num_envs, storage="memmap", path=store)
    assert store.is_dir()
    for part in range(3):  # ~1000 steps into 256 slots: the ring wraps several times
        for buf in (mem, mm):
            feed(buf, seed=part, steps=330)
        assert_same_contents(mem, mm)
        assert_same_stream([mem, mm])
    assert len(mem) == 256
    # Episode ends were recorded and sampled windows reach them.
    b = mem.get_transitions(mem.sampleable_ids())
    assert b.terminated.any() and b.truncated.any() and (b.steps < 3).any()
    assert b.obs.shape[1:] == (4, *FRAME)

    # The working files are in the directory, big enough for the frames.
    files = [p for p in store.iterdir() if p.is_file()]
    assert files
    assert any("obs" in p.name for p in files)
    assert sum(p.stat().st_size for p in files) >= 256 * FRAME_BYTES

    # Same state, array by array.
    sa, sb = mem.state_dict(), mm.state_dict()
    assert sa["meta"] == sb["meta"]
    assert sorted(sa["arrays"]) == sorted(sb["arrays"])
    for k, v in sa["arrays"].items():
        np.testing.assert_array_equal(v, sb["arrays"][k], err_msg=k)


def test_memmap_sampled_arrays_are_plain_in_memory_copies(tmp_path: Path) -> None:
    mm = make(64, storage="memmap", path=tmp_path / "s")
    feed(mm, seed=0, steps=100)
    for v in mm.sample(8).values():
        assert type(v) is np.ndarray  # not an np.memmap tied to a working file
        assert v.flags.writeable


def test_second_memmap_buffer_on_a_directory_does_not_share_the_first_ones_data(
    tmp_path: Path,
) -> None:
    # E.g. rr.load(ckpt, storage="memmap", path=DIR) while the buffer that saved ckpt still
    # runs on DIR. Refusing the directory is fine; silently sharing (or zeroing) files is not.
    store = tmp_path / "shared"
    first = make(64, storage="memmap", path=store)
    feed(first, seed=1, steps=100)
    ids = first.sampleable_ids()
    before = first.get_transitions(ids)
    try:
        second = make(64, storage="memmap", path=store)
    except rr.ConfigError as exc:
        assert "path" in str(exc)
    else:
        feed(second, seed=2, steps=100)
    assert_same_batches(before, first.get_transitions(ids))


# --------------------------------------------------------------------------- checkpoints
def test_load_into_memmap_gives_the_same_stream_as_load_into_memory(tmp_path: Path) -> None:
    src = make(256, 2)
    feed(src, seed=11, steps=700)
    src.sample(10)  # the generator has moved: the checkpoint must carry its state
    ckpt = tmp_path / "buf.rlr"
    src.save(ckpt)

    dir2 = tmp_path / "dir2"
    into_memory = rr.load(ckpt)
    into_memmap = rr.load(ckpt, storage="memmap", path=dir2)
    assert [p for p in dir2.iterdir() if p.is_file()]
    assert into_memory.nbytes == into_memmap.nbytes == src.nbytes

    bufs = [src, into_memory, into_memmap]
    for b in bufs[1:]:
        assert_same_contents(src, b)
    assert_same_stream(bufs)
    # Further writes (which wrap the ring and may grow the final-observation store) keep the
    # three in lockstep.
    for b in bufs:
        feed(b, seed=12, steps=400)
    for b in bufs[1:]:
        assert_same_contents(src, b)
    assert_same_stream(bufs)


def test_memmap_buffer_checkpoint_round_trip(tmp_path: Path) -> None:
    mm = make(128, storage="memmap", path=tmp_path / "a")
    feed(mm, seed=3, steps=300)
    mm.save(tmp_path / "ckpt")
    back = rr.load(tmp_path / "ckpt")
    assert_same_contents(mm, back)
    assert_same_stream([mm, back])


# --------------------------------------------------------------------------- one copy per frame
def test_atari_like_buffer_stores_each_frame_about_once() -> None:
    capacity = 10_000
    buf = make(capacity)
    rng = np.random.default_rng(0)
    block = frames(0, 260)
    written = 0
    while written < capacity + 2_000:  # wrap the ring so every slot holds a real frame
        T = int(rng.integers(150, 251))
        terminated = np.zeros(T, np.bool_)
        terminated[-1] = True
        buf.extend(
            obs=block[:T],
            action=np.zeros(T, np.int64),
            reward=np.ones(T, np.float32),
            next_obs=block[1 : T + 1],
            terminated=terminated,
            truncated=np.zeros(T, np.bool_),
        )
        written += T
    assert len(buf) == capacity
    one_copy = capacity * FRAME_BYTES
    assert one_copy <= buf.nbytes <= 1.05 * one_copy, buf.nbytes / one_copy
    b = buf.sample(4)
    assert b.obs.shape == (4, 4, *FRAME) and b.next_obs.shape == (4, 4, *FRAME)


# --------------------------------------------------------------------------- row gathers
@pytest.mark.parametrize(
    ("shape", "dtype"),
    [((), np.int64), ((4,), np.float32), ((2, 3), np.uint8), ((0,), np.float32), ((5,), np.bool_)],
)
def test_take_gathers_rows_like_fancy_indexing(shape: tuple[int, ...], dtype: Any) -> None:
    from rlreplay.storage.columns import _take, row_items

    rng = np.random.default_rng(0)
    col = (rng.random((50, *shape)) * 100).astype(dtype)
    rows = rng.integers(0, 50, (2, 7))
    out = _take(row_items(col), col, rows)
    np.testing.assert_array_equal(out, col[rows])
    assert out.dtype == col.dtype and out.shape == col[rows].shape
    out[...] = 0  # a fresh array: the column is untouched
    assert np.array_equal(col, (np.random.default_rng(0).random((50, *shape)) * 100).astype(dtype))
    strided = col[::2]  # not contiguous: plain fancy indexing
    np.testing.assert_array_equal(_take(row_items(strided), strided, rows % 25), strided[rows % 25])
