"""to_arrow / to_pandas / to_parquet: every stored step, every field and every final
observation, as added."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from rlreplay.io.arrow import INDEX_COLUMNS, column_to_numpy  # noqa: E402
from tests.io.conftest import FIELDS, Buffer, PBuffer, fill  # noqa: E402


def expected_rows(buf: Any, rec: Any) -> list[dict[str, Any]]:
    """The rows a correct export has: the last env_capacity steps of each env, in order."""
    E, C = buf.num_envs, buf.env_capacity
    rows = []
    for e in range(E):
        steps = rec.steps[e]
        for step in steps[max(0, len(steps) - C) :]:
            t, start = step["_t"], step["_start"]
            abandoned = step["_abandoned"]
            ends = step["terminated"] or step["truncated"] or abandoned
            final = step["terminated"] or step["truncated"]
            rows.append(
                {"env_id": e, "episode_id": start * E + e, "step": t - start, "id": t * E + e,
                 "episode_end": ends, "episode_abandoned": abandoned,
                 **{k: step[k] for k in buf.schema.fields},
                 # The final observation on the row that ends its episode, null elsewhere.
                 **{"next_" + n: step["next_" + n] if final else None
                    for n in buf.schema.observation_names}}
            )  # fmt: skip
    return rows


def final_columns(buf: Any) -> list[str]:
    return ["next_" + n for n in buf.schema.observation_names]


def check_table(table: Any, buf: Any, rec: Any) -> None:
    rows = expected_rows(buf, rec)
    assert table.num_rows == len(rows)
    assert table.column_names == [*INDEX_COLUMNS, *buf.schema.names, *final_columns(buf)]
    for name in table.column_names:
        got = column_to_numpy(table, name)
        if name in final_columns(buf):
            f = buf.schema.fields[name[len("next_") :]]
            valid = np.array([r[name] is not None for r in rows], bool)
            np.testing.assert_array_equal(table.column(name).is_valid().to_numpy(), valid)
            assert got.dtype == f.dtype and got.shape == (len(rows), *f.shape), name
            want = np.zeros_like(got)  # null rows come back as zeros
            for i in np.flatnonzero(valid):
                want[i] = rows[i][name]
            np.testing.assert_array_equal(got, want, err_msg=name)
            continue
        want = np.array([r[name] for r in rows])
        if name in buf.schema.fields:
            f = buf.schema.fields[name]
            assert got.dtype == f.dtype and got.shape == (len(rows), *f.shape), name
            want = want.reshape(len(rows), *f.shape)
        np.testing.assert_array_equal(got, want.astype(got.dtype), err_msg=name)


@pytest.mark.parametrize("num_envs", [1, 3])
@pytest.mark.parametrize("n_steps", [0, 5, 40])
def test_arrow_matches_what_was_added(num_envs: int, n_steps: int) -> None:
    buf = Buffer(30 * num_envs, FIELDS, num_envs=num_envs, n_step=2, seed=0)
    rec = fill(buf, n_steps, seed=n_steps + num_envs, finish=False)
    table = buf.to_arrow()
    check_table(table, buf, rec)
    frame_type = table.schema.field("frame").type
    assert frame_type == pa.list_(pa.list_(pa.uint8(), 2), 2)  # nested fixed-size lists
    assert table.schema.field("next_frame").type == frame_type


def test_prioritized_and_parquet_round_trip(tmp_path: Any) -> None:
    buf = PBuffer(40, FIELDS, n_step=3, seed=1)
    rec = fill(buf, 70, seed=3)
    path = tmp_path / "steps.parquet"
    buf.to_parquet(path, compression="zstd")
    check_table(pq.read_table(path), buf, rec)


def test_pandas_cells_have_field_shapes() -> None:
    buf = Buffer(20, FIELDS, seed=0)
    rec = fill(buf, 12, seed=5)
    frame = buf.to_pandas()
    rows = expected_rows(buf, rec)
    assert list(frame.columns) == [*INDEX_COLUMNS, *buf.schema.names, *final_columns(buf)]
    assert len(frame) == len(rows)
    for i, row in enumerate(rows):
        for name in buf.schema.names:
            np.testing.assert_array_equal(np.asarray(frame[name].iloc[i]), row[name])
        for name in final_columns(buf):
            if row[name] is None:
                assert frame[name].iloc[i] is None, (i, name)
            else:
                np.testing.assert_array_equal(np.asarray(frame[name].iloc[i]), row[name])
    assert frame["episode_id"].tolist() == [r["episode_id"] for r in rows]


def test_complex_field_is_refused() -> None:
    from rlreplay.errors import FieldError

    buf = Buffer(8, {"obs": ((), np.complex64)})
    buf.add(obs=1j, reward=0.0, terminated=False, truncated=False)
    with pytest.raises(FieldError, match="complex"):
        buf.to_arrow()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    num_envs=st.integers(1, 3),
    env_capacity=st.integers(4, 12),
    n_steps=st.integers(0, 30),
    end_p=st.floats(0.0, 0.6),
    abandon_p=st.sampled_from([0.0, 0.1, 0.4]),
    n_step=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_random_fills_against_the_record(
    num_envs: int,
    env_capacity: int,
    n_steps: int,
    end_p: float,
    abandon_p: float,
    n_step: int,
    seed: int,
) -> None:
    buf = Buffer(env_capacity * num_envs, FIELDS, num_envs=num_envs, n_step=n_step, seed=0)
    rec = fill(buf, n_steps, seed=seed, end_p=end_p, finish=False, abandon_p=abandon_p)
    check_table(buf.to_arrow(), buf, rec)


@pytest.mark.parametrize("cls", [Buffer, PBuffer])
def test_abandoned_ends_are_marked_and_have_no_next_state(cls: Any, tmp_path: Any) -> None:
    buf = cls(60, FIELDS, num_envs=2, n_step=2, seed=0)
    rec = fill(buf, 40, seed=7, end_p=0.1, finish=False, abandon_p=0.1)
    path = tmp_path / "steps.parquet"
    buf.to_parquet(path)
    table = pq.read_table(path)
    check_table(table, buf, rec)
    end = column_to_numpy(table, "episode_end")
    abandoned = column_to_numpy(table, "episode_abandoned")
    term, trunc = column_to_numpy(table, "terminated"), column_to_numpy(table, "truncated")
    np.testing.assert_array_equal(abandoned, end & ~term & ~trunc)
    assert 0 < abandoned.sum() < end.sum()
    # An abandoned end is the step of its episode whose next observation is unknown, and it
    # is never sampleable (nor the n_step - 1 steps before it).
    ids = column_to_numpy(table, "id")
    sampleable = set(buf.sampleable_ids().tolist())
    for i in np.flatnonzero(end):
        ep = buf.get_episode(int(ids[i]))
        assert ep.ids[-1] == ids[i] and bool(ep.next_known[-1]) == (not abandoned[i])
        if abandoned[i]:
            assert not sampleable & set(ep.ids[-2:].tolist())


def test_import_loads_no_optional_library() -> None:
    import subprocess
    import sys

    code = (
        "import sys, rlreplay, rlreplay.io, rlreplay.io.arrow, rlreplay.io.minari, "
        "rlreplay.io.inspect, rlreplay.io.frameworks, rlreplay.cli\n"
        "heavy = {'pyarrow', 'pandas', 'minari', 'torch', 'jax', 'rich', 'matplotlib', 'tqdm',"
        " 'gymnasium'}\n"
        "print(sorted(heavy & set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
