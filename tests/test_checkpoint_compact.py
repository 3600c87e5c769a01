"""Checkpoints hold only what is stored, and round-trip exactly.

A file (format 2) holds of each per-slot array only the rows of stored steps and of each
per-final-record array only the live records: an empty buffer's file is small whatever its
capacity, a partly filled one's grows with what it stores. After ``rr.load`` the buffer has
the saved buffer's state dict, draws the same samples, goes on exactly as the saved one after
further calls, and saves back the same bytes. Random sequences of calls (Hypothesis) check it
over empty, partial, wrapped, dequeued, cleared and abandoned rings, one or several envs,
uniform and prioritized samplers, memory and memmap storage.
"""

from __future__ import annotations

import tracemalloc
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlreplay as rr
from rlreplay.checkpoint.file import CheckpointReader, Rows, write_checkpoint
from rlreplay.episodes.kernels import ring_runs

FIELDS = {"obs": rr.Field((3,), np.float32), "action": rr.Field((), np.int64)}
HEADER_BOUND = 16 * 1024  # header, per-env counters and 64-byte alignment of each array


def make(prioritized: bool = False, **options: Any) -> rr.ReplayBuffer:
    options.setdefault("seed", 3)
    if prioritized:
        return rr.PrioritizedReplayBuffer(options.pop("capacity", 24), FIELDS, **options)
    return rr.ReplayBuffer(options.pop("capacity", 24), FIELDS, **options)


def add_steps(buf: rr.ReplayBuffer, n: int, rng: np.random.Generator, p_end: float = 0.2) -> None:
    """``n`` steps of every env, episodes ending (terminated or truncated) with ``p_end``."""
    E = buf.num_envs
    for _ in range(n):
        end = rng.random(E) < p_end
        cut = end & (rng.random(E) < 0.3)
        values = {
            "obs": rng.normal(size=(E, 3)).astype(np.float32),
            "action": rng.integers(0, 9, E),
            "reward": rng.normal(size=E).astype(np.float32),
            "next_obs": rng.normal(size=(E, 3)).astype(np.float32),
            "terminated": end & ~cut,
            "truncated": cut,
        }
        if E == 1:
            values = {k: v[0] for k, v in values.items()}
        buf.add(**values)


def outcome(call: Any) -> Any:
    """A call's result as comparable data, or the type of the error it raised."""
    try:
        batch = call()
    except rr.ReplayError as exc:
        return type(exc)
    return {k: np.asarray(v) for k, v in batch.items()}


def assert_same_outcome(a: Any, b: Any) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        assert set(a) == set(b)
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    else:
        assert a == b


def assert_same_state(a: rr.ReplayBuffer, b: rr.ReplayBuffer) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa["meta"] == sb["meta"]
    assert set(sa["arrays"]) == set(sb["arrays"])
    for name, arr in sa["arrays"].items():
        assert arr.dtype == sb["arrays"][name].dtype, name
        np.testing.assert_array_equal(arr, sb["arrays"][name], err_msg=name)


def assert_same_future(a: rr.ReplayBuffer, b: rr.ReplayBuffer, seed: int = 0) -> None:
    """The same draws now, and after the same further steps and calls."""
    for round_ in range(2):
        assert_same_outcome(outcome(lambda: a.sample(8)), outcome(lambda: b.sample(8)))
        assert_same_outcome(
            outcome(lambda: a.sample_sequences(3, 4)), outcome(lambda: b.sample_sequences(3, 4))
        )
        if round_ == 0:
            for buf in (a, b):
                add_steps(buf, 7, np.random.default_rng(seed))
    assert_same_state(a, b)


def round_trip(buf: rr.ReplayBuffer, tmp_path: Path, **load: Any) -> rr.ReplayBuffer:
    """Save, load (with ``load``'s overrides) and check the state and the resaved bytes."""
    path = tmp_path / "a.ckpt"
    buf.save(path)
    loaded = rr.load(path, **load)
    assert_same_state(buf, loaded)
    if not load:  # (a memmap buffer's configuration names its storage)
        loaded.save(tmp_path / "b.ckpt")
        assert (tmp_path / "b.ckpt").read_bytes() == path.read_bytes()
    return loaded


# ------------------------------------------------------------------------------ ring runs
def test_ring_runs_golden() -> None:
    first, end = np.array([3, 0, 5, 8]), np.array([6, 2, 5, 12])
    np.testing.assert_array_equal(
        ring_runs(first, end, 4),
        [[3, 4], [0, 2], [4, 6], [12, 16]],  # env 0 wraps; env 2 holds nothing; env 3 is full
    )


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 7)), min_size=1, max_size=5))
@settings(max_examples=60, deadline=None)
def test_ring_runs_are_the_rows_of_the_items_in_order(envs: list[tuple[int, int]]) -> None:
    C = 7
    first = np.array([f for f, _ in envs], np.int64)
    end = first + np.array([n for _, n in envs], np.int64)
    runs = ring_runs(first, end, C)
    rows = np.concatenate([np.arange(a, b) for a, b in runs]) if len(runs) else np.zeros(0)
    want = [e * C + i % C for e, (f, n) in enumerate(envs) for i in range(f, f + n)]
    np.testing.assert_array_equal(rows, want)
    assert len(runs) <= 2 * len(envs) and (runs[:, 1] > runs[:, 0]).all()


# ------------------------------------------------------------------------------ sizes
def slot_and_final_bytes(buf: rr.ReplayBuffer, tmp_path: Path) -> tuple[int, int]:
    """Bytes of one slot's rows and one final record's rows over the buffer's arrays."""
    path = tmp_path / "probe.ckpt"
    buf.save(path)
    slot = final = 0
    for entry in CheckpointReader(path).table:
        row = np.dtype(entry["dtype"]).itemsize * int(np.prod(entry["shape"][1:]))
        if "final" in entry["name"]:
            final += row
        elif entry["name"] != "index/env" and "snapshot" not in entry["name"]:
            slot += row
    return slot, final


@pytest.mark.parametrize("prioritized", [False, True])
def test_an_empty_buffers_file_is_small_whatever_its_capacity(
    tmp_path: Path, prioritized: bool
) -> None:
    frames = {"obs": rr.Field((84, 84), np.uint8), "action": rr.Field((), np.int64)}
    options = {"variant": "rank_based"} if prioritized else {}
    cls = rr.PrioritizedReplayBuffer if prioritized else rr.ReplayBuffer
    buf = cls(40_000, frames, num_envs=4, **options)  # 282 MB of frames (never touched)
    buf.save(tmp_path / "empty.ckpt")
    size = (tmp_path / "empty.ckpt").stat().st_size
    assert size < HEADER_BOUND, size
    loaded = rr.load(tmp_path / "empty.ckpt")
    assert loaded.capacity == 40_000 and len(loaded) == 0 and loaded.num_envs == 4


@pytest.mark.parametrize("prioritized", [False, True])
def test_a_partial_buffers_file_grows_with_what_it_stores(
    tmp_path: Path, prioritized: bool
) -> None:
    options = {"variant": "rank_based", "sort_interval": 1} if prioritized else {}
    buf = make(prioritized, capacity=3000, num_envs=3, **options)
    add_steps(buf, 40, np.random.default_rng(0))
    slot, final = slot_and_final_bytes(buf, tmp_path)
    buf.save(tmp_path / "p.ckpt")
    size = (tmp_path / "p.ckpt").stat().st_size
    live = len(buf.episodes()) + 3 if hasattr(buf, "episodes") else 120  # (a bound suffices)
    assert size <= HEADER_BOUND + len(buf) * (slot + 8) + live * final, size
    full = sum(a.nbytes for a in buf.state_dict()["arrays"].values())
    assert size < full / 10  # (1.3% of the slots are stored)


# ------------------------------------------------------------------------------ round trips
@pytest.mark.parametrize(
    ("steps", "options"),
    [
        (0, {}),
        (5, {}),  # partial, one env
        (61, {"n_step": 3, "frame_stack": 2}),  # wrapped: oldest episode cut
        (17, {"num_envs": 3, "n_step": 2}),  # several envs, wrapped
        (40, {"prioritized": True, "num_envs": 2}),
        (40, {"prioritized": True, "variant": "rank_based", "sort_interval": 3}),
    ],
    ids=["empty", "partial", "wrapped", "multi-env", "proportional", "rank-based"],
)
def test_round_trip(tmp_path: Path, steps: int, options: dict[str, Any]) -> None:
    buf = make(**options)
    add_steps(buf, steps, np.random.default_rng(steps))
    if options.get("prioritized") and steps:
        batch = buf.sample(6)
        buf.update_priorities(batch["ids"], np.linspace(0.1, 5.0, 6))
    loaded = round_trip(buf, tmp_path)
    assert_same_future(buf, loaded)


def test_round_trip_after_dequeue_clear_and_abandon(tmp_path: Path) -> None:
    buf = make(True, num_envs=2, n_step=2, variant="rank_based", sort_interval=2)
    rng = np.random.default_rng(5)
    add_steps(buf, 30, rng)
    buf.dequeue(4)
    loaded = round_trip(buf, tmp_path)
    assert_same_future(buf, loaded)
    buf.abandon_episode(1)
    add_steps(buf, 3, rng)
    assert_same_future(buf, round_trip(buf, tmp_path))
    before = (tmp_path / "a.ckpt").stat().st_size
    buf.clear()
    cleared = round_trip(buf, tmp_path)
    empty = tmp_path / "empty.ckpt"
    fresh = make(True, num_envs=2, n_step=2, variant="rank_based", sort_interval=2)
    fresh.save(empty)
    # Nothing stored, nothing held: the size of a new buffer's file (the same header, give or
    # take the digits of its counters).
    after = (tmp_path / "a.ckpt").stat().st_size
    assert after < before and abs(after - empty.stat().st_size) < 256, (before, after)
    assert_same_future(buf, cleared)


@pytest.mark.parametrize("prioritized", [False, True])
def test_memmap_round_trip_streams_into_the_columns(tmp_path: Path, prioritized: bool) -> None:
    buf = make(prioritized, num_envs=2, n_step=2)
    add_steps(buf, 33, np.random.default_rng(9))
    loaded = round_trip(buf, tmp_path, storage="memmap", path=tmp_path / "mm")
    assert loaded._backend.kind == "memmap" and any((tmp_path / "mm").iterdir())
    assert_same_future(buf, loaded)
    loaded.close()


def test_a_memmap_load_makes_no_copy_of_the_stored_rows(tmp_path: Path) -> None:
    frames = {"obs": rr.Field((84, 84), np.uint8), "action": rr.Field((), np.int64)}
    buf = rr.ReplayBuffer(2000, frames, num_envs=2, seed=1)
    T = 700  # per env: env 0 wraps its ring of 1000 once extended twice
    obs = np.random.default_rng(0).integers(0, 255, (T, 84, 84), np.uint8)
    ends = np.arange(T) % 100 == 99
    for env_id in (0, 0, 1):
        buf.extend(env_id=env_id, obs=obs, action=np.arange(T), reward=np.ones(T, np.float32),
                   next_obs=obs, terminated=ends, truncated=np.zeros(T, bool))  # fmt: skip
    buf.save(tmp_path / "f.ckpt")
    size = (tmp_path / "f.ckpt").stat().st_size
    rr.load(tmp_path / "f.ckpt", storage="memmap", path=tmp_path / "warm").close()
    tracemalloc.start()
    try:
        loaded = rr.load(tmp_path / "f.ckpt", storage="memmap", path=tmp_path / "mm")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < size / 8, (peak, size)  # the frames went straight into the mapped columns
    assert_same_state(buf, loaded)
    assert_same_outcome(outcome(lambda: buf.sample(16)), outcome(lambda: loaded.sample(16)))
    loaded.close()


def test_a_version_1_file_saves_back_as_version_2_with_the_same_state(tmp_path: Path) -> None:
    data = Path(__file__).parent / "data" / "checkpoints"
    for name in ("uniform_envs", "rank_based"):
        old = rr.load(data / f"{name}.rlr")
        assert CheckpointReader(data / f"{name}.rlr").version == 1
        again = round_trip(old, tmp_path)
        assert CheckpointReader(tmp_path / "a.ckpt").version == 2
        assert_same_future(old, again)


def test_partial_arrays_before_the_counters_are_refused(tmp_path: Path) -> None:
    buf = make(num_envs=2)
    add_steps(buf, 5, np.random.default_rng(1))
    arrays = buf._state.file_arrays()
    order = ["columns/steps/obs", *[k for k in arrays if k != "columns/steps/obs"]]
    meta = {"class": "ReplayBuffer", "config": buf._config(), "state": buf._state.meta()}
    write_checkpoint(tmp_path / "x.ckpt", meta, {k: arrays[k] for k in order})
    with pytest.raises(rr.CheckpointError, match="before index/env"):
        rr.load(tmp_path / "x.ckpt")


def test_rows_write_and_read_runs_in_place(tmp_path: Path) -> None:
    src = np.arange(40, dtype=np.int64).reshape(10, 4)
    runs = np.array([[7, 10], [0, 2]], np.int64)
    write_checkpoint(tmp_path / "r", {}, {"a": Rows(src, runs), "b": src[:0]})
    reader = CheckpointReader(tmp_path / "r")
    assert reader.table[0]["shape"] == (5, 4)
    dest = np.full((10, 4), -1, np.int64)
    reader.read_into(lambda name, dtype, shape: Rows(dest, runs) if name == "a" else src[:0])
    want = np.full((10, 4), -1, np.int64)
    want[[7, 8, 9, 0, 1]] = src[[7, 8, 9, 0, 1]]
    np.testing.assert_array_equal(dest, want)


def test_rows_mix_runs_written_in_place_and_gathered(tmp_path: Path) -> None:
    """Runs of 16 KiB or more are written in place, smaller ones gathered: the same bytes."""
    src = np.random.default_rng(0).random((5000, 2, 4))  # 64-byte rows
    runs = np.array([[4000, 4003], [0, 1000], [1000, 1001], [2500, 4000], [4003, 4004]])
    runs = np.concatenate([runs, np.stack([np.arange(10, 900, 7), np.arange(11, 901, 7)], 1)])
    write_checkpoint(tmp_path / "r", {}, {"a": Rows(src, runs)})
    want = np.concatenate([src[a:b] for a, b in runs])
    reader = CheckpointReader(tmp_path / "r")
    flat = np.zeros_like(want)
    reader.read_into(lambda name, dtype, shape: flat)
    np.testing.assert_array_equal(flat, want)
    dest = np.zeros_like(src)
    reader.read_into(lambda name, dtype, shape: Rows(dest, runs))
    rows = np.concatenate([np.arange(a, b) for a, b in runs])
    np.testing.assert_array_equal(dest[rows], src[rows])


# ------------------------------------------------------------------------------ Hypothesis
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(1, 9)),
        st.tuples(st.just("extend"), st.integers(1, 30)),
        st.tuples(st.just("dequeue"), st.integers(1, 6)),
        st.tuples(st.just("clear"), st.just(0)),
        st.tuples(st.just("abandon"), st.integers(0, 1)),
        st.tuples(st.just("sample"), st.integers(1, 5)),
    ),
    max_size=8,
)
CONFIGS = st.fixed_dictionaries(
    {
        "num_envs": st.sampled_from([1, 2]),
        "capacity": st.sampled_from([8, 12, 20]),
        "n_step": st.sampled_from([1, 2]),
        "frame_stack": st.sampled_from([1, 2]),
        "prioritized": st.booleans(),
        "variant": st.sampled_from(["proportional", "rank_based"]),
    }
)


def apply(buf: rr.ReplayBuffer, ops: list[tuple[str, int]], seed: int) -> None:
    rng = np.random.default_rng(seed)
    for op, n in ops:
        try:
            if op == "add":
                add_steps(buf, n, rng, p_end=0.25)
            elif op == "extend":
                end = rng.random(n) < 0.2
                buf.extend(
                    env_id=int(rng.integers(buf.num_envs)),
                    obs=rng.normal(size=(n, 3)).astype(np.float32),
                    action=rng.integers(0, 9, n),
                    reward=rng.normal(size=n).astype(np.float32),
                    next_obs=rng.normal(size=(n, 3)).astype(np.float32),
                    terminated=end,
                    truncated=np.zeros(n, bool),
                )
            elif op == "dequeue":
                buf.dequeue(n)
            elif op == "clear":
                buf.clear()
            elif op == "abandon":
                buf.abandon_episode(min(n, buf.num_envs - 1))
            elif op == "sample":
                batch = buf.sample(n)
                if isinstance(buf, rr.PrioritizedReplayBuffer):
                    buf.update_priorities(batch["ids"], rng.random(n) * 4.0)
        except rr.ReplayError:  # (a refused call changes nothing)
            pass


def check_random_round_trip(
    tmp_path: Path, config: dict[str, Any], ops: list[tuple[str, int]], seed: int, memmap: bool
) -> None:
    config = dict(config)
    prioritized = config.pop("prioritized")
    variant = config.pop("variant")
    options: dict[str, Any] = {"variant": variant} if prioritized else {}
    if prioritized and variant == "rank_based":
        options["sort_interval"] = 2
    buf = make(prioritized, **config, **options)
    apply(buf, ops, seed)
    for f in tmp_path.glob("*.ckpt"):
        f.unlink()
    if memmap:
        where = tmp_path / f"mm-{uuid.uuid4().hex}"  # (examples share tmp_path)
        loaded = round_trip(buf, tmp_path, storage="memmap", path=where)
    else:
        loaded = round_trip(buf, tmp_path)
    try:
        assert_same_future(buf, loaded, seed)
        apply(buf, ops, seed + 1)
        apply(loaded, ops, seed + 1)
        assert_same_future(buf, loaded, seed + 2)
    finally:
        loaded.close()


@given(config=CONFIGS, ops=OPS, seed=st.integers(0, 2**16), memmap=st.booleans())
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_random_calls_round_trip(
    tmp_path: Path, config: dict[str, Any], ops: list[tuple[str, int]], seed: int, memmap: bool
) -> None:
    check_random_round_trip(tmp_path, config, ops, seed, memmap)


@pytest.mark.slow
@given(config=CONFIGS, ops=OPS, seed=st.integers(0, 2**16), memmap=st.booleans())
@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_random_calls_round_trip_many(
    tmp_path: Path, config: dict[str, Any], ops: list[tuple[str, int]], seed: int, memmap: bool
) -> None:
    check_random_round_trip(tmp_path, config, ops, seed, memmap)
