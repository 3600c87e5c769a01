"""from_arrow / from_parquet: an export read back is the same buffer, transition for transition."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

import rlreplay as rr  # noqa: E402
from rlreplay.io import from_arrow, from_parquet  # noqa: E402
from rlreplay.io.arrow import INDEX_COLUMNS, column_to_numpy  # noqa: E402
from tests.io.conftest import FIELDS, Buffer, PBuffer, fill  # noqa: E402

Array = np.ndarray[Any, Any]


def same_bits(a: Array, b: Array, what: str) -> None:
    """Equal dtype, shape and bytes (NaN payloads and signs of zero included)."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, (what, a.dtype, b.dtype, a.shape, b.shape)
    assert np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes(), what


def id_offsets(src: Any) -> Array:
    """What each env's ids drop by in the rebuilt buffer (its steps are numbered from 0)."""
    return np.asarray(src.stored_range().first) * src.num_envs


def check_same_buffer(src: Any, dst: Any) -> None:
    """Every transition ``src`` can sample is in ``dst``, bit for bit, and so are its stored
    steps, episodes and final observations."""
    E = src.num_envs
    assert type(dst) is type(src) and dst.schema.fields == src.schema.fields
    for name in ("capacity", "num_envs", "n_step", "gamma", "frame_stack", "stack_pad", "seed"):
        assert getattr(dst, name) == getattr(src, name), name
    first, end = src.stored_range()
    dst_first, dst_end = dst.stored_range()
    np.testing.assert_array_equal(dst_first, 0)
    np.testing.assert_array_equal(dst_end, end - first)
    assert len(dst) == len(src)
    shift = id_offsets(src)

    def moved(ids: Array) -> Array:
        out: Array = ids - shift[ids % E]
        return out

    ids = src.sampleable_ids()
    theirs = set(dst.sampleable_ids().tolist())
    assert set(moved(ids).tolist()) <= theirs
    if src.frame_stack == 1:  # see from_arrow: stacks reaching overwritten frames
        assert theirs == set(moved(ids).tolist())
    if ids.size:
        a, b = src.get_transitions(ids), dst.get_transitions(moved(ids))
        assert set(a) == set(b)
        for name in a:
            if name == "ids":
                same_bits(moved(a[name]), b[name], name)
            else:
                same_bits(a[name], b[name], name)
    # Stored steps: raw values, episode ends, final observations (the episode view).
    runs = [np.arange(f, e) * E + k for k, (f, e) in enumerate(zip(first, end, strict=True))]
    stored = np.concatenate(runs)
    if stored.size:
        for name in src.schema.names:
            same_bits(src.get_field(name, stored), dst.get_field(name, moved(stored)), name)
        same_bits(src.steps_to_episode_end(stored), dst.steps_to_episode_end(moved(stored)), "end")
        ends = stored[src.steps_to_episode_end(stored) == 0]
        for i in ends:
            x, y = src.get_episode(int(i)), dst.get_episode(int(moved(np.array([i]))[0]))
            for name in x:
                if name == "ids":
                    same_bits(moved(x[name]), y[name], name)
                else:
                    same_bits(x[name], y[name], f"episode {i}: {name}")


@pytest.mark.parametrize("cls", [Buffer, PBuffer])
@pytest.mark.parametrize("num_envs", [1, 3])
@pytest.mark.parametrize("overwrite", [False, True])
def test_round_trip_every_transition(cls: Any, num_envs: int, overwrite: bool) -> None:
    src = cls(40 * num_envs, FIELDS, num_envs=num_envs, n_step=3, gamma=0.9, seed=5)
    fill(src, 70 if overwrite else 35, seed=num_envs, finish=False, abandon_p=0.05)
    assert (src.stored_range().first > 0).any() == overwrite
    dst = from_arrow(src.to_arrow(), cls=cls)
    check_same_buffer(src, dst)
    if not overwrite:  # the same ids, so the same draws from the same seed
        np.testing.assert_array_equal(dst.sampleable_ids(), src.sampleable_ids())
        a, b = src.sample(64), dst.sample(64)
        for name in a:
            same_bits(a[name], b[name], name)


def test_parquet_round_trip_with_frame_stacks_returns_and_options(tmp_path: Path) -> None:
    src = Buffer(
        90, FIELDS, num_envs=3, n_step=2, gamma=0.8, frame_stack=3, stack_pad="first",
        record_episodic_return=True, reward_clip=(-1.0, 1.0), recent_ratio=0.25, seed=3,
    )  # fmt: skip
    fill(src, 55, seed=9, finish=False, abandon_p=0.05)
    src.to_parquet(tmp_path / "steps.parquet", compression="zstd")
    dst = from_parquet(tmp_path / "steps.parquet")
    assert dst.record_episodic_return and dst.reward_clip == (-1.0, 1.0)
    assert dst.draw_options == src.draw_options
    check_same_buffer(src, dst)


def test_the_export_of_the_rebuilt_buffer_is_the_export() -> None:
    src = Buffer(60, FIELDS, num_envs=2, n_step=2, seed=0)
    fill(src, 20, seed=4, finish=False, abandon_p=0.1)
    table = src.to_arrow()
    again = from_arrow(table).to_arrow()
    assert again.column_names == table.column_names
    for name in table.column_names:  # nothing overwritten: the ids are the same too
        assert again.column(name).equals(table.column(name)), name
    assert again.schema.metadata == table.schema.metadata


def test_kwargs_override_the_exported_configuration() -> None:
    src = Buffer(30, FIELDS, n_step=3, seed=0)
    fill(src, 20, seed=1)
    dst = from_arrow(src.to_arrow(), cls=PBuffer, capacity=100, n_step=1, alpha=0.5, seed=7)
    assert isinstance(dst, PBuffer) and (dst.capacity, dst.n_step, dst.seed) == (100, 1, 7)
    assert len(dst) == len(src) and dst.num_sampleable == len(src)
    small = from_arrow(src.to_arrow(), capacity=10)  # keeps the newest steps
    np.testing.assert_array_equal(small.get_field("obs", np.arange(10, 20)),
                                  src.get_field("obs", np.arange(10, 20)))  # fmt: skip


def test_an_empty_buffer_round_trips() -> None:
    src = Buffer(16, FIELDS, num_envs=2, n_step=2, seed=0)
    dst = from_arrow(src.to_arrow())
    assert len(dst) == 0 and dst.capacity == 16 and dst.num_envs == 2


def test_tables_that_are_not_whole_exports_are_refused() -> None:
    src = Buffer(40, FIELDS, num_envs=2, n_step=1, seed=0)
    fill(src, 15, seed=2)
    table = src.to_arrow()
    with pytest.raises(rr.ConfigError, match="metadata b'rlreplay'"):
        from_arrow(table.replace_schema_metadata({}))
    with pytest.raises(rr.FieldError, match="next_frame"):
        from_arrow(table.drop_columns(["next_frame"]))
    with pytest.raises(rr.ConfigError, match="id: expected each env's ids"):
        from_arrow(table.take(np.r_[0:5, 6 : table.num_rows]))
    with pytest.raises(rr.ConfigError, match="num_envs: expected the table's 2"):
        from_arrow(table, num_envs=1)
    no_final = table.set_column(
        table.column_names.index("next_obs"), "next_obs",
        pa.nulls(table.num_rows, table.schema.field("next_obs").type),
    )  # fmt: skip
    with pytest.raises(rr.FieldError, match="next_obs: expected the final observation on row"):
        from_arrow(no_final)
    end = column_to_numpy(table, "episode_end")
    flipped = table.set_column(INDEX_COLUMNS.index("episode_end"), "episode_end", pa.array(~end))
    with pytest.raises(rr.ConfigError, match="episode_end: expected"):
        from_arrow(flipped)


def test_rows_in_any_order_give_the_same_buffer() -> None:
    src = Buffer(60, FIELDS, num_envs=3, n_step=2, seed=0)
    fill(src, 30, seed=8, finish=False, abandon_p=0.1)
    table = src.to_arrow()
    shuffled = table.take(np.random.default_rng(0).permutation(table.num_rows))
    check_same_buffer(src, from_arrow(shuffled))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    num_envs=st.integers(1, 3),
    env_capacity=st.integers(5, 12),
    n_steps=st.integers(0, 30),
    end_p=st.floats(0.0, 0.6),
    abandon_p=st.sampled_from([0.0, 0.1, 0.4]),
    n_step=st.integers(1, 3),
    frame_stack=st.integers(1, 2),
    seed=st.integers(0, 2**16),
)
def test_random_fills_round_trip(
    num_envs: int,
    env_capacity: int,
    n_steps: int,
    end_p: float,
    abandon_p: float,
    n_step: int,
    frame_stack: int,
    seed: int,
) -> None:
    capacity = max(env_capacity, n_step + frame_stack) * num_envs
    src = Buffer(capacity, FIELDS, num_envs=num_envs, n_step=n_step, frame_stack=frame_stack)
    fill(src, n_steps, seed=seed, end_p=end_p, finish=False, abandon_p=abandon_p)
    check_same_buffer(src, from_arrow(src.to_arrow()))
