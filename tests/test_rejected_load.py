"""A refused ``load_state_dict`` leaves the buffer exactly as it was.

The states come from the checkpoint fuzzer's mutants (``tests/test_checkpoint_fuzz.py``):
array data rewritten (``mutate_data``: meaningless counters, slot records, final owners,
priorities) and header fields set to bad values (``mutate``'s field mutants: meta scalars,
shapes and dtypes of the arrays, a missing or repeated array), each turned into the state dict
the mutant describes. They are loaded into a buffer of the same configuration that holds
*other* contents, so any partial overwrite shows. For every refused state: the call raised
``rr.CheckpointError`` (never another exception), ``state_dict()`` equals the snapshot taken
before (meta and every array), and the buffer samples the same draws as a twin that was never
touched. States that load are put back to the snapshot in both. A malformed state (a missing
key, an array of another shape or dtype, a non-array) is refused before anything changes.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rlreplay as rr
from tests.test_checkpoint_fuzz import arrays_of, make_checkpoint, mutate, mutate_data, split


def state_of(data: bytes) -> dict[str, Any] | None:
    """The state dict a (mutated) checkpoint describes, or None if its header has no such form."""
    try:
        header, _ = split(data)
        meta = header["meta"]
        return {"class": meta["class"], "config": meta["config"], "meta": meta["state"],
                "arrays": arrays_of(data)}  # fmt: skip
    except Exception:  # the mutant's header is not even a table of arrays
        return None


def target_of(path: Path, **options: Any) -> rr.PrioritizedReplayBuffer:
    """A buffer of the checkpoint's configuration holding other steps (and another RNG state)."""
    buf = rr.load(path)
    assert isinstance(buf, rr.PrioritizedReplayBuffer)
    for t in range(100, 117):
        end = t % 5 == 0
        extra = {"next_obs": np.full((2, 3), 7.5, np.float32)} if end else {}
        buf.add(obs=np.full((2, 3), t, np.float32), action=np.array([t, 1 - t]),
                reward=np.full(2, 0.5, np.float32), terminated=np.array([False, end]),
                truncated=np.zeros(2, bool), **extra)  # fmt: skip
    buf.update_priorities(buf.sample(6).ids, np.arange(1.0, 7.0))
    return buf


def assert_same_state(a: dict[str, Any], b: dict[str, Any], where: str) -> None:
    assert a["config"] == b["config"] and a["meta"] == b["meta"], where
    assert set(a["arrays"]) == set(b["arrays"]), where
    for name, arr in a["arrays"].items():
        np.testing.assert_array_equal(arr, b["arrays"][name], err_msg=f"{where}: {name}")


def assert_same_draws(buf: rr.PrioritizedReplayBuffer, twin: rr.PrioritizedReplayBuffer) -> None:
    x, y = buf.sample(16), twin.sample(16)
    for name in x:
        np.testing.assert_array_equal(x[name], y[name], err_msg=name)


def run(tmp_path: Path, seed: int, count: int, **options: Any) -> dict[str, int]:
    source = tmp_path / "source"
    make_checkpoint(source, **options)
    data = source.read_bytes()
    buf, twin = target_of(source), target_of(source)
    before = buf.state_dict()
    rng = random.Random(seed)
    outcomes = {"refused": 0, "loaded": 0, "no state": 0}
    for i in range(count):
        mutant = mutate_data(data, rng) if i % 2 == 0 else mutate(data, rng)
        state = state_of(mutant)
        if state is None:
            outcomes["no state"] += 1
            continue
        where = f"mutant {i} (seed {seed})"
        try:
            buf.load_state_dict(state)
        except rr.CheckpointError:
            outcomes["refused"] += 1
            assert_same_state(buf.state_dict(), before, where)
            assert_same_draws(buf, twin)  # the same draws: both generators moved on alike
            before = buf.state_dict()
        except Exception as exc:
            raise AssertionError(f"{where} raised {exc!r}") from exc
        else:
            outcomes["loaded"] += 1
            buf.load_state_dict(before)
            twin.load_state_dict(before)
    buf.close()
    twin.close()
    return outcomes


@pytest.mark.parametrize("options", [{}, {"variant": "rank_based", "sort_interval": 1,
                                          "frame_stack": 2}])  # fmt: skip
def test_a_refused_state_leaves_the_buffer_unchanged(
    tmp_path: Path, options: dict[str, Any]
) -> None:
    outcomes = run(tmp_path, seed=3, count=120, **options)
    assert outcomes["refused"] >= 40, outcomes


@pytest.mark.slow
def test_a_refused_state_leaves_the_buffer_unchanged_10k(tmp_path: Path) -> None:
    outcomes = run(tmp_path, seed=4, count=10_000)
    assert outcomes["refused"] >= 3000, outcomes


def test_malformed_states_are_refused_before_anything_changes(tmp_path: Path) -> None:
    make_checkpoint(tmp_path / "source")
    buf = target_of(tmp_path / "source")
    good = rr.load(tmp_path / "source").state_dict()
    before = buf.state_dict()
    arrays = good["arrays"]
    name = "columns/steps/obs"
    bad: list[dict[str, Any]] = [
        {k: v for k, v in good.items() if k != "meta"},
        {**good, "arrays": {k: v for k, v in arrays.items() if k != name}},
        {**good, "arrays": {**arrays, "columns/steps/extra": arrays[name]}},
        {**good, "arrays": {**arrays, name: arrays[name][:1]}},  # would broadcast
        {**good, "arrays": {**arrays, name: arrays[name].astype(np.float64)}},
        {**good, "arrays": {**arrays, name: arrays[name].tolist()}},
        {**good, "config": {**good["config"], "gamma": 0.5}},
        {**good, "meta": {**good["meta"], "rng": "not a state"}},
        {**good, "meta": {**good["meta"], "finals_capacity": -1}},
    ]
    for i, state in enumerate(bad):
        with pytest.raises(rr.CheckpointError, match=r"load_state_dict|checkpoint"):
            buf.load_state_dict(state)
        assert_same_state(buf.state_dict(), before, f"malformed state {i}")
    buf.load_state_dict(good)  # and a good one still loads
    assert_same_state(buf.state_dict(), good, "good state")
    buf.close()


def test_a_refused_load_into_a_memmap_directory_leaves_it_free(tmp_path: Path) -> None:
    make_checkpoint(tmp_path / "source")
    data = (tmp_path / "source").read_bytes()
    rng = random.Random(5)
    store = tmp_path / "store"
    refused: list[rr.CheckpointError] = []  # kept alive, with their tracebacks
    for _ in range(20):
        (tmp_path / "mutant").write_bytes(mutate_data(data, rng))
        try:
            rr.load(tmp_path / "mutant", storage="memmap", path=store).close()
        except rr.CheckpointError as exc:
            refused.append(exc)
    assert len(refused) >= 5
    buf = rr.load(tmp_path / "source", storage="memmap", path=store)  # the directory is free
    assert len(buf) == len(rr.load(tmp_path / "source"))
    buf.close()
